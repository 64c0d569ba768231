// kiln-lenet: trains LeNet-5 on CIFAR-10 from the command line (apps/lenet/
// options.h lists the flags; `kiln-lenet --help` prints them).
//
//   kiln-lenet --data data --epochs 30 --log run.jsonl --plot run.svg --save run.ckpt
//   kiln-lenet --data data --resume run.ckpt          # after Ctrl-C
//   kiln-lenet --data data --eval-only --resume run.ckpt
//   kiln-lenet --data data --weights lenet.safetensors --quantize dynamic,static,qat
#include <exception>
#include <iostream>

#include "apps/common/interrupt.h"
#include "apps/common/progress.h"
#include "apps/lenet/options.h"
#include "apps/lenet/quantize.h"
#include "apps/lenet/trainer.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  using namespace kiln::apps;
  using namespace kiln::apps::lenet;
  try {
    CommandLine command_line = parse_command_line(argc, argv);
    if (!command_line.options) return command_line.exit_code;
    const TrainerOptions& options = *command_line.options;
    // Without --save there is nothing to keep: Ctrl-C ends the process as usual.
    if (!options.save.empty() && !options.eval_only) install_interrupt_handlers();
    ignore_file_size_signal();
    if (!options.quantize.empty()) {
      QuantizeReportOptions q{.model = options.model,
                              .weights = options.weights.empty() ? options.resume : options.weights,
                              .data = options.data,
                              .modes = options.quantize,
                              .calib_images = options.calib_images,
                              .qat_epochs = options.qat_epochs,
                              .reduce_range = options.reduce_range,
                              .seed = options.seed,
                              .sensitivity = options.sensitivity};
      QuantizeReport report = quantization_report(q, std::cout);
      std::cout << format_quantization_table(report);
      if (options.sensitivity) std::cout << "\n" << format_sensitivity_table(report);
      return 0;
    }
    TrainerHooks hooks;
    hooks.interactive = stdout_is_terminal();
    TrainingResult result = run_training(options, hooks);
    // 128 + SIGINT, what a shell reports for a process Ctrl-C ended.
    if (result.status == RunStatus::Interrupted) return 130;
  } catch (const kiln::Error& e) {
    std::cout.flush();
    std::cerr << "kiln-lenet: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "kiln-lenet: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
