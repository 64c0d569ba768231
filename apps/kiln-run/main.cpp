// kiln-run: starts the processes of a distributed job, torchrun-style
// (Note [Launcher environment] in apps/kiln-run/launcher.h; `kiln-run
// --help` lists the flags).
//
//   kiln-run --nproc-per-node 4 ./train --epochs 3
//   kiln-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 ./train
//   mpirun -np 2 --map-by ppr:1:node -x MASTER_ADDR -x MASTER_PORT kiln-run --nproc-per-node 8 ./train
#include <fcntl.h>
#include <unistd.h>

#include <exception>
#include <iostream>

#include "apps/kiln-run/launcher.h"
#include "apps/kiln-run/options.h"
#include "apps/kiln-run/plan.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  using namespace kiln::apps::run;
  // A pipe kiln-run makes must never land on 0, 1 or 2 if it was started
  // with one of them closed: the processes' stdio would get mixed up.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
  LaunchPlan plan;
  try {
    CommandLine command_line = parse_command_line(argc, argv);
    if (!command_line.options) return command_line.exit_code;
    plan = resolve_plan(*command_line.options, current_environment(),
                        command_line.options->bind_cores ? allowed_cores() : std::vector<int>{});
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-run: " << e.message() << "\n";
    return kUsageExitCode;
  }
  try {
    return launch(plan, current_environment());
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-run: " << e.message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "kiln-run: " << e.what() << "\n";
  }
  return 1;
}
