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

#include "apps/lenet/options.h"
#include "data/cifar10.h"
#include "kiln.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::apps::lenet::testing {

// A fresh empty folder under the system temp folder, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
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

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The outcome of running kiln-lenet.
struct ProcessResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string out;
  std::string err;
};

// Runs the kiln-lenet executable with `args`, stderr to a file. `on_line`,
// when given, sees each stdout line as it arrives together with the child's
// pid (to send it a signal).
inline ProcessResult run_kiln_lenet(const std::vector<std::string>& args, const std::string& stderr_path,
                                    const std::function<void(const std::string&, pid_t)>& on_line = {}) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  std::vector<std::string> argv_strings = {KILN_LENET_EXE};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  ProcessResult result;
  std::string pending;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
    result.out.append(buffer, static_cast<size_t>(n));
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
      if (on_line) on_line(pending.substr(0, eol), pid);
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.err = read_text(stderr_path);
  return result;
}

}  // namespace kiln::apps::lenet::testing
