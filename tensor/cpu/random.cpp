// CPU random fills: each element is a pure function of (seed, offset + i), see
// Note [Random streams] in tensor/random.h, so chunks can run on any thread in
// any order and the tensor comes out the same for every thread count.
//
// How one Philox block (four 32-bit words w0..w3) becomes one element:
// - Uniform:   float32 and 16-bit floats use the top 24 bits of w0, float64
//              the top 53 bits of (w1:w0), as u in [0, 1); value a + (b-a)*u.
// - Normal:    Box-Muller, u1 in (0, 1] from (w1:w0) so log(u1) is finite,
//              u2 in [0, 1) from (w3:w2); mean a, std b; computed in double
//              by philox::normal_value, whose log and cos round as on CUDA
//              (Note [Bitwise random streams] in tensor/philox.h). This file
//              is compiled for baseline x86-64 (no FMA) so that no product
//              and sum are contracted into one rounding.
// - Bernoulli: 1 when the 53-bit uniform from (w1:w0) is below p = a.
// - RandInt:   a + floor(x * (b - a) / 2^64) with x = (w1:w0), Lemire's
//              multiply-shift. Like the modulo it replaces it has no
//              rejection loop and is biased by at most (b - a) / 2^64 per
//              value, about 5e-11 for a range of a billion.

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"
#include "tensor/philox.h"
#include "tensor/random.h"

namespace kiln::cpu {

namespace {

// One Philox block costs ~20 ns; 8192 of them easily pay for a thread start.
constexpr int64_t kRandomGrain = 1 << 13;

using philox::join64;
using philox::uniform24;
using philox::uniform53;

// The block for element i (tensor/philox.h), inlined into the loops below.
std::array<uint32_t, 4> element_block(uint64_t seed, uint64_t offset, int64_t i) {
  philox::Block b = philox::element_block(seed, offset, static_cast<uint64_t>(i));
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

template <class T>
T cast_to(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// a + (b - a) * u rounded to T. u < 1, but the rounding to T can still land
// on b (for float32, 1 + (1 - 2^-24) rounds to 2); such values become a, as
// torch's CUDA uniform kernel does, so the result always lies in [a, b).
template <class T>
T uniform_value(const std::array<uint32_t, 4>& w, double a, double b) {
  double u = std::is_same_v<T, double> ? uniform53(w[0], w[1]) : uniform24(w[0]);
  T value = cast_to<T>(a + (b - a) * u);
  if (static_cast<double>(value) >= b && a < b) value = cast_to<T>(a);
  return value;
}

double normal_value(const std::array<uint32_t, 4>& w, double mean, double std) {
  return philox::normal_value({{w[0], w[1], w[2], w[3]}}, mean, std);
}

// b - a is at most 2^54 (the front-end keeps both bounds within +-2^53), so
// it fits a uint64 exactly and the 128-bit product cannot overflow.
int64_t randint_value(const std::array<uint32_t, 4>& w, int64_t low, uint64_t range) {
  return low + static_cast<int64_t>(philox::multiply_shift(join64(w[0], w[1]), range));
}

template <class T>
void random_range(T* out, int64_t begin, int64_t end, Distribution dist, double a, double b, uint64_t seed,
                  uint64_t offset) {
  switch (dist) {
    case Distribution::Uniform:
      for (int64_t i = begin; i < end; ++i) out[i] = uniform_value<T>(element_block(seed, offset, i), a, b);
      return;
    case Distribution::Normal:
      for (int64_t i = begin; i < end; ++i) out[i] = cast_to<T>(normal_value(element_block(seed, offset, i), a, b));
      return;
    case Distribution::Bernoulli:
      for (int64_t i = begin; i < end; ++i) {
        auto w = element_block(seed, offset, i);
        out[i] = cast_to<T>(uniform53(w[0], w[1]) < a ? 1.0 : 0.0);
      }
      return;
    case Distribution::RandInt: {
      auto low = static_cast<int64_t>(a);
      auto range = static_cast<uint64_t>(static_cast<int64_t>(b) - low);
      for (int64_t i = begin; i < end; ++i) {
        int64_t v = randint_value(element_block(seed, offset, i), low, range);
        if constexpr (std::is_integral_v<T>) out[i] = static_cast<T>(v);
        else out[i] = cast_to<T>(static_cast<double>(v));
      }
      return;
    }
  }
  KILN_FAIL("random: invalid distribution code ", static_cast<int>(dist));
}

}  // namespace

void CpuBackend::random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed, uint64_t offset) {
  KILN_CHECK(out.is_contiguous(), "random: the output must be contiguous, got shape ", out.shape(), " and strides ",
             out.strides());
  visit_dtype(out.dtype(), [&]<class T>() {
    T* data = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), kRandomGrain, [&](int64_t begin, int64_t end) {
      random_range<T>(data, begin, end, dist, a, b, seed, offset);
    });
  });
}

}  // namespace kiln::cpu
