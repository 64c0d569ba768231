// 2-d pooling against torch itself, on an input with ties, NaN and -inf:
// values, indices and gradients (from torch's autograd) of every op, in
// float64. Skipped when /usr/bin/python3 or its torch is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) v[k] = flat_value(t, k);
  return v;
}

Tensor make(const std::vector<double>& v, const Shape& shape) { return from_vector<double>(v, shape); }

// NaN equals NaN, infinities must match exactly.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    bool ok = std::isnan(want[i])   ? std::isnan(got[i])
              : std::isinf(want[i]) ? got[i] == want[i]
                                    : std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

std::string python_list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[40];
  for (double e : v) {
    if (std::isnan(e)) s += "float('nan'),";
    else if (std::isinf(e)) s += e > 0 ? "float('inf')," : "float('-inf'),";
    else {
      std::snprintf(buf, sizeof buf, "%.17g,", e);
      s += buf;
    }
  }
  return s + "]";
}

// Runs `script` with /usr/bin/python3 and returns its stdout lines.
std::vector<std::string> run_python(const std::string& script, int& status) {
  std::string path = testing::TempDir() + "kiln_pool_test.py";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(script.c_str(), f);
  std::fclose(f);
  FILE* pipe = popen(("/usr/bin/python3 " + path).c_str(), "r");
  std::vector<std::string> lines(1);
  for (int ch; (ch = std::fgetc(pipe)) != EOF;) {
    if (ch == '\n') lines.emplace_back();
    else lines.back() += static_cast<char>(ch);
  }
  lines.pop_back();
  status = pclose(pipe);
  return lines;
}

std::vector<double> parse_numbers(const std::string& line) {
  std::vector<double> numbers;
  size_t pos = 0;
  while (pos < line.size()) {
    size_t used = 0;
    numbers.push_back(std::stod(line.substr(pos), &used));
    pos += used;
    while (pos < line.size() && line[pos] == ' ') ++pos;
  }
  return numbers;
}

TEST(Pool2d, MatchesTorch) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  Shape shape{2, 2, 9, 8};
  std::vector<double> xv = pseudo_random(shape_numel(shape), -2, 2, 23);
  for (double& v : xv) v = std::round(v * 2) / 2;  // ties
  xv[5] = xv[17] = kNaN;
  xv[40] = -std::numeric_limits<double>::infinity();
  std::vector<double> gv_seed = pseudo_random(4096, -1, 1, 24);
  std::string script = "import sys\n"
                       "try:\n"
                       "  import torch, torch.nn.functional as F\n"
                       "except ImportError:\n"
                       "  print('no torch')\n"
                       "  sys.exit(0)\n"
                       "x0 = torch.tensor(" + python_list(xv) + ", dtype=torch.float64).reshape(2, 2, 9, 8)\n"
                       "g0 = torch.tensor(" + python_list(gv_seed) + ", dtype=torch.float64)\n"
                       "def dump(t): print(' '.join(repr(float(v)) for v in t.flatten().tolist()))\n"
                       "def run(f):\n"
                       "  x = x0.clone().requires_grad_()\n"
                       "  y = f(x)\n"
                       "  v = y[0] if isinstance(y, tuple) else y\n"
                       "  v.backward(g0[:v.numel()].reshape(v.shape))\n"
                       "  dump(v)\n"
                       "  if isinstance(y, tuple): dump(y[1])\n"
                       "  dump(x.grad)\n"
                       "run(lambda x: F.max_pool2d(x, 2, return_indices=True))\n"
                       "run(lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1), (2, 1), ceil_mode=True, "
                       "return_indices=True))\n"
                       "run(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False))\n"
                       "run(lambda x: F.avg_pool2d(x, (2, 3), (3, 2), (1, 1), ceil_mode=True))\n"
                       "run(lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5))\n"
                       "run(lambda x: F.adaptive_avg_pool2d(x, (4, 3)))\n";
  int status = 0;
  std::vector<std::string> lines = run_python(script, status);
  if (lines.size() == 1 && lines[0] == "no torch") GTEST_SKIP() << "/usr/bin/python3 has no torch";
  ASSERT_EQ(status, 0) << "python failed";
  ASSERT_EQ(lines.size(), 14u);
  std::vector<std::vector<double>> torch_out;
  for (const std::string& l : lines) torch_out.push_back(parse_numbers(l));

  Tensor x = make(xv, shape);
  size_t line = 0;
  auto check = [&](const Tensor& y, const Tensor& gx, const std::string& what) {
    expect_close(values_of(y), torch_out[line++], 1e-14, what + " values");
    expect_close(values_of(gx), torch_out[line++], 1e-14, what + " grad");
  };
  auto grad_for = [&](const Tensor& y) {
    return make(std::vector<double>(gv_seed.begin(), gv_seed.begin() + y.numel()), y.shape());
  };
  auto check_max = [&](const MaxPool2dOptions& o, const std::string& what) {
    PoolResult r = max_pool2d_with_indices(x, o);
    expect_close(values_of(r.values), torch_out[line++], 0, what + " values");
    EXPECT_EQ(values_of(r.indices), torch_out[line++]) << what << " indices";
    expect_close(values_of(max_pool2d_backward(grad_for(r.values), shape, r.indices, o)), torch_out[line++], 1e-14,
                 what + " grad");
  };
  check_max({.kernel = 2}, "max 2x2");
  check_max({.kernel = {3, 2}, .stride = Size2d(2, 1), .padding = 1, .dilation = {2, 1}, .ceil_mode = true}, "max");
  for (const AvgPool2dOptions& o :
       {AvgPool2dOptions{.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false},
        AvgPool2dOptions{.kernel = {2, 3}, .stride = Size2d(3, 2), .padding = 1, .ceil_mode = true},
        AvgPool2dOptions{.kernel = 3, .stride = 2, .padding = 1, .divisor_override = 5}}) {
    Tensor y = avg_pool2d(x, o);
    check(y, avg_pool2d_backward(grad_for(y), shape, o), "avg");
  }
  Tensor y = adaptive_avg_pool2d(x, {4, 3});
  check(y, adaptive_avg_pool2d_backward(grad_for(y), shape), "adaptive");
}

}  // namespace
}  // namespace kiln
