// CPU where (select by a bool condition) and clamp kernels.
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace kiln::cpu {

namespace {

// Below this many elements a kernel stays on one thread.
constexpr int64_t kGrain = 1 << 15;

// One contiguous run of where: x and y step by x_step / y_step elements (1,
// or 0 for an operand broadcast from a scalar, as relu's backward passes
// where(mask, grad, 0)).
template <class W, int64_t XStep, int64_t YStep>
void where_run(W* o, const bool* c, const W* x, const W* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // Both loads happen unconditionally and the select is done with a mask,
    // so the compiler may vectorize (it cannot with `c[i] ? x[i] : y[i]`,
    // whose loads it must not move ahead of the test).
    const W xi = x[i * XStep], yi = y[i * YStep];
    const W mask = static_cast<W>(W{0} - static_cast<W>(c[i]));  // all ones where c[i]
    o[i] = static_cast<W>((xi & mask) | (yi & static_cast<W>(~mask)));
  }
}

// where only moves elements, so it is instantiated per element size, not
// per dtype: W is an unsigned integer as wide as the element.
template <class W>
void where_loop(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  constexpr int64_t w = sizeof(W);
  StridedLoop<4> loop({&out, &cond, &a, &b});
  loop.run(kGrain, [](char** p, const int64_t* s, int64_t n) {
    const bool dense = s[0] == w && s[1] == 1;
    const bool a_run = s[2] == w || s[2] == 0, b_run = s[3] == w || s[3] == 0;
    if (dense && a_run && b_run) {
      W* o = reinterpret_cast<W*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const W* x = reinterpret_cast<const W*>(p[2]);
      const W* y = reinterpret_cast<const W*>(p[3]);
      if (s[2] == w && s[3] == w) return where_run<W, 1, 1>(o, c, x, y, n);
      if (s[2] == w) return where_run<W, 1, 0>(o, c, x, y, n);
      if (s[3] == w) return where_run<W, 0, 1>(o, c, x, y, n);
      return where_run<W, 0, 0>(o, c, x, y, n);
    }
    for (int64_t i = 0; i < n; ++i) {
      bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
      const char* src = c ? p[2] + i * s[2] : p[3] + i * s[3];
      std::memcpy(p[0] + i * s[0], src, w);
    }
  });
}

// max(x, lo) then min(., hi), as torch: lo > hi gives hi everywhere, and a
// NaN in x or in a bound gives NaN.
template <class C>
C clamp_value(C x, const std::optional<C>& lo, const std::optional<C>& hi) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(x)) return x;
    if (lo && std::isnan(*lo)) return *lo;
    if (hi && std::isnan(*hi)) return *hi;
  }
  if (lo && x < *lo) x = *lo;
  if (hi && x > *hi) x = *hi;
  return x;
}

// A contiguous run with the bounds known (HasLo, HasHi) and not NaN: plain
// compares that the compiler vectorizes, and which let a NaN in x through as
// clamp_value does (every compare with NaN is false).
template <class T, class C, bool HasLo, bool HasHi>
void clamp_run(T* o, const T* x, int64_t n, C lo, C hi) {
  for (int64_t i = 0; i < n; ++i) {
    C v = static_cast<C>(x[i]);
    if constexpr (HasLo) v = v < lo ? lo : v;
    if constexpr (HasHi) v = v > hi ? hi : v;
    o[i] = static_cast<T>(v);
  }
}

template <class T>
void clamp_loop(const Tensor& out, const Tensor& in, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  using C = ComputeType<T>;
  // Bounds round to T first, as torch casts them to the tensor's dtype.
  std::optional<C> lo_v, hi_v;
  if (lo) lo_v = static_cast<C>(lo->to<T>());
  if (hi) hi_v = static_cast<C>(hi->to<T>());
  bool nan_bound = false;
  if constexpr (std::is_floating_point_v<C>) nan_bound = (lo_v && std::isnan(*lo_v)) || (hi_v && std::isnan(*hi_v));
  StridedLoop<2> loop({&out, &in});
  loop.run(kGrain, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T) && !nan_bound) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      const C l = lo_v.value_or(C{}), h = hi_v.value_or(C{});
      if (lo_v && hi_v) return clamp_run<T, C, true, true>(o, x, n, l, h);
      if (lo_v) return clamp_run<T, C, true, false>(o, x, n, l, h);
      if (hi_v) return clamp_run<T, C, false, true>(o, x, n, l, h);
      return clamp_run<T, C, false, false>(o, x, n, l, h);
    }
    for (int64_t i = 0; i < n; ++i) {
      C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(clamp_value(x, lo_v, hi_v));
    }
  });
}

}  // namespace

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  switch (out.element_size()) {
    case 1: return where_loop<uint8_t>(out, cond, a, b);
    case 2: return where_loop<uint16_t>(out, cond, a, b);
    case 4: return where_loop<uint32_t>(out, cond, a, b);
    case 8: return where_loop<uint64_t>(out, cond, a, b);
  }
  KILN_FAIL("where: unexpected element size ", out.element_size(), " of ", out.dtype());
}

void CpuBackend::clamp(const Tensor& out, const Tensor& in, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL("clamp: not supported for bool tensors");
    } else {
      clamp_loop<T>(out, in, lo, hi);
    }
  });
}

}  // namespace kiln::cpu
