#include "apps/common/data_parallel_run.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "apps/common/run_setup.h"
#include "distributed/ddp/training_helpers.h"
#include "distributed/init.h"
#include "tensor/error.h"

namespace kiln::apps {

namespace {

// Seconds as init_process_group takes them: 0 stays 0 (the environment's
// or the default), anything else is at least a millisecond.
std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

}  // namespace

void check_process_group_flags(const ProcessGroupFlags& flags, bool distributed) {
  KILN_CHECK(flags.backend == "gloo" || flags.backend == "mpi" || flags.backend == "nccl",
             "--backend: unknown backend '", flags.backend, "' (expected gloo, mpi or nccl)");
  KILN_CHECK(distributed || flags.backend == "gloo", "--backend ", flags.backend, " only goes with --ddp, --fsdp or --pp");
  const std::pair<const char*, double> timeouts[] = {{"--timeout", flags.timeout},
                                                     {"--heartbeat-timeout", flags.heartbeat_timeout}};
  for (auto [flag, seconds] : timeouts) {
    KILN_CHECK(std::isfinite(seconds) && seconds >= 0 && seconds <= kMaxTimeoutSeconds, flag,
               " must be a positive number of seconds up to ", kMaxTimeoutSeconds, " (0: the default), got ", seconds);
    KILN_CHECK(seconds == 0 || distributed, flag, " only goes with --ddp, --fsdp or --pp");
  }
}

void add_data_parallel_flags(CLI::App& app, const DataParallelFlagTargets& targets, const std::string& command) {
  app.add_flag("--ddp", targets.ddp,
               "train with DistributedDataParallel over the processes kiln-run starts (kiln-run --nproc-per-node N " +
                   command + " --ddp ...); --batch-size is per process, rank 0 prints and saves");
  app.add_flag("--fsdp", targets.fsdp,
               "train with FullyShardedDataParallel over the processes kiln-run starts, each holding 1/N of the "
               "parameters, gradients and optimizer state; otherwise as --ddp");
  app.add_option("--fsdp-strategy", targets.fsdp_strategy,
                 "with --fsdp: full_shard, shard_grad_op (parameters kept gathered from forward to backward), "
                 "no_shard (as DDP) or hybrid_shard (sharded within a machine, replicated across machines)")
      ->capture_default_str();
  app.add_option("--backend", targets.backend,
                 "the process group's backend with --ddp, --fsdp or --pp: gloo, mpi or nccl")
      ->capture_default_str();
}

DataParallelRun start_data_parallel(const ProcessGroupFlags& flags, const std::string& mode_flag) {
  DataParallelRun run;
  if (!distributed::is_initialized()) {
    distributed::init_process_group(flags.backend, "env://", -1, -1, to_milliseconds(flags.timeout),
                                    to_milliseconds(flags.heartbeat_timeout));
    run.initialized_here = true;
  }
  run.group = distributed::default_group_ptr();
  KILN_CHECK(run.group->backend_name() == flags.backend, mode_flag, ": the default process group uses ",
             run.group->backend_name(), " but --backend is ", flags.backend);
  run.rank = run.group->rank();
  run.world_size = run.group->size();
  run.local_world_size = run.world_size;
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE")) {
    const int n = std::atoi(local);
    if (n >= 1 && n <= run.world_size) run.local_world_size = n;
  }
  return run;
}

void finish_data_parallel(DataParallelRun& run) {
  if (run.initialized_here) distributed::destroy_process_group();
  run.group.reset();
}

void check_outputs_on_main(const std::vector<std::pair<std::string, std::string>>& flags_and_paths,
                           const DataParallelRun& run) {
  std::string problem;
  if (run.is_main()) {
    for (const auto& [flag, path] : flags_and_paths) {
      if (problem.empty()) problem = output_problem(flag, path);
    }
  }
  const bool failed = run.group ? distributed::any_rank_wants(!problem.empty(), *run.group) : !problem.empty();
  KILN_CHECK(!failed,
             problem.empty() ? "rank 0 cannot write its outputs (--save, --log or --plot; see its error)" : problem);
}

}  // namespace kiln::apps
