// CUDA reductions (sum, prod, max, min), max/min with index, and softmax
// against the CPU backend, for every dtype, over inner, outer, middle,
// multiple and all dims, transposed inputs, layouts with too many dims for
// the kernels, empty tensors, long rows (the two-pass paths) and NaNs.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cstring>
#include <string>
#include <vector>

#include "tensor/cuda/cuda_backend.h"
#include "tests/tensor/cuda_test_util.h"

namespace kiln {
namespace {

using namespace backend_compare;

Backend& cpu_backend() { return backend_for(kCPU); }
Backend& cuda_backend() { return backend_for(gpu()); }

// A reduction case: the base shape, a view of it, and the dims reduced.
struct Case {
  std::string name;
  Shape base;
  View view;
  Shape dims;
  bool long_rows = false;  // rows too long for exact integer products
};

Tensor transpose_view(const Tensor& t) { return t.t(); }

// (2, 2, ..., 2) with 18 dims, every other one reduced: after merging, 9
// kept and 9 reduced dims, more than the kernels take (the fallback path).
Shape eighteen_twos() { return Shape(18, 2); }
Shape every_other_dim() { return {0, 2, 4, 6, 8, 10, 12, 14, 16}; }

std::vector<Case> cases() {
  const int64_t large = (int64_t{1} << 20) + 7;
  return {
      {"all of a long vector", {large}, identity_view, {0}, true},
      {"inner dim, warp rows", {64, 1000}, identity_view, {1}, true},
      {"inner dim, short rows", {1000, 5}, identity_view, {1}},
      {"inner dim, two-pass blocks", {4, 50000}, identity_view, {1}, true},
      {"outer dim", {300, 40}, identity_view, {0}, true},
      {"outer dim, few columns, split rows", {20000, 3}, identity_view, {0}, true},
      {"middle dim", {3, 70, 17}, identity_view, {1}, true},
      {"two dims", {2, 3, 4, 5}, identity_view, {0, 2}},
      {"two other dims", {2, 3, 4, 5}, identity_view, {1, 3}},
      {"every dim", {2, 3, 4, 5}, identity_view, {0, 1, 2, 3}},
      {"transposed input", {40, 300}, transpose_view, {0}, true},
      {"no dims", {6, 7}, identity_view, {}},
      {"too many dims", eighteen_twos(), identity_view, every_other_dim(), true},
      {"empty reduced dim", {0, 5}, identity_view, {0}},
      {"empty kept dim", {5, 0}, identity_view, {0}},
  };
}

Shape keepdim_shape(const Shape& shape, const Shape& dims) {
  Shape out = shape;
  for (int64_t d : dims) out[d] = 1;
  return out;
}

DType reduce_out_dtype(ReduceOp op, DType dtype) {
  bool arithmetic = op == ReduceOp::Sum || op == ReduceOp::Prod;
  return arithmetic && !is_floating(dtype) ? DType::Int64 : dtype;
}

// Prod inputs stay near 1 so that products neither overflow nor vanish.
Tensor reduce_input(const Shape& shape, DType dtype, ReduceOp op, uint64_t seed) {
  if (op != ReduceOp::Prod) return random_tensor(shape, dtype, seed);
  std::vector<double> values = pseudo_random(shape_numel(shape, "reduce_input"), 0.5, 1.5, seed);
  if (!is_floating(dtype)) {
    for (double& v : values) v = v < 0.55 ? -1 : v < 1.45 ? 1 : 2;
    if (dtype == DType::UInt8 || dtype == DType::Bool) {
      for (double& v : values) v = std::abs(v);
    }
  }
  return from_vector(values, shape).to(dtype);
}

void check_reduce(ReduceOp op, DType dtype, const Case& c, const Tensor& base) {
  Tensor in = c.view(base);
  Tensor gin = c.view(base.to(gpu()));
  DType out_dtype = reduce_out_dtype(op, dtype);
  Shape out_shape = keepdim_shape(in.shape(), c.dims);
  Tensor expected = Tensor::empty(out_shape, out_dtype);
  Tensor got = Tensor::empty(out_shape, {out_dtype, gpu()});
  cpu_backend().reduce(op, expected, in, c.dims);
  cuda_backend().reduce(op, got, gin, c.dims);
  // Sums of n floats agree to about n rounding errors of the elements' size.
  int64_t n = out_shape.empty() || expected.numel() == 0 ? 1 : std::max<int64_t>(1, in.numel() / expected.numel());
  double atol = is_floating(dtype) && op == ReduceOp::Sum ? 1e-6 * static_cast<double>(n) : 0;
  expect_matches(
      expected, got,
      "reduce op " + std::to_string(static_cast<int>(op)) + " of " + std::string(dtype_name(dtype)) + ", " + c.name,
      tolerance_for(dtype), atol);
}

TEST(CudaReduce, EveryOpAndDTypeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    for (DType dtype : kEveryDType) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min}) {
        if (op == ReduceOp::Prod && c.long_rows) continue;
        bool empty_rows = c.view(Tensor::empty(c.base)).numel() == 0;
        if (empty_rows && (op == ReduceOp::Max || op == ReduceOp::Min)) continue;
        check_reduce(op, dtype, c, reduce_input(c.base, dtype, op, 11));
      }
    }
  }
}

