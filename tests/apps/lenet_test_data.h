// Shared by the kiln-lenet tests: a tiny CIFAR-10 binary folder whose labels
// a LeNet learns in a few steps, and a way to run the kiln-lenet program.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "app_test_support.h"
#include "apps/lenet/options.h"
#include "data/cifar10.h"
#include "kiln.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::apps::lenet::testing {

using apps::testing::contains;
using apps::testing::ProcessResult;
using apps::testing::read_lines;
using apps::testing::read_text;

// The message of the error kiln-lenet's parse_command_line throws for `args`, or "".
inline std::string parse_error(const std::vector<std::string>& args) {
  return apps::testing::command_line_error([](const std::vector<std::string>& argv) { parse_command_line(argv); },
                                           "kiln-lenet", args);
}

// apps::testing::TempDir, as a type of this namespace so that calls such as
// small_run(dir) find this namespace's helpers by argument-dependent lookup.
class TempDir : public apps::testing::TempDir {
 public:
  using apps::testing::TempDir::TempDir;
};

// Two epochs of 10 steps on the synthetic set in `dir`: fast, and enough to
// learn. One thread, so that sums go in one order and runs compare bitwise.
// Whether this build has CUDA and this machine a GPU it can use.
inline bool gpu_present() {
#ifdef KILN_WITH_CUDA
  return cuda::cuda_available();
#else
  return false;
#endif
}

inline TrainerOptions small_run(const TempDir& dir, int workers = 0) {
  TrainerOptions o;
  o.data = dir.path().string();
  o.epochs = 2;
  o.batch_size = 20;
  o.threads = 1;
  o.workers = workers;
  return o;
}

// `count` images of class label % 4: a brightness level per class (40, 100,
// 160, 220) plus noise, so the four classes are easy to tell apart, and the
// other six CIFAR-10 classes get no images.
inline void synthetic_split(int64_t count, uint64_t seed, Tensor& images, Tensor& labels) {
  images = Tensor::empty({count, 3, 32, 32}, DType::UInt8);
  labels = Tensor::empty({count}, DType::Int64);
  Generator gen(seed);
  Tensor noise = randint(-20, 21, {count, 3, 32, 32}, DType::Int64, &gen).contiguous();
  const int64_t* n = noise.data<int64_t>();
  uint8_t* px = images.data<uint8_t>();
  int64_t* lb = labels.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    lb[i] = i % 4;
    for (int64_t j = 0; j < 3 * 32 * 32; ++j) {
      px[i * 3072 + j] = static_cast<uint8_t>(40 + 60 * lb[i] + n[i * 3072 + j]);
    }
  }
}

// root/cifar-10-batches-bin/data_batch_1..5.bin (5 x `per_file` images, 200
// by default) and test_batch.bin (100 images).
inline void write_synthetic_cifar(const std::filesystem::path& root, int64_t per_file = 40) {
  const std::filesystem::path folder = root / "cifar-10-batches-bin";
  std::filesystem::create_directories(folder);
  for (int b = 1; b <= 5; ++b) {
    Tensor images, labels;
    synthetic_split(per_file, static_cast<uint64_t>(b), images, labels);
    data::write_cifar10_bin((folder / ("data_batch_" + std::to_string(b) + ".bin")).string(), images, labels);
  }
  Tensor images, labels;
  synthetic_split(100, 99, images, labels);
  data::write_cifar10_bin((folder / "test_batch.bin").string(), images, labels);
}

// Runs the kiln-lenet executable (run_program).
inline ProcessResult run_kiln_lenet(const std::vector<std::string>& args, const std::string& stderr_path,
                                    const std::function<void(const std::string&, pid_t)>& on_line = {}) {
  return apps::testing::run_program(KILN_LENET_EXE, args, stderr_path, on_line);
}

}  // namespace kiln::apps::lenet::testing
