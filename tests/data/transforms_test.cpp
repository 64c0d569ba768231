// Transforms: each one against a hand-computed result, the random ones
// against offsets and coin flips computed here from the Philox stream of a
// seeded generator, and determinism per seed (Note [Transform randomness]).
#include "data/transforms.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "tensor/random.h"

namespace kiln::data::transforms {
namespace {

// A uint8 tensor of `shape` holding `values` (row-major).
Tensor u8(const Shape& shape, const std::vector<int>& values) {
  Tensor t = Tensor::empty(shape, DType::UInt8);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(values[i]);
  return t;
}

// A uint8 tensor whose element k (row-major) is (k * 7 + 3) % 251.
Tensor pattern(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::UInt8);
  for (int64_t k = 0; k < t.numel(); ++k) t.data<uint8_t>()[k] = static_cast<uint8_t>((k * 7 + 3) % 251);
  return t;
}

std::vector<int> u8_values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::UInt8);
  return std::vector<int>(t.data<uint8_t>(), t.data<uint8_t>() + t.numel());
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

template <class Fn>
void expect_error(Fn&& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(text), std::string::npos) << "message: " << e.message();
  }
}

// The Philox block a fresh Generator(seed) gives its k-th draw.
std::array<uint32_t, 4> block_of(uint64_t seed, uint64_t k) { return Philox4x32::block(k, 0, seed); }
int64_t uniform_int(uint32_t w, int64_t range) { return static_cast<int64_t>((uint64_t{w} * range) >> 32); }

TEST(ToTensor, ScalesUint8ToUnitFloat) {
  Generator gen(0);
  Tensor y = ToTensor()(u8({1, 2, 2}, {0, 51, 128, 255}), gen);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  const float* p = y.data<float>();
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[1], 0.2f);
  EXPECT_EQ(p[2], 128.0f / 255.0f);
  EXPECT_EQ(p[3], 1.0f);
}

TEST(ToTensor, RejectsFloatAndNonImageShapes) {
  Tensor f = Tensor::empty({3, 2, 2}, DType::Float32);
  expect_error([&] { ToTensor()(f); }, "ToTensor: expected a uint8 image, got float32");
  expect_error([&] { ToTensor()(u8({2, 2}, {1, 2, 3, 4})); },
               "ToTensor: expected an image (C, H, W) or a batch (N, C, H, W), got shape [2, 2]");
}

TEST(Normalize, PerChannelMeanAndStd) {
  // x: (2, 1, 2) float32
  Tensor x = Tensor::empty({2, 1, 2}, DType::Float32);
  float* xp = x.data<float>();
  xp[0] = 0.5f, xp[1] = 1.0f, xp[2] = 0.25f, xp[3] = 0.0f;
  Tensor y = Normalize({0.5, 0.25}, {0.5, 2.0})(x);
  const float* p = y.data<float>();
  EXPECT_FLOAT_EQ(p[0], 0.0f);
  EXPECT_FLOAT_EQ(p[1], 1.0f);
  EXPECT_FLOAT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(p[3], -0.125f);
  EXPECT_EQ(xp[1], 1.0f) << "the input must not change";

  // A batch: each sample normalised by the same per-channel values.
  Tensor batch = Tensor::empty({2, 2, 1, 2}, DType::Float32);
  for (int i = 0; i < 8; ++i) batch.data<float>()[i] = xp[i % 4];
  Tensor yb = Normalize({0.5, 0.25}, {0.5, 2.0})(batch);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(yb.data<float>()[i], p[i % 4]) << i;
}

TEST(Normalize, Errors) {
  expect_error([] { Normalize({0.5, 0.5}, {0.5}); },
               "Normalize: mean and std need one value per channel, got 2 means and 1 stds");
  expect_error([] { Normalize({0.5}, {0.0}); }, "Normalize: std of channel 0 is 0");
  Tensor x = Tensor::empty({3, 2, 2}, DType::Float32);
  expect_error([&] { Normalize({0.5}, {0.5})(x); },
               "Normalize: the image has 3 channels (shape [3, 2, 2]) but mean and std have 1");
  expect_error([&] { Normalize({0.5}, {0.5})(u8({1, 1, 1}, {3})); },
               "Normalize: expected a float32 image (apply ToTensor first), got uint8");
}