TEST(CudaReduce, FloatProductsOfLongRowsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    if (!c.long_rows) continue;
    for (DType dtype : {DType::Float32, DType::Float64}) {
      check_reduce(ReduceOp::Prod, dtype, c, reduce_input(c.base, dtype, ReduceOp::Prod, 12));
    }
  }
}

TEST(CudaReduce, NaNWinsMaxAndMinAndPoisonsSums) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    for (DType dtype : kFloatDTypes) {
      Tensor base = random_tensor(c.base, dtype, 13);
      set_flat(base, 5, std::nan(""));
      set_flat(base, 1000, std::nan(""));
      set_flat(base, 9, std::numeric_limits<double>::infinity());
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
        if (base.numel() == 0 && op != ReduceOp::Sum) continue;
        check_reduce(op, dtype, c, base);
      }
    }
  }
}

TEST(CudaReduce, MaxOverAnEmptyDimThrows) {
  SKIP_WITHOUT_GPU();
  Tensor in = Tensor::empty({0, 5}, {DType::Float32, gpu()});
  Tensor out = Tensor::empty({1, 5}, {DType::Float32, gpu()});
  expect_error([&] { cuda_backend().reduce(ReduceOp::Max, out, in, {0}); }, "reduce: max/min over an empty dim");
}

TEST(CudaReduce, ResultsAreBitIdenticalFromRunToRun) {
  SKIP_WITHOUT_GPU();
  Tensor in = random_tensor({(int64_t{1} << 22) + 3}, DType::Float32, 14).to(gpu());
  Tensor first = Tensor::empty({1}, {DType::Float32, gpu()});
  Tensor second = Tensor::empty({1}, {DType::Float32, gpu()});
  cuda_backend().reduce(ReduceOp::Sum, first, in, {0});
  cuda_backend().reduce(ReduceOp::Sum, second, in, {0});
  float a = first.cpu().data<float>()[0], b = second.cpu().data<float>()[0];
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << a << " vs " << b;
}

TEST(CudaReduce, SumMatchesAFloat64Reference) {
  SKIP_WITHOUT_GPU();
  // 2^24 + 1 float32 ones: a float32 running sum would stop at 2^24.
  int64_t n = (int64_t{1} << 24) + 1;
  Tensor ones = kiln::ones({n}, {DType::Float32, gpu()});
  Tensor out = Tensor::empty({1}, {DType::Float32, gpu()});
  cuda_backend().reduce(ReduceOp::Sum, out, ones, {0});
  EXPECT_EQ(out.cpu().data<float>()[0], static_cast<float>(n));
}

// ---- max/min with index ----

