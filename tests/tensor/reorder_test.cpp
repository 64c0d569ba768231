// flip, roll, repeat and tile (tensor/reorder.h) against plain index loops
// written here and small cases worked by hand from torch's documentation,
// for every dtype, any layout and empty tensors; every error path; and the
// CUDA results against the CPU's (skipped without a GPU).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tensor/cuda_status.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64, kCPU).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// The multi-index of row-major position k in `shape`.
Shape unravel(int64_t k, const Shape& shape) {
  Shape index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = k % shape[d];
    k /= shape[d];
  }
  return index;
}

// The reference: out[i] = x[source(i)] for every multi-index i of out_shape, in float64.
std::vector<double> gathered(const Tensor& x, const Shape& out_shape, const std::function<Shape(const Shape&)>& source) {
  std::vector<double> in = values_of(x), out;
  const Shape strides = contiguous_strides(x.shape());
  for (int64_t k = 0; k < shape_numel(out_shape); ++k) {
    const Shape from = source(unravel(k, out_shape));
    int64_t offset = 0;
    for (size_t d = 0; d < from.size(); ++d) offset += from[d] * strides[d];
    out.push_back(in[offset]);
  }
  return out;
}

Tensor random_values(const Shape& shape, uint64_t seed) {
  return from_vector(pseudo_random(shape_numel(shape), -3, 3, seed), shape);
}

// A float64 (2, 3, 4) tensor laid out as the transpose of a (4, 3, 2) one.
Tensor permuted_input() { return random_values({4, 3, 2}, 9).permute({2, 1, 0}); }

