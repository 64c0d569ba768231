// kiln-run's launcher: serves the store, starts the processes of one node,
// passes their output on and stops them all when one of them fails.
//
//   LaunchPlan plan = resolve_plan(options, current_environment());
//   return launch(plan, current_environment());   // kiln-run's exit code
//
// Note [Launcher environment]
// kiln-run follows torchrun, so that a program written for one runs under
// the other. On each of --nnodes machines one kiln-run starts
// --nproc-per-node processes and tells each its place through the
// environment:
//   RANK              node_rank * nproc_per_node + local rank   (0 .. WORLD_SIZE-1)
//   WORLD_SIZE        nnodes * nproc_per_node
//   LOCAL_RANK        the process's index on this node (which GPU it takes)
//   LOCAL_WORLD_SIZE  processes on this node
//   GROUP_RANK        the node rank;  GROUP_WORLD_SIZE: nnodes
//   MASTER_ADDR, MASTER_PORT   where node 0's store listens
//   KILN_STORE_SERVED_BY_LAUNCHER=1
//   OMP_NUM_THREADS=1 when more than one process shares the node and the
//                     variable is not set (as torchrun, which says so once)
//   KILN_DISTRIBUTED_TIMEOUT, KILN_HEARTBEAT_TIMEOUT   from --timeout and
//                     --heartbeat-timeout, when given. The launcher itself
//                     waits on no rendezvous (node 0's only serves the store),
//                     so these bound the processes' rendezvous and collectives.
// Everything else of kiln-run's own environment is passed on.
//
// The store. torchrun's agent on node 0 hosts the rendezvous store, and
// kiln-run does the same: the kiln-run of node 0 runs a TCPStoreServer on
// MASTER_PORT for as long as its processes run. KILN_STORE_SERVED_BY_LAUNCHER=1
// tells init_process_group("...", "env://") that the store exists already,
// so rank 0 connects to it as a client like every other rank instead of
// trying to serve it (its bind() would fail: the port is taken). The store
// outlives rank 0 that way, too. --master-port 0 picks a free port (kiln-run
// prints it; processes get the real one), so that jobs on one machine do not
// clash. kiln-run on other nodes serves nothing; it needs node 0's
// --master-addr and --master-port.
//
// Started by mpirun or srun. A cluster's own launcher can start kiln-run
// instead of a person: `mpirun -np 4 --map-by ppr:1:node kiln-run
// --nproc-per-node 8 train` or `srun --ntasks-per-node 1 kiln-run
// --nproc-per-node 8 train`. When neither --nnodes nor --node-rank is given
// and the task variables are set (detect_scheduler_task in plan.h), each
// task is one node: node rank = the task's rank, nnodes = the task count.
// Without --nproc-per-node the task runs a single process in its own place
// instead (`srun -n 16 kiln-run train`: RANK = the task's rank, LOCAL_RANK
// = its rank on its machine). mpirun and srun pass MASTER_ADDR and
// MASTER_PORT on from the environment, so those are read when the flags
// are absent; nothing guesses node 0's address from a Slurm node list.
//
// Output and failures. Each process's stdout and stderr come through pipes;
// kiln-run writes every complete line as "[rank R] line" to its own stdout
// or stderr (rank_output.h). Every process runs in a process group of its
// own. When one exits non-zero or is killed by a signal, kiln-run sends
// SIGTERM to the groups of all the others (and to the failed one's, for
// what it left running), SIGKILL to those still there --term-timeout
// seconds later, and, once all are reaped, names the failed rank, its pid
// and status and prints its last lines; it exits with that process's exit
// code (128 + signal number for a killed one). SIGINT, SIGTERM, SIGHUP and
// SIGQUIT sent to kiln-run itself go on to every group (a second one kills
// them at once), and kiln-run exits with 128 + the signal's number. The
// processes are kiln-run's children only: when one node fails, the
// processes of the other nodes learn it from their collectives' timeouts.
#pragma once

#include "apps/kiln-run/plan.h"

namespace kiln::apps::run {

// Runs `plan` to the end and returns kiln-run's exit code: 0 when every
// process exited 0; the failed process's code; 128 + signal number when
// kiln-run was signalled; 127 (126) when the program is not found (cannot
// be executed). Messages go to stderr, prefixed "kiln-run: ". Throws
// kiln::Error before starting anything when node 0's store cannot listen.
// `env` is the environment the processes inherit.
int launch(const LaunchPlan& plan, const Environment& env);

}  // namespace kiln::apps::run