void check_with_index(ReduceOp op, DType dtype, const Shape& base_shape, const View& view, int64_t dim,
                      const Tensor& base, const std::string& name) {
  Tensor in = view(base);
  Tensor gin = view(base.to(gpu()));
  Shape out_shape = keepdim_shape(in.shape(), {dim});
  Tensor values = Tensor::empty(out_shape, dtype), indices = Tensor::empty(out_shape, DType::Int64);
  Tensor gvalues = Tensor::empty(out_shape, {dtype, gpu()});
  Tensor gindices = Tensor::empty(out_shape, {DType::Int64, gpu()});
  cpu_backend().reduce_with_index(op, values, indices, in, dim);
  cuda_backend().reduce_with_index(op, gvalues, gindices, gin, dim);
  std::string what = (op == ReduceOp::Max ? "max of " : "min of ") + std::string(dtype_name(dtype)) + ", " + name +
                     " " + detail::str(base_shape);
  expect_matches(values, gvalues, what + " (values)", 0);
  expect_matches(indices, gindices, what + " (indices)", 0);
}

TEST(CudaReduce, MaxAndMinWithIndexMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  struct IndexCase {
    std::string name;
    Shape base;
    View view;
    int64_t dim;
  };
  const int64_t large = (int64_t{1} << 20) + 7;
  const std::vector<IndexCase> index_cases = {
      {"long row", {large}, identity_view, 0},       {"inner dim", {64, 1000}, identity_view, 1},
      {"block rows", {3, 5000}, identity_view, 1},   {"outer dim", {1000, 64}, identity_view, 0},
      {"middle dim", {3, 70, 17}, identity_view, 1}, {"transposed", {40, 300}, transpose_view, 0},
      {"size-1 dim", {7, 1}, identity_view, 1},
  };
  for (const IndexCase& c : index_cases) {
    for (DType dtype : kEveryDType) {
      // Integer data in [-50, 50) repeats, so ties must pick the first index.
      Tensor base = random_tensor(c.base, dtype, 15);
      if (is_floating(dtype)) {
        set_flat(base, 900, std::nan(""));
        set_flat(base, 77, std::nan(""));
      }
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
        check_with_index(op, dtype, c.base, c.view, c.dim, base, c.name);
    }
  }
}

// ---- softmax ----

TEST(CudaSoftmax, SoftmaxAndLogSoftmaxMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  struct SoftmaxCase {
    std::string name;
    Shape base;
    View view;
    int64_t dim;
  };
  const std::vector<SoftmaxCase> softmax_cases = {
      {"warp rows", {300, 100}, identity_view, 1},  {"block rows", {7, 5000}, identity_view, 1},
      {"columns", {300, 40}, identity_view, 0},     {"middle dim", {4, 30, 17}, identity_view, 1},
      {"transposed", {40, 300}, transpose_view, 1}, {"single element rows", {50, 1}, identity_view, 1},
      {"empty", {0, 10}, identity_view, 1},
  };
  for (const SoftmaxCase& c : softmax_cases) {
    for (DType dtype : kFloatDTypes) {
      Tensor base = random_tensor(c.base, dtype, 16);
      // A NaN poisons its row; -inf entries get probability 0.
      set_flat(base, 3, std::nan(""));
      set_flat(base, 250, -std::numeric_limits<double>::infinity());
      for (bool log : {false, true}) {
        Tensor in = c.view(base), gin = c.view(base.to(gpu()));
        Tensor expected = Tensor::empty(in.shape(), dtype);
        Tensor got = Tensor::empty(in.shape(), {dtype, gpu()});
        cpu_backend().softmax(expected, in, c.dim, log);
        cuda_backend().softmax(got, gin, c.dim, log);
        expect_matches(
            expected, got,
            std::string(log ? "log_softmax" : "softmax") + " of " + std::string(dtype_name(dtype)) + ", " + c.name,
            tolerance_for(dtype), log ? 1e-5 : 1e-7);
      }
    }
  }
  Tensor i = Tensor::empty({3}, {DType::Int32, gpu()});
  expect_error([&] { cuda_backend().softmax(i, i, 0, false); }, "softmax: expected a floating point tensor, got int32");
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
