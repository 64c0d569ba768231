// The process-wide side of the MPI backend: initialising and finalising MPI,
// the lock every MPI call is made under, errors, and polling a request
// until it completes or a deadline passes.
//
// Only the MPI backend's own sources include this header (it includes
// <mpi.h>, which libkiln's users need not have). Note [MPI threading] in
// process_group_mpi.h says why MPI runs at MPI_THREAD_SERIALIZED behind one
// lock and why requests are polled rather than waited for.
#pragma once

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>

namespace kiln::distributed::mpi {

// Initialises MPI on first use with MPI_Init_thread(MPI_THREAD_SERIALIZED)
// and registers MPI_Finalize to run at process exit. When the program has
// initialised MPI itself, that is used as it is (and not finalised by Kiln)
// provided it granted at least MPI_THREAD_SERIALIZED; otherwise throws.
// Throws as well if MPI was already finalised.
void ensure_initialized();

// Whether the environment said, before MPI was initialised, that a launcher
// (mpirun, or a PMI/PMIx one such as srun) started this process; false for a
// singleton. Call after ensure_initialized().
bool started_by_launcher();

// The lock that makes Kiln's MPI calls one at a time across all threads, as
// MPI_THREAD_SERIALIZED requires. Hold it around every MPI call.
std::unique_lock<std::mutex> lock();

// True once the exit handler has finalised MPI; no MPI call may be made
// after that. Call with lock() held.
bool finalized();

// Ends every process of the job with exit code `code` (MPI_Abort on
// MPI_COMM_WORLD). Waits at most a second for the lock: a thread may sit in
// a blocking MPI call, and ending the job matters more than serialising.
[[noreturn]] void abort_job(int code);

// This process's rank in MPI_COMM_WORLD (-1 before MPI is initialised), for
// error messages.
int world_rank();

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string error_string(int code);

// Throws kiln::Error "mpi: <what> failed on world rank R: <MPI's message>"
// unless `code` is MPI_SUCCESS.
void check(int code, const std::string& what);

// Sleeps between polls of a request that has not completed: yields at first,
// so that a collective that is about to finish does not pay a sleep, then
// sleeps in steps that grow to a millisecond, so that a rank waiting for a
// slow peer does not take a core from it (mpirun --oversubscribe runs
// several ranks per core).
class Backoff {
 public:
  void pause();
  void reset() { polls_ = 0; }

 private:
  int polls_ = 0;
};

// Polls `request` (taking lock() for each MPI_Test) until it completes or
// `timeout` passes; returns false in the second case and leaves the request
// pending. Throws through check() if MPI reports an error. Used outside the
// communication threads: by create_world's rendezvous and by sub-group
// creation.
bool wait_request(MPI_Request& request, std::chrono::milliseconds timeout, const std::string& what);

}  // namespace kiln::distributed::mpi
