// ProcessGroupMPI: the collectives of process_group.h over MPI, for jobs
// started by mpirun.
//
//   // mpirun -np 4 ./train
//   auto world = ProcessGroupMPI::create_world({});   // rank and size from MPI
//   world->all_reduce(grad)->wait();
//
// or through init.h: init_process_group("mpi") (no init_method needed).
//
// MPI is initialised on first use with MPI_THREAD_SERIALIZED and finalised
// at process exit (so create the first group on the main thread: MPI wants
// the thread that initialised it to finalise it); a program that
// initialised MPI itself keeps it (it must grant at least
// MPI_THREAD_SERIALIZED, and the program then finalises it).
// Started without mpirun, MPI runs as a "singleton": a world of one process.
//
// Tensors must be on the CPU: this backend does not hand device pointers to
// MPI (a CUDA-aware MPI could take them, but NCCL is the backend for CUDA
// tensors), and check_device() says so rather than copying through host
// memory behind the caller's back.
//
// Note [MPI threading]
// Each group owns a duplicate of its communicator (MPI_Comm_dup of
// MPI_COMM_WORLD for the world), so Kiln's traffic never matches a message
// of the program's own MPI code, and one communication thread that runs the
// group's operations in the order they were queued (OperationQueue). Several
// groups mean several threads; MPI_THREAD_SERIALIZED lets any thread call
// MPI as long as no two do at once, so every MPI call in Kiln is made under
// one process-wide lock (mpi_runtime.h). (A program that calls MPI itself
// while Kiln's threads run must have asked for MPI_THREAD_MULTIPLE.)
//
// MPI has no timeouts: a blocking MPI_Allreduce whose peer never arrives
// never returns. So the thread never blocks in MPI. It posts each operation
// non-blocking (MPI_Iallreduce, MPI_Ibcast, ..., MPI_Isend, MPI_Irecv) and
// polls MPI_Test, taking the lock for each test, so that
// - a wait on the Work can time out: the front-end then raises an error that
//   names the collective and the ranks that did not reach it;
// - other groups' threads get the lock between polls.
// What it cannot do is take back a collective that timed out: MPI cannot
// cancel one, and the ranks now disagree about which collective comes next.
// The group is then unusable (the front-end says so) and the job should be
// ended with abort(), which takes every rank down.
//
// Order: a collective holds the queue until it completes, so that
// all_reduce(t) queued twice sums twice, as on Gloo. A send or recv is
// posted and then completes in the background while the queue moves on:
// two ranks that each send to the other and then receive would otherwise
// both wait forever for a recv that sits behind their own send. MPI matches
// sends and recvs of one (peer, tag) in the order they were posted, which is
// the queue's order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/store.h"

namespace kiln::distributed {

namespace mpi {
class OperationQueue;
}

class ProcessGroupMPI : public ProcessGroup {
 public:
  // The group of all processes of MPI_COMM_WORLD; every process must call
  // it (it duplicates MPI_COMM_WORLD, a collective call). Rank and size come
  // from MPI; options.global_ranks must be empty.
  //
  // Without a `store`, one is made so that a failing collective can report
  // which ranks reached it (Note [Collective progress]): rank 0 serves a
  // TCPStore on a free port, on every network interface, and broadcasts its
  // host name and the port over MPI. A rank on the same host as rank 0 (same
  // MPI_Get_processor_name) connects through 127.0.0.1, which works whatever
  // the host name resolves to inside containers; a rank on another host
  // connects to rank 0's host name, the name mpirun itself used to start it
  // there. KILN_MPI_STORE_HOST, when set, is the address every other rank
  // connects to instead (for hosts whose names do not resolve).
  //
  // `expected_world_size`, when positive, is the size the caller asked for
  // (init_process_group's world_size): a program started without mpirun, or
  // with another -np, then fails at once with a message saying how to start
  // it, instead of running as a world of the wrong size.
  //
  // Throws kiln::Error if MPI cannot be initialised at MPI_THREAD_SERIALIZED,
  // or if the other ranks do not join within options.timeout.
  static std::shared_ptr<ProcessGroupMPI> create_world(ProcessGroupOptions options,
                                                       std::shared_ptr<Store> store = nullptr,
                                                       int expected_world_size = -1);

  // The number of processes mpirun started (MPI_COMM_WORLD's size); 1 for a
  // program started without mpirun. Initialises MPI.
  static int world_size();

  ~ProcessGroupMPI() override;

  std::string backend_name() const override { return "mpi"; }
  // Throws for anything but the CPU.
  void check_device(const Device& device, const char* op) const override;

  // Ends every process of the job with exit code `code` (MPI_Abort on
  // MPI_COMM_WORLD). The way out after a collective timed out: MPI cannot
  // cancel it, and the ranks can no longer agree on what to run next.
  [[noreturn]] void abort(int code) const;

 protected:
  WorkPtr run_all_reduce(const Tensor& tensor, ReduceOp op) override;
  WorkPtr run_broadcast(const Tensor& tensor, int root) override;
  WorkPtr run_reduce(const Tensor& tensor, int root, ReduceOp op) override;
  WorkPtr run_all_gather(const Tensor& output, const Tensor& input) override;
  WorkPtr run_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkPtr run_gather(const Tensor& output, const Tensor& input, int root) override;
  WorkPtr run_scatter(const Tensor& output, const Tensor& input, int root) override;
  WorkPtr run_all_to_all(const Tensor& output, const Tensor& input) override;
  WorkPtr run_barrier() override;
  WorkPtr run_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr run_recv(const Tensor& tensor, int src, int tag) override;
  std::shared_ptr<ProcessGroup> run_new_subgroup(const std::vector<int>& ranks, std::shared_ptr<Store> store,
                                                 ProcessGroupOptions options) override;

 private:
  ProcessGroupMPI(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                  std::unique_ptr<mpi::OperationQueue> queue);

  // A barrier on the new group's communicator (not one of its collectives:
  // no sequence number), once every rank has constructed it.
  void wait_for_all_ranks(const char* what);

  std::unique_ptr<mpi::OperationQueue> queue_;
};

}  // namespace kiln::distributed
