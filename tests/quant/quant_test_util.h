// Helpers shared by the quant/ tests: fixed float32 inputs, and PyTorch
// (torch 1.13 in /usr/bin/python3) as the oracle for observers and fake
// quantization. Tests that need torch skip with a message where it is absent.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "tensor/factory.h"
#include "tensor/tensor.h"

namespace kiln::quanttest {

inline bool torch_available() {
  static const bool available = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return available;
}

#define KILN_SKIP_WITHOUT_TORCH() \
  if (!::kiln::quanttest::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch; the PyTorch comparison is skipped"

// Deterministic float32 values: a smooth pattern scaled to [lo, hi] plus
// a few exact values appended by the caller.
inline std::vector<float> pattern(int64_t n, float lo, float hi, int seed = 1) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const double t = 0.5 + 0.5 * std::sin(0.7 * static_cast<double>(i) * seed + 0.3 * seed) *
                               std::cos(0.13 * static_cast<double>(i) + seed);
    v[i] = static_cast<float>(lo + (hi - lo) * t);
  }
  return v;
}

// A Python list literal of float32 values, each exactly (9 significant digits).
inline std::string py_list(const std::vector<float>& v) {
  std::ostringstream os;
  os.precision(9);
  os << "[";
  for (float x : v) {
    if (std::isnan(x)) {
      os << "float('nan'),";
    } else if (std::isinf(x)) {
      os << (x > 0 ? "float('inf')," : "float('-inf'),");
    } else {
      os << x << ",";
    }
  }
  os << "]";
  return os.str();
}

// A float32 tensor of `v`, 1-d unless `shape` is given.
inline Tensor tensor_of(const std::vector<float>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector<float>(v, shape);
}

// The message of the kiln::Error `fn` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

inline std::vector<float> values_f32(const Tensor& t) {
  Tensor c = t.detach().to(DType::Float32, kCPU).contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// Runs `script` (torch imported, warnings off) and returns its output lines,
// each a vector of numbers; fails the test if the script fails.
inline std::vector<std::vector<double>> run_torch(const std::string& script) {
  const std::string path = ::testing::TempDir() + "kiln_quant_oracle_" + std::to_string(::getpid()) + ".py";
  std::ofstream(path) << "import warnings\nwarnings.filterwarnings('ignore')\nimport torch\n"
                      << "def emit(*ts):\n"
                      << "    out = []\n"
                      << "    for t in ts:\n"
                      << "        out += [float(v) for v in torch.as_tensor(t).detach().flatten().tolist()]\n"
                      << "    print(' '.join(repr(v) for v in out))\n"
                      << script;
  FILE* pipe = popen(("/usr/bin/python3 " + path + " 2>&1").c_str(), "r");
  std::string output;
  std::array<char, 1 << 16> buffer{};
  while (pipe != nullptr && fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  const int status = pipe != nullptr ? pclose(pipe) : -1;
  std::remove(path.c_str());
  EXPECT_EQ(status, 0) << "the torch script failed:\n" << output;
  std::vector<std::vector<double>> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<double> numbers;
    std::string word;
    while (words >> word) numbers.push_back(std::strtod(word.c_str(), nullptr));
    lines.push_back(numbers);
  }
  return lines;
}

// Bitwise equality of float32 values (NaN equal to NaN of the same bits).
inline bool same_bits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

}  // namespace kiln::quanttest
