// Shared by the kiln-gpt tests: a small English text that a tiny GPT learns
// something of in a few dozen steps, the options of such a run, and a way
// to run the kiln-gpt program.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "app_test_support.h"
#include "apps/gpt/options.h"
#include "nn/models/gpt.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::apps::gpt::testing {

using apps::testing::contains;
using apps::testing::ProcessResult;
using apps::testing::read_lines;
using apps::testing::read_text;
using apps::testing::TempDir;

// The message of the error kiln-gpt's parse_command_line throws for `args`, or "".
inline std::string parse_error(const std::vector<std::string>& args) {
  return apps::testing::command_line_error([](const std::vector<std::string>& argv) { parse_command_line(argv); },
                                           "kiln-gpt", args);
}

// About 20 KB of sentences built from a few words in a fixed order: a
// vocabulary of some 30 characters and patterns a tiny model picks up fast.
inline std::string small_text() {
  const std::vector<std::string> subjects = {"the cat", "a dog", "my friend", "the old man", "our teacher"};
  const std::vector<std::string> verbs = {"sees", "likes", "finds", "paints", "follows"};
  const std::vector<std::string> objects = {"the moon", "a red ball", "the river", "some bread", "the stars"};
  std::string text;
  for (int64_t i = 0; text.size() < 20000; ++i) {
    text += subjects[i % 5] + " " + verbs[(i / 5) % 5] + " " + objects[(i * 3 + i / 25) % 5] + ".\n";
  }
  return text;
}

// Writes small_text() to `path` and returns the path.
inline std::string write_small_text(const std::string& path) {
  std::ofstream(path) << small_text();
  return path;
}

// A run of seconds: one block of width 16 over windows of 16 characters,
// batches of 4, evaluations every 4 steps. One thread, so that sums go in
// one order and runs compare bitwise.
inline TrainOptions tiny_run(const TempDir& dir) {
  TrainOptions o;
  o.data = write_small_text(dir / "text.txt");
  o.n_layer = 1;
  o.n_head = 2;
  o.n_embd = 16;
  o.block_size = 16;
  o.batch_size = 4;
  o.steps = 12;
  o.warmup_steps = 2;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.eval_interval = 4;
  o.eval_batches = 2;
  o.threads = 1;
  return o;
}

// Whether two models' parameters are equal bit for bit (names and bytes).
inline ::testing::AssertionResult same_parameters(const nn::Module& a, const nn::Module& b) {
  const TensorDict pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.keys() != pb.keys()) return ::testing::AssertionFailure() << "the parameter names differ";
  for (const auto& [name, tensor] : pa) {
    const Tensor x = tensor.to(kCPU).contiguous(), y = pb.at(name).to(kCPU).contiguous();
    if (x.numel() != y.numel() ||
        std::memcmp(x.data<float>(), y.data<float>(), static_cast<size_t>(x.numel()) * sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "parameter " << name << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

// Whether this build has CUDA and this machine a GPU it can use.
inline bool gpu_present() {
#ifdef KILN_WITH_CUDA
  return cuda::cuda_available();
#else
  return false;
#endif
}

// Runs the kiln-gpt executable (run_program).
inline ProcessResult run_kiln_gpt(const std::vector<std::string>& args, const std::string& stderr_path,
                                  const std::function<void(const std::string&, pid_t)>& on_line = {}) {
  return apps::testing::run_program(KILN_GPT_EXE, args, stderr_path, on_line);
}

}  // namespace kiln::apps::gpt::testing
