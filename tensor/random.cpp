// Philox4x32-10, the generator state, and the random factories. The kernels
// that turn Philox blocks into values live in tensor/cpu/random.cpp.
#include "tensor/random.h"

#include <cmath>
#include <limits>

#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/philox.h"

namespace kiln {

namespace {

// torch's default CPU seed, so that an unseeded program is still repeatable.
constexpr uint64_t kDefaultSeed = 67280421310721ull;

}  // namespace

std::array<uint32_t, 4> Philox4x32::block(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  philox::Block b = philox::philox4x32_10(counter_lo, counter_hi, key);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = offset;
}

uint64_t Generator::advance(uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t first = offset_;
  offset_ += count;
  return first;
}

Generator& default_generator() {
  static Generator generator(kDefaultSeed);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

// Fills the contiguous tensor `t` from the next numel() counters of `gen`.
// The seed is read before the offset is reserved; a concurrent manual_seed
// could interleave, but then no ordering of the two calls is promised anyway.
void fill_random(const Tensor& t, Distribution dist, double a, double b, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  uint64_t seed = g.seed();
  uint64_t offset = g.advance(static_cast<uint64_t>(t.numel()));
  backend_for(t.device()).random(t, dist, a, b, seed, offset);
}

// The in-place fills write through any layout: a non-contiguous tensor gets
// its values in row-major order via a contiguous scratch tensor.
void fill_random_inplace(Tensor& t, Distribution dist, double a, double b, Generator* gen) {
  if (t.is_contiguous()) {
    fill_random(t, dist, a, b, gen);
  } else {
    Tensor scratch = Tensor::empty(t.shape(), {t.dtype(), t.device()});
    fill_random(scratch, dist, a, b, gen);
    t.copy_(scratch);
  }
  t.bump_version();
}

void check_floating(DType dtype, const char* op) {
  KILN_CHECK(is_floating(dtype), op, ": expected a floating point dtype, got ", dtype);
}

// Integers whose magnitude is at most 2^53 pass through the backend's double
// arguments exactly.
constexpr int64_t kMaxExactInt = int64_t{1} << 53;

// The smallest and largest integer `dtype` can hold (0 and 1 for bool).
std::pair<int64_t, int64_t> integer_limits(DType dtype) {
  return visit_dtype(dtype, [&]<class T>() -> std::pair<int64_t, int64_t> {
    if constexpr (std::is_same_v<T, bool>) {
      return {0, 1};
    } else if constexpr (std::is_integral_v<T>) {
      return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
    } else {
      return {-kMaxExactInt, kMaxExactInt};
    }
  });
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  check_floating(options.dtype, "rand");
  Tensor t = Tensor::empty(shape, options);
  fill_random(t, Distribution::Uniform, 0.0, 1.0, gen);
  return t;
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  check_floating(options.dtype, "randn");
  Tensor t = Tensor::empty(shape, options);
  fill_random(t, Distribution::Normal, 0.0, 1.0, gen);
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator* gen) {
  KILN_CHECK(low < high, "randint: expected low < high, got low ", low, " and high ", high);
  KILN_CHECK(low >= -kMaxExactInt && high <= kMaxExactInt, "randint: bounds must lie within +-2^53, got low ", low,
             " and high ", high);
  auto [lo, hi] = integer_limits(options.dtype);
  KILN_CHECK(low >= lo && high - 1 <= hi, "randint: the range [", low, ", ", high, ") does not fit in ",
             options.dtype, " (", lo, " to ", hi, ")");
  Tensor t = Tensor::empty(shape, options);
  fill_random(t, Distribution::RandInt, static_cast<double>(low), static_cast<double>(high), gen);
  return t;
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions options, Generator* gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: p must be in [0, 1], got ", p);
  Tensor t = Tensor::empty(shape, options);
  fill_random(t, Distribution::Bernoulli, p, 0.0, gen);
  return t;
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_floating(t.dtype(), "uniform_");
  KILN_CHECK(std::isfinite(low) && std::isfinite(high), "uniform_: bounds must be finite, got low ", low,
             " and high ", high);
  KILN_CHECK(low <= high, "uniform_: expected low <= high, got low ", low, " and high ", high);
  fill_random_inplace(t, Distribution::Uniform, low, high, gen);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_floating(t.dtype(), "normal_");
  KILN_CHECK(std::isfinite(mean) && std::isfinite(std), "normal_: mean and std must be finite, got mean ", mean,
             " and std ", std);
  KILN_CHECK(std >= 0.0, "normal_: expected std >= 0, got ", std);
  fill_random_inplace(t, Distribution::Normal, mean, std, gen);
  return t;
}

}  // namespace kiln
