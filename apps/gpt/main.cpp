// kiln-gpt: trains a GPT on text and samples from it, as nanoGPT
// (apps/gpt/options.h lists the flags; `kiln-gpt train --help` prints them).
//
//   kiln-gpt train --log run.jsonl --plot run.svg --save run.ckpt    # the default recipe on the fortunes corpus
//   kiln-gpt train --save run.ckpt --resume run.ckpt                 # after Ctrl-C
//   kiln-gpt sample --checkpoint run.ckpt --prompt "Q: " --max-new-tokens 300
#include <exception>
#include <iostream>

#include "apps/common/interrupt.h"
#include "apps/common/progress.h"
#include "apps/gpt/options.h"
#include "apps/gpt/sampler.h"
#include "apps/gpt/trainer.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  using namespace kiln::apps;
  using namespace kiln::apps::gpt;
  try {
    CommandLine command_line = parse_command_line(argc, argv);
    if (command_line.sample) {
      run_sampling(*command_line.sample);
      return 0;
    }
    if (!command_line.train) return command_line.exit_code;
    const TrainOptions& options = *command_line.train;
    // Without --save there is nothing to keep: Ctrl-C ends the process as usual.
    if (!options.save.empty()) install_interrupt_handlers();
    ignore_file_size_signal();
    TrainerHooks hooks;
    hooks.interactive = stdout_is_terminal();
    TrainingResult result = run_training(options, hooks);
    // 128 + SIGINT, what a shell reports for a process Ctrl-C ended.
    if (result.status == RunStatus::Interrupted) return 130;
  } catch (const kiln::Error& e) {
    std::cout.flush();
    std::cerr << "kiln-gpt: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "kiln-gpt: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