constexpr DType kEveryDType[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int32,  DType::Int64,
                                 DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

TEST(Flip, MatchesTorchOnSmallExamples) {
  Tensor x = arange(6, DType::Int64).view({2, 3});
  EXPECT_EQ(values_of(flip(x, {1})), (std::vector<double>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(values_of(flip(x, {0})), (std::vector<double>{3, 4, 5, 0, 1, 2}));
  EXPECT_EQ(values_of(flip(x, {-1, 0})), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(flip(x, {1}).dtype(), DType::Int64);
}

TEST(Flip, EverySetOfDimsMatchesTheReference) {
  for (const Tensor& x : {random_values({2, 3, 4}, 1), permuted_input()}) {
    for (const Shape& dims : std::vector<Shape>{{}, {0}, {1}, {2}, {0, 2}, {2, 0, 1}, {-1}, {-3, -2}}) {
      SCOPED_TRACE(testing::Message() << "dims " << detail::str(dims) << (x.is_contiguous() ? "" : " permuted"));
      std::vector<bool> flipped(3, false);
      for (int64_t d : dims) flipped[(d + 3) % 3] = true;
      const Shape shape = x.shape();
      auto source = [&](Shape i) {
        for (size_t d = 0; d < 3; ++d)
          if (flipped[d]) i[d] = shape[d] - 1 - i[d];
        return i;
      };
      Tensor out = flip(x, dims);
      EXPECT_EQ(out.shape(), x.shape());
      EXPECT_TRUE(out.is_contiguous());
      EXPECT_EQ(values_of(out), gathered(x, shape, source));
    }
  }
}

TEST(Flip, KeepsEveryDtypeAndCopiesEvenWhenNothingMoves) {
  for (DType dtype : kEveryDType) {
    Tensor x = random_values({3, 2}, 2).to(dtype);
    Tensor out = flip(x, {0});
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_EQ(values_of(out), gathered(x, {3, 2}, [](const Shape& i) { return Shape{2 - i[0], i[1]}; }));
  }
  // No dims, size-1 dims, 0-dim and empty tensors: new tensors all the same.
  Tensor x = random_values({1, 3}, 3);
  for (const Tensor& out : {flip(x, {}), flip(x, {0})}) {
    EXPECT_FALSE(out.storage() == x.storage());
    EXPECT_EQ(values_of(out), values_of(x));
  }
  Tensor scalar = scalar_tensor(2.5);
  EXPECT_EQ(flip(scalar, {0}).shape(), Shape{});
  EXPECT_EQ(flip(scalar, {-1}).item<double>(), 2.5);
  EXPECT_EQ(flip(zeros({0, 3}), {0, 1}).shape(), (Shape{0, 3}));
}

TEST(Flip, RejectsBadDims) {
  Tensor x = zeros({2, 3});
  expect_error([&] { flip(x, {2}); }, "flip: dim 2 is out of range for a tensor of 2 dimensions");
  expect_error([&] { flip(x, {0, -2}); }, "flip: dim 0 appears more than once in dims [0, -2]");
  expect_error([&] { flip(scalar_tensor(1.0), {1}); }, "flip: dim 1 is out of range");
  expect_error([&] { flip(Tensor(), {0}); }, "flip: got an undefined tensor");
}

TEST(Roll, MatchesTorchOnSmallExamples) {
  Tensor x = arange(6, DType::Int64).view({2, 3});
  EXPECT_EQ(values_of(roll(x, {1}, {1})), (std::vector<double>{2, 0, 1, 5, 3, 4}));
  EXPECT_EQ(values_of(roll(x, {1})), (std::vector<double>{5, 0, 1, 2, 3, 4}));  // flattened
  EXPECT_EQ(roll(x, {1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of(roll(x, {1, 1}, {1, 1})), (std::vector<double>{1, 2, 0, 4, 5, 3}));  // repeated dims add up
  EXPECT_EQ(values_of(roll(x, {-7}, {1})), (std::vector<double>{1, 2, 0, 4, 5, 3}));      // -7 = 2 mod 3
  EXPECT_EQ(values_of(roll(x, {1, -1}, {0, 1})), (std::vector<double>{4, 5, 3, 1, 2, 0}));
}

TEST(Roll, EveryShiftMatchesTheReference) {
  for (const Tensor& x : {random_values({2, 3, 4}, 4), permuted_input()}) {
    const Shape shape = x.shape();
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = (dim + 3) % 3;
      for (int64_t shift : {-9, -4, -1, 0, 1, 3, 4, 5, 13}) {
        SCOPED_TRACE(testing::Message() << "dim " << dim << " shift " << shift);
        auto source = [&](Shape i) {
          const int64_t n = shape[d];
          i[d] = ((i[d] - shift) % n + n) % n;
          return i;
        };
        EXPECT_EQ(values_of(roll(x, {shift}, {dim})), gathered(x, shape, source));
      }
    }
    // Two dims at once, and flattened.
    auto both = [&](Shape i) {
      i[0] = (i[0] + 1) % 2;          // shift 1 on a size 2
      i[2] = ((i[2] - 3) % 4 + 4) % 4;  // shift 3 on a size 4
      return i;
    };
    EXPECT_EQ(values_of(roll(x, {1, 3}, {0, 2})), gathered(x, shape, both));
    std::vector<double> flat = values_of(x), rolled(flat.size());
    for (size_t k = 0; k < flat.size(); ++k) rolled[(k + 5) % flat.size()] = flat[k];
    EXPECT_EQ(values_of(roll(x, {5})), rolled);
  }
}

TEST(Roll, KeepsEveryDtypeAndHandlesEdgeShapes) {
  for (DType dtype : kEveryDType) {
    Tensor x = random_values({4}, 5).to(dtype);
    Tensor out = roll(x, {1}, {0});
    EXPECT_EQ(out.dtype(), dtype);
    std::vector<double> v = values_of(x);
    EXPECT_EQ(values_of(out), (std::vector<double>{v[3], v[0], v[1], v[2]}));
  }
  Tensor x = random_values({2, 3}, 6);
  Tensor same = roll(x, {3}, {1});
  EXPECT_FALSE(same.storage() == x.storage());
  EXPECT_EQ(values_of(same), values_of(x));
  EXPECT_EQ(roll(scalar_tensor(4.0), {2}).item<double>(), 4.0);
  EXPECT_EQ(roll(zeros({0, 3}), {1}, {0}).shape(), (Shape{0, 3}));
  EXPECT_EQ(roll(zeros({0, 3}), {1}).shape(), (Shape{0, 3}));
}

TEST(Roll, RejectsBadArguments) {
  Tensor x = zeros({2, 3});
  expect_error([&] { roll(x, {1, 2}); }, "roll: without dims x is rolled as flattened, by one shift; got 2 shifts");
  expect_error([&] { roll(x, {1, 2}, {0}); }, "roll: shifts [1, 2] and dims [0] must have the same length (2 != 1)");
  expect_error([&] { roll(x, {}, {}); }, "roll: shifts must not be empty");
  expect_error([&] { roll(x, {1}, {2}); }, "roll: dim 2 is out of range for a tensor of 2 dimensions");
  expect_error([&] { roll(scalar_tensor(1.0), {1}, {0}); }, "roll: cannot roll a 0-dim tensor along dims [0]");
}

TEST(Repeat, MatchesTorchOnSmallExamples) {
  Tensor x = from_vector<double>({1, 2});
  EXPECT_EQ(values_of(repeat(x, {3})), (std::vector<double>{1, 2, 1, 2, 1, 2}));
  Tensor r = repeat(x, {2, 2});
  EXPECT_EQ(r.shape(), (Shape{2, 4}));
  EXPECT_EQ(values_of(r), (std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2}));
  Tensor m = arange(4, DType::Int32).view({2, 2});
  EXPECT_EQ(values_of(repeat(m, {1, 2})), (std::vector<double>{0, 1, 0, 1, 2, 3, 2, 3}));
  EXPECT_EQ(values_of(repeat(m, {2, 1})), (std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(repeat(m, {2, 1}).dtype(), DType::Int32);
}

TEST(Repeat, EveryRepeatListMatchesTheReference) {
  for (const Tensor& x : {random_values({2, 3, 4}, 7), permuted_input()}) {
    for (const Shape& repeats : std::vector<Shape>{{1, 1, 1}, {2, 1, 3}, {1, 4, 1}, {3, 2, 1, 2}, {2, 1, 1, 1, 1}}) {
      SCOPED_TRACE(detail::str(repeats));
      const size_t pad = repeats.size() - 3;
      Shape out_shape;
      for (size_t i = 0; i < repeats.size(); ++i) out_shape.push_back(repeats[i] * (i < pad ? 1 : x.size(i - pad)));
      auto source = [&](const Shape& i) {
        Shape from;
        for (size_t d = 0; d < 3; ++d) from.push_back(i[d + pad] % x.size(d));
        return from;
      };
      Tensor out = repeat(x, repeats);
      EXPECT_EQ(out.shape(), out_shape);
      EXPECT_EQ(values_of(out), gathered(x, out_shape, source));
    }
  }
}

TEST(Repeat, ZeroRepeatsEmptyAndZeroDimTensors) {
  Tensor x = random_values({2, 3}, 8);
  EXPECT_EQ(repeat(x, {2, 0}).shape(), (Shape{4, 0}));
  EXPECT_EQ(repeat(zeros({0, 3}), {2, 2}).shape(), (Shape{0, 6}));
  Tensor s = scalar_tensor(7, DType::Int64);
  EXPECT_EQ(repeat(s, {}).shape(), Shape{});
  EXPECT_EQ(values_of(repeat(s, {3})), (std::vector<double>{7, 7, 7}));
  Tensor copy = repeat(x, {1, 1});
  EXPECT_FALSE(copy.storage() == x.storage());
  for (DType dtype : kEveryDType) {
    Tensor t = random_values({2}, 9).to(dtype);
    std::vector<double> v = values_of(t);
    EXPECT_EQ(values_of(repeat(t, {2})), (std::vector<double>{v[0], v[1], v[0], v[1]})) << dtype;
  }
}

TEST(Repeat, RejectsBadRepeats) {
  Tensor x = zeros({2, 3});
  expect_error([&] { repeat(x, {2}); }, "repeat: repeats [2] has 1 entries, fewer than the 2 dims of x (shape [2, 3])");
  expect_error([&] { repeat(x, {2, -1}); }, "repeat: repeats must be non-negative, got [2, -1]");
  expect_error([&] { repeat(Tensor(), {1}); }, "repeat: got an undefined tensor");
}

TEST(Tile, PrependsOnesToAShortRepsAsTorch) {
  Tensor m = arange(6, DType::Int64).view({2, 3});
  // tile(m, {2}) repeats the columns: reps becomes {1, 2}.
  EXPECT_EQ(values_of(tile(m, {2})), values_of(repeat(m, {1, 2})));
  EXPECT_EQ(tile(m, {2}).shape(), (Shape{2, 6}));
  EXPECT_EQ(values_of(tile(m, {})), values_of(m));
  EXPECT_EQ(tile(m, {2, 1, 1}).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(tile(scalar_tensor(1.5), {2, 2}).shape(), (Shape{2, 2}));
  EXPECT_EQ(tile_repeats({3}, 3), (Shape{1, 1, 3}));
  expect_error([&] { tile(m, {-1}); }, "tile: reps must be non-negative, got [-1]");
}

// ---- CUDA against the CPU ----

TEST(ReorderCuda, MatchesTheCpuExactly) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason();
  const Device gpu = cuda_device(0);
  for (DType dtype : kEveryDType) {
    SCOPED_TRACE(testing::Message() << dtype);
    Tensor x = random_values({3, 4, 5}, 10).to(dtype);
    Tensor xt = x.transpose(0, 2);
    Tensor xg = x.to(gpu), xtg = xg.transpose(0, 2);  // the same strides on both devices
    EXPECT_EQ(values_of(flip(x, {0, 2})), values_of(flip(xg, {0, 2})));
    EXPECT_EQ(values_of(flip(xt, {1})), values_of(flip(xtg, {1})));
    EXPECT_EQ(values_of(roll(x, {2, -1}, {1, 2})), values_of(roll(xg, {2, -1}, {1, 2})));
    EXPECT_EQ(values_of(roll(xt, {7})), values_of(roll(xtg, {7})));
    EXPECT_EQ(values_of(repeat(x, {2, 1, 3, 1})), values_of(repeat(xg, {2, 1, 3, 1})));
    EXPECT_EQ(values_of(tile(xt, {2, 2})), values_of(tile(xtg, {2, 2})));
    EXPECT_EQ(flip(xg, {0}).device(), gpu);
  }
}

}  // namespace
}  // namespace kiln
