// The steps every training app takes before its first step, and the running
// loss it reports while it trains: outputs tried before any work, kernel
// threads against the cores, the --device flag, the autocast dtype of --amp.
#pragma once

#include <cstdint>
#include <ostream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace kiln::apps {

// What a run will write (--save, --log, --plot), tried before it trains: a
// path in a missing or read-only folder, or naming a folder, is found in
// seconds rather than after the first epoch. Returns "" when `path` is empty
// or can be written, else the problem ("--plot 'x/y.svg': cannot create
// files beside it (No such file or directory)"). The probe file is removed.
std::string output_problem(const std::string& flag, const std::string& path);
// Throws kiln::Error with the first problem among (flag, path) pairs.
void check_outputs(const std::vector<std::pair<std::string, std::string>>& flags_and_paths);

// The cores this process may run on (its affinity mask, as taskset sets it).
int available_cores();

// More kernel threads than cores (get_num_threads() x `processes` on this
// machine) wait for each other at every barrier and train several times
// slower: warns on `err` as "<program>: warning: ...", naming the --threads
// that would fit.
void warn_if_oversubscribed(std::ostream& err, const std::string& program, int processes = 1);

// Throws kiln::Error "--device: unknown device 'x' (expected cpu, cuda or
// cuda:N)" unless `text` names a device.
void check_device_flag(const std::string& text);

// --amp's autocast dtype (Note [Autocast]): bfloat16 on the CPU, which has
// float32's exponent range and needs no loss scaling; float16 on CUDA, with
// dynamic loss scaling (Note [Dynamic loss scaling]).
inline DType autocast_dtype(const Device& device) { return device.is_cuda() ? DType::Float16 : DType::BFloat16; }

// A sum of loss * weight (images, tokens), kept on the device the losses are
// computed on. On a GPU, reading each step's loss (item()) would make the
// host wait for the step to finish before it could queue the next one, so
// the sum is read only when it is shown or saved. The sum starts from
// `start` and adds the terms in the same order and float64 arithmetic as a
// host double would, so a resumed run reports the same loss.
class RunningLossSum {
 public:
  explicit RunningLossSum(double start = 0) : start_(start) {}

  // loss: a scalar of any floating dtype.
  void add(const Tensor& loss, int64_t weight);
  double read() const;

 private:
  double start_;
  Tensor sum_;  // () float64 on the losses' device, from the first add on
};

// An ostream that discards everything (what ranks other than 0 print to).
class DiscardingStream : public std::ostream {
 public:
  DiscardingStream() : std::ostream(&buffer_) {}

 private:
  class NullBuffer : public std::streambuf {
   protected:
    int overflow(int c) override { return c; }
  };
  NullBuffer buffer_;
};

}  // namespace kiln::apps
