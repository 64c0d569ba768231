// The Philox4x32-10 round function and the bit-to-number conversions of the
// random kernels, shared by the CPU (tensor/cpu/random.cpp) and CUDA
// (tensor/cuda/random.cu) backends so that a seed gives the same bits on
// both (Note [Random streams] in tensor/random.h).
//
// Plain C++ sees ordinary inline functions; under nvcc they are
// __host__ __device__.
//
// Note [Bitwise random streams]
// CPU and CUDA give the same bits only if every floating operation rounds
// the same way on both. The conversions below are exact (a 24- or 53-bit
// integer times a power of two). The normal distribution needs log and cos,
// which the host's libm and CUDA's libdevice each evaluate to within an ulp
// or so but not always to the same double; normal_value therefore computes
// them itself from +, *, / and sqrt, each rounded once to nearest on both
// sides: the device through the _rn intrinsics, which nvcc never contracts
// into fused multiply-adds, the host because tensor/cpu/random.cpp is
// compiled for baseline x86-64, which has no FMA to contract into.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/host_device.h"

namespace kiln::philox {

// Four random 32-bit words: one Philox block.
struct Block {
  uint32_t w[4];
};

// Philox4x32-10 (Salmon et al., SC 2011) of the 128-bit counter
// (counter_hi:counter_lo) under the 64-bit key.
KILN_HOST_DEVICE inline Block philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  // The round multipliers and the Weyl key increments (golden ratio and
  // sqrt(3) - 1, in 32-bit fixed point) from Salmon et al., Table 2.
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule bumps the key before every round but the first
      k0 += kW0;
      k1 += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// The block of element i of a random tensor: counter offset + i, carrying
// into the counter's upper half.
KILN_HOST_DEVICE inline Block element_block(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t lo = offset + i;
  uint64_t hi = lo < offset ? 1 : 0;
  return philox4x32_10(lo, hi, seed);
}

KILN_HOST_DEVICE inline uint64_t join64(uint32_t lo, uint32_t hi) { return (static_cast<uint64_t>(hi) << 32) | lo; }

// Uniform in [0, 1) with 24 or 53 random bits; both are exact in a double.
KILN_HOST_DEVICE inline double uniform24(uint32_t w) { return static_cast<double>(w >> 8) * (1.0 / 16777216.0); }
KILN_HOST_DEVICE inline double uniform53(uint32_t lo, uint32_t hi) {
  return static_cast<double>(join64(lo, hi) >> 11) * (1.0 / 9007199254740992.0);
}

// floor(x * range / 2^64): Lemire's multiply-shift onto [0, range).
KILN_HOST_DEVICE inline uint64_t multiply_shift(uint64_t x, uint64_t range) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(x, range);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * range) >> 64);
#endif
}

// ---- Box-Muller (Note [Bitwise random streams]) ----

namespace detail {

// One IEEE operation, rounded to nearest, never fused with another.
KILN_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
KILN_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
KILN_HOST_DEVICE inline double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
KILN_HOST_DEVICE inline double sqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}

KILN_HOST_DEVICE inline uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}
KILN_HOST_DEVICE inline double double_of(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

// p(x) = c[0] + c[1] x + ... + c[n-1] x^(n-1), by Horner's rule in x^2
// over the pairs c[2k] + c[2k+1] x: the pairs are independent, so the
// dependent chain is half as long as plain Horner's.
template <int n>
KILN_HOST_DEVICE inline double polynomial(const double (&c)[n], double x) {
  const double x2 = mul(x, x);
  int k = n - 1;
  double p;
  if (n % 2 == 1) {
    p = c[k];
    k -= 1;
  } else {
    p = add(c[k - 1], mul(c[k], x));
    k -= 2;
  }
  for (; k >= 1; k -= 2) p = add(add(c[k - 1], mul(c[k], x)), mul(p, x2));
  return p;
}

}  // namespace detail

// log(x) for a normal double x in (0, 1], within about two ulp: x = m * 2^e
// with m in [sqrt(1/2), sqrt(2)), and log(m) = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| < 0.172, as a series in s^2 to 2^-56.
KILN_HOST_DEVICE inline double log_unit(double x) {
  using namespace detail;
  // 2 / (2k + 1), k = 0 .. 11.
  constexpr double kAtanh[12] = {2.0, 0.6666666666666666, 0.4, 0.2857142857142857,
                                 0.2222222222222222, 0.18181818181818182, 0.15384615384615385, 0.13333333333333333,
                                 0.11764705882352941, 0.10526315789473684, 0.09523809523809523, 0.08695652173913043};
  // log(2) split so that e * kLn2Hi is exact (fdlibm's constants).
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  const uint64_t bits = bits_of(x);
  auto e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  double m = double_of((bits & 0xfffffffffffffull) | (uint64_t{1023} << 52));  // [1, 2)
  if (m > 1.4142135623730951) {
    m = mul(m, 0.5);
    e += 1;
  }
  const double s = div(add(m, -1.0), add(m, 1.0));  // m - 1 is exact (Sterbenz)
  const double log_m = mul(s, polynomial(kAtanh, mul(s, s)));
  const auto de = static_cast<double>(e);
  return add(mul(de, kLn2Hi), add(mul(de, kLn2Lo), log_m));
}

// cos(2 pi u) for u in [0, 1), within about two ulp: u = q/4 + d with
// |d| <= 1/8 exactly, then the Taylor series of cos or sin of 2 pi d.
KILN_HOST_DEVICE inline double cos_two_pi(double u) {
  using namespace detail;
  // (-1)^k (2 pi)^(2k) / (2k)! and (-1)^k (2 pi)^(2k+1) / (2k+1)!, k = 0 .. 9.
  constexpr double kCos[10] = {1.0,
                               -19.739208802178716,
                               64.9393940226683,
                               -85.45681720669373,
                               60.24464137187666,
                               -26.4262567833744,
                               7.903536371318469,
                               -1.714390711088672,
                               0.28200596845579123,
                               -0.03638284114254567};
  constexpr double kSin[10] = {6.283185307179586,   -41.34170224039976,  81.60524927607506,
                               -76.70585975306139,  42.058693944897655,  -15.09464257682299,
                               3.819952584848282,   -0.7181223017785006, 0.10422916220813984,
                               -0.012031585942120627};
  const double u4 = mul(u, 4.0);  // exact
  auto q = static_cast<int>(u4);
  if (add(u4, -static_cast<double>(q)) >= 0.5) ++q;
  const double d = mul(add(u4, -static_cast<double>(q)), 0.25);  // both exact
  const double d2 = mul(d, d);
  switch (q & 3) {
    case 0: return polynomial(kCos, d2);
    case 1: return -mul(d, polynomial(kSin, d2));
    case 2: return -polynomial(kCos, d2);
    default: return mul(d, polynomial(kSin, d2));
  }
}

// A normal value (mean, std) from one block by Box-Muller: u1 in (0, 1]
// from (w1:w0), so log(u1) is finite, u2 in [0, 1) from (w3:w2).
KILN_HOST_DEVICE inline double normal_value(const Block& b, double mean, double std) {
  using namespace detail;
  const double u1 = add(1.0, -uniform53(b.w[0], b.w[1]));
  const double u2 = uniform53(b.w[2], b.w[3]);
  const double z = mul(sqrt(mul(-2.0, log_unit(u1))), cos_two_pi(u2));
  return add(mean, mul(std, z));
}

}  // namespace kiln::philox
