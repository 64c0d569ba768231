#include "apps/common/interrupt.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "tensor/safetensors.h"

namespace kiln::apps {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
// While a checkpoint is written: set, with its temporary file's name in
// g_save_temp (written before the flag is set, read only by the handler).
volatile std::sig_atomic_t g_saving = 0;
char g_save_temp[4096];

// The first signal asks the run to stop at its next step. A second one ends
// the process as the signal does by default; during a save it first removes
// the temporary file, which no destructor will (the previous checkpoint
// stays intact: the rename had not happened). Only async-signal-safe calls.
void on_signal(int signal) {
  if (g_interrupted == 0) {
    g_interrupted = 1;
    return;
  }
  if (g_saving != 0) ::unlink(g_save_temp);
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
  ::raise(signal);  // delivered when this handler returns
}

}  // namespace

SavingCheckpoint::SavingCheckpoint(const std::string& path) {
  const std::string temp = safetensors_temp_path(path);
  if (temp.size() >= sizeof g_save_temp) return;  // no room: the file is left, as without a handler
  std::memcpy(g_save_temp, temp.c_str(), temp.size() + 1);
  g_saving = 1;
}

SavingCheckpoint::~SavingCheckpoint() { g_saving = 0; }

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void ignore_file_size_signal() {
  struct sigaction action {};
  action.sa_handler = SIG_IGN;
  sigemptyset(&action.sa_mask);
  sigaction(SIGXFSZ, &action, nullptr);
}

bool interrupt_requested() { return g_interrupted != 0; }

void reset_interrupt_request() { g_interrupted = 0; }

}  // namespace kiln::apps