TEST(RandomHorizontalFlip, AlwaysAndNever) {
  Tensor x = u8({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Generator gen(1);
  EXPECT_EQ(u8_values(RandomHorizontalFlip(1.0)(x, gen)), (std::vector<int>{3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10}));
  EXPECT_EQ(u8_values(RandomHorizontalFlip(0.0)(x, gen)), u8_values(x));

  // Wider elements move whole: float32 rows are mirrored value by value.
  Tensor f = Tensor::empty({1, 1, 3}, DType::Float32);
  f.data<float>()[0] = 1.5f, f.data<float>()[1] = -2.0f, f.data<float>()[2] = 7.25f;
  Tensor g = RandomHorizontalFlip(1.0)(f, gen);
  EXPECT_EQ(g.data<float>()[0], 7.25f);
  EXPECT_EQ(g.data<float>()[1], -2.0f);
  EXPECT_EQ(g.data<float>()[2], 1.5f);
}

TEST(RandomHorizontalFlip, FollowsTheSeededStream) {
  // Sample s of a batch is flipped exactly when the s-th draw is below p.
  const uint64_t seed = 1234;
  const int64_t n = 400;
  Tensor batch = pattern({n, 1, 1, 2});
  Generator gen(seed);
  Tensor y = RandomHorizontalFlip(0.5)(batch, gen);
  EXPECT_EQ(gen.offset(), static_cast<uint64_t>(n)) << "one block per sample";
  int flipped = 0;
  for (int64_t s = 0; s < n; ++s) {
    bool flip = (block_of(seed, s)[0] >> 8) * (1.0 / 16777216.0) < 0.5;
    const uint8_t* in = batch.data<uint8_t>() + 2 * s;
    const uint8_t* out = y.data<uint8_t>() + 2 * s;
    EXPECT_EQ(out[0], flip ? in[1] : in[0]) << s;
    EXPECT_EQ(out[1], flip ? in[0] : in[1]) << s;
    flipped += flip;
  }
  EXPECT_GT(flipped, 150);
  EXPECT_LT(flipped, 250);
  expect_error([] { RandomHorizontalFlip(1.5); }, "RandomHorizontalFlip: p must be in [0, 1], got 1.5");
}

TEST(RandomCrop, CropAtKnownOffsetWithZeroPadding) {
  // x: (1, 3, 3) = [[1 2 3] [4 5 6] [7 8 9]], padded by 1 to 5x5; the 3x3
  // window at (0, 2) covers padded rows 0..2 and columns 2..4.
  Tensor x = u8({1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  RandomCrop crop(3, 1);
  EXPECT_EQ(u8_values(crop.crop_at(x, 0, 2)), (std::vector<int>{0, 0, 0, 2, 3, 0, 5, 6, 0}));
  EXPECT_EQ(u8_values(crop.crop_at(x, 1, 1)), u8_values(x));
  EXPECT_EQ(u8_values(crop.crop_at(x, 2, 0)), (std::vector<int>{0, 4, 5, 0, 7, 8, 0, 0, 0}));
  // A non-square crop of a 2-channel image without padding.
  Tensor y = u8({2, 2, 3}, {1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16});
  EXPECT_EQ(u8_values(RandomCrop(1, 2, 0).crop_at(y, 1, 1)), (std::vector<int>{5, 6, 15, 16}));
  expect_error([&] { crop.crop_at(x, 3, 0); }, "RandomCrop::crop_at: offset (3, 0) outside [0, 2] x [0, 2]");
}

TEST(RandomCrop, OffsetsComeFromTheSeededStream) {
  const uint64_t seed = 99;
  const int64_t n = 64, padding = 4;
  Tensor batch = pattern({n, 3, 8, 8});
  RandomCrop crop(8, padding);
  Generator gen(seed);
  Tensor y = crop(batch, gen);
  ASSERT_EQ(y.shape(), (Shape{n, 3, 8, 8}));
  std::vector<int> seen_top(2 * padding + 1, 0);
  for (int64_t s = 0; s < n; ++s) {
    auto w = block_of(seed, s);
    int64_t top = uniform_int(w[0], 2 * padding + 1), left = uniform_int(w[1], 2 * padding + 1);
    seen_top[top]++;
    Tensor expected = crop.crop_at(batch.select(0, s), top, left);
    EXPECT_TRUE(same_bytes(y.select(0, s).contiguous(), expected)) << "sample " << s << " at " << top << ", " << left;
  }
  for (int64_t t = 0; t <= 2 * padding; ++t) EXPECT_GT(seen_top[t], 0) << "offset " << t << " never drawn";
}

TEST(RandomCrop, Errors) {
  expect_error([] { RandomCrop(0, 2); }, "RandomCrop: size must be positive, got (0, 0)");
  expect_error([] { RandomCrop(4, -1); }, "RandomCrop: padding must be >= 0, got -1");
  Generator gen(0);
  expect_error([&] { RandomCrop(8, 1)(pattern({3, 4, 4}), gen); },
               "RandomCrop: crop size (8, 8) is larger than the padded image (6, 6) of shape [3, 4, 4] with padding 1");
}

TEST(Transforms, DeterministicPerSeed) {
  Compose train({std::make_shared<RandomCrop>(6, 2), std::make_shared<RandomHorizontalFlip>(),
                 std::make_shared<ToTensor>(), std::make_shared<Normalize>(std::vector<double>{0.5, 0.4, 0.3},
                                                                           std::vector<double>{0.2, 0.25, 0.3})});
  EXPECT_EQ(train.name(), "Compose(RandomCrop, RandomHorizontalFlip, ToTensor, Normalize)");
  Tensor x = pattern({3, 6, 6});
  Generator a(sample_seed(7, 0, 5)), b(sample_seed(7, 0, 5));
  Tensor ya = train(x, a), yb = train(x, b);
  EXPECT_EQ(ya.shape(), (Shape{3, 6, 6}));
  EXPECT_EQ(ya.dtype(), DType::Float32);
  EXPECT_TRUE(same_bytes(ya, yb));

  // Compose is the transforms applied one after another on one generator.
  Generator c(sample_seed(7, 0, 5));
  Tensor manual = x;
  for (const auto& t : train.transforms()) manual = t->apply(manual, c);
  EXPECT_TRUE(same_bytes(ya, manual));

  // Across 16 samples some draw a different crop or flip.
  int differ = 0;
  for (uint64_t i = 0; i < 16; ++i) {
    Generator g(sample_seed(7, 0, i));
    differ += !same_bytes(train(x, g), ya);
  }
  EXPECT_GT(differ, 8);
  EXPECT_NE(sample_seed(7, 0, 1), sample_seed(7, 1, 0));
  EXPECT_NE(sample_seed(7, 0, 1), sample_seed(8, 0, 1));
}

TEST(Transforms, BatchEqualsSamplesOneByOne) {
  const int64_t n = 10;
  Tensor batch = pattern({n, 2, 5, 5});
  RandomCrop crop(5, 1);
  RandomHorizontalFlip flip;
  Generator gb(3), gs(3);
  Tensor yb = flip(crop(batch, gb), gb);
  // The batch draws all crops, then all flips; one-by-one must do the same.
  std::vector<Tensor> crops;
  for (int64_t s = 0; s < n; ++s) crops.push_back(crop(batch.select(0, s), gs));
  for (int64_t s = 0; s < n; ++s)
    EXPECT_TRUE(same_bytes(flip(crops[s], gs), yb.select(0, s).contiguous())) << "sample " << s;
}

TEST(Transforms, NonContiguousInput) {
  // A transposed view is read as its logical values.
  Tensor x = pattern({1, 3, 4});
  Tensor xt = x.transpose(1, 2);  // (1, 4, 3)
  Generator gen(0);
  Tensor y = RandomHorizontalFlip(1.0)(xt, gen);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(y.at<int>({0, i, j}), xt.at<int>({0, i, 2 - j}));
}

}  // namespace
}  // namespace kiln::data::transforms
