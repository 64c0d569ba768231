// Ctrl-C in a training app: the first SIGINT or SIGTERM asks the run to stop
// at its next step (it then writes its checkpoint and exits with 130); a
// second one ends the process as usual.
//
//   if (!options.save.empty()) install_interrupt_handlers();
//   ...
//   if (interrupt_requested()) { SavingCheckpoint saving(path); save(path); return Interrupted; }
#pragma once

#include <string>

namespace kiln::apps {

// SIGINT and SIGTERM set a flag that interrupt_requested() reads; a second
// signal ends the process as usual, removing the temporary file of a
// checkpoint being written (the previous checkpoint stays intact).
void install_interrupt_handlers();
// Writing past the file size limit (ulimit -f) fails with EFBIG instead of
// killing the process with SIGXFSZ, so that the failing write's temporary
// file is removed and the error names the file.
void ignore_file_size_signal();
bool interrupt_requested();
// Clears the flag (tests that run several interrupted runs in one process).
void reset_interrupt_request();

// While one exists, a second signal removes the temporary file that
// save_safetensors writes `path` through (safetensors_temp_path(path))
// before the process ends. One at a time.
class SavingCheckpoint {
 public:
  explicit SavingCheckpoint(const std::string& path);
  SavingCheckpoint(const SavingCheckpoint&) = delete;
  SavingCheckpoint& operator=(const SavingCheckpoint&) = delete;
  ~SavingCheckpoint();
};

}  // namespace kiln::apps
