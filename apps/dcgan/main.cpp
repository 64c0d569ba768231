// kiln-dcgan: trains a DCGAN on CIFAR-10 and writes a grid of its samples
// as a PNG (apps/dcgan/options.h lists the flags; `kiln-dcgan --help`
// prints them).
//
//   kiln-dcgan --data data --steps 2000 --samples grid.png --log run.jsonl --save run.ckpt
//   kiln-dcgan --data data --steps 4000 --samples grid.png --save run.ckpt --resume run.ckpt   # 2000 more
#include <exception>
#include <iostream>

#include "apps/common/interrupt.h"
#include "apps/dcgan/options.h"
#include "apps/dcgan/trainer.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  using namespace kiln::apps;
  using namespace kiln::apps::dcgan;
  try {
    CommandLine command_line = parse_command_line(argc, argv);
    if (!command_line.options) return command_line.exit_code;
    const TrainOptions& options = *command_line.options;
    // Without --save there is nothing to keep: Ctrl-C ends the process as usual.
    if (!options.save.empty()) install_interrupt_handlers();
    ignore_file_size_signal();
    TrainingResult result = run_training(options);
    // 128 + SIGINT, what a shell reports for a process Ctrl-C ended.
    if (result.status == RunStatus::Interrupted) return 130;
  } catch (const kiln::Error& e) {
    std::cout.flush();
    std::cerr << "kiln-dcgan: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "kiln-dcgan: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
