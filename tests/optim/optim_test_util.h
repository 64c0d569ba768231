// Helpers shared by the optimizer and scheduler tests: parameters with
// chosen values and grads, and the PyTorch oracle.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "tensor/test_util.h"

namespace kiln {

using namespace kiln::optim;

// A leaf that requires grad, holding `values` in `dtype`.
inline Tensor make_param(const std::vector<double>& values, const Shape& shape, DType dtype = DType::Float32) {
  Tensor p = from_vector<double>(values, shape).to(dtype);
  p.requires_grad_();
  return p;
}

// Sets p.grad() to `values` (p's shape and dtype).
inline void set_grad_values(const Tensor& p, const std::vector<double>& values) {
  p.set_grad(from_vector<double>(values, p.shape()).to(p.dtype()));
}

// Every element of `t` as double, in row-major order.
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) out[k] = flat_value(t, k);
  return out;
}

// Values rounded to float32 and back, as a float32 tensor built from them holds.
inline std::vector<double> as_float32(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

// Expects |actual - expected| <= rtol * |expected| + atol elementwise.
inline void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
                            double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], rtol * std::abs(expected[i]) + atol) << what << " element " << i;
}

// Bitwise equality of two tensors' values and shapes.
inline bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<double> va = values_of(a), vb = values_of(b);
  for (size_t i = 0; i < va.size(); ++i)
    if (std::memcmp(&va[i], &vb[i], sizeof(double)) != 0) return false;
  return true;
}

// ---- the PyTorch oracle -------------------------------------------------------

// True when /usr/bin/python3 can import torch.
inline bool torch_available() {
  static const bool available = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return available;
}

// The numbers of a text file of whitespace-separated values (the losses an
// oracle script wrote), in order.
inline std::vector<double> read_losses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> out;
  double v;
  while (in >> v) out.push_back(v);
  return out;
}

// Runs `script` with /usr/bin/python3 and returns what it printed; fails the
// test (and returns nullopt) if the script fails.
inline std::optional<std::string> run_python(const std::string& script) {
  char path[] = "/tmp/kiln_optim_oracle_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    ADD_FAILURE() << "cannot create a temporary file for the oracle script";
    return std::nullopt;
  }
  close(fd);
  std::ofstream(path) << script;
  std::string command = std::string("/usr/bin/python3 ") + path + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer{};
  while (pipe && fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  int status = pipe ? pclose(pipe) : -1;
  std::remove(path);
  if (status != 0) {
    ADD_FAILURE() << "the oracle script failed (status " << status << "):\n" << script;
    return std::nullopt;
  }
  return output;
}

// The numbers of each line of `text`, one vector per line.
inline std::vector<std::vector<double>> parse_lines(const std::string& text) {
  std::vector<std::vector<double>> lines;
  std::istringstream in(text);
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

// A Python list literal of `values`, each printed exactly.
inline std::string python_list(const std::vector<double>& values) {
  std::ostringstream os;
  os.precision(17);
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << ']';
  return os.str();
}

// Two copies of the same three parameters (the middle one spans threads),
// one stepped by a fused optimizer and the other by the same optimizer with
// fused = false, for tests that the two stay bitwise equal.
//   FusedAndUnfused<SGD> pair(options, DType::Float32);
//   pair.step(0);  // same gradients to both copies, then a step of each
template <class Opt>
struct FusedAndUnfused {
  const std::vector<Shape> shapes = {{2, 3}, {70000}, {1}};
  std::vector<Tensor> fused_params, plain_params;
  std::unique_ptr<Opt> fused, plain;

  template <class Options>
  FusedAndUnfused(Options options, DType dtype) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<double> v = pseudo_random(shape_numel(shapes[i]), -1, 1, 40 + i);
      fused_params.push_back(make_param(v, shapes[i], dtype));
      plain_params.push_back(make_param(v, shapes[i], dtype));
    }
    options.fused(true);
    fused = std::make_unique<Opt>(fused_params, options);
    options.fused(false);
    plain = std::make_unique<Opt>(plain_params, options);
  }

  // Step s: the same pseudo-random gradients for both copies, then one step
  // of each optimizer.
  void step(int s) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<double> g = pseudo_random(shape_numel(shapes[i]), -2, 2, 100 * s + i);
      set_grad_values(fused_params[i], g);
      set_grad_values(plain_params[i], g);
    }
    fused->step();
    plain->step();
  }

  // Whether the fused copy moved away from the starting values: otherwise
  // equality with the unfused copy proves nothing.
  bool fused_changed(DType dtype) const {
    return !same_values(fused_params[0], make_param(pseudo_random(6, -1, 1, 40), shapes[0], dtype));
  }
};

}  // namespace kiln
