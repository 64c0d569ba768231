// Range factories: arange, linspace, eye, following torch's dtype rules and
// its formulas, so that the same arguments give the same elements.
//
// The values are computed on the CPU and copied to the target device: these
// tensors are small and made once (positions, grids, identity matrices), so a
// device kernel would not pay for itself.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/backend.h"
#include "tensor/factory.h"

namespace kiln {

namespace {

template <class T>
T cast_to(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// Scalars made from bool or integer values; arange keeps those exact.
bool is_exact_integer(const Scalar& s) { return !s.is_floating(); }

// ceil((end - start) / step) in exact integer arithmetic, as torch does for
// int64: the 128-bit difference cannot overflow for any int64 bounds.
int64_t integer_range_size(int64_t start, int64_t end, int64_t step) {
  __int128 span = static_cast<__int128>(end) - start;
  __int128 sign = step > 0 ? 1 : -1;
  __int128 size = (span + step - sign) / step;
  KILN_CHECK(size <= std::numeric_limits<int64_t>::max(), "arange: the range has too many elements (start ", start,
             ", end ", end, ", step ", step, ")");
  return static_cast<int64_t>(size);
}

}  // namespace

Tensor arange(Scalar end, TensorOptions options) { return arange(0, end, 1, options); }

// As torch.arange: integer start, end and step give int64 unless a dtype is
// given; any floating argument gives float32.
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions options) {
  bool all_integers = is_exact_integer(start) && is_exact_integer(end) && is_exact_integer(step);
  DType dtype = all_integers && !options.dtype_given ? DType::Int64 : options.dtype;
  double xstart = start.to<double>(), xend = end.to<double>(), xstep = step.to<double>();

  KILN_CHECK(std::isfinite(xstart) && std::isfinite(xend), "arange: start and end must be finite (start ", start,
             ", end ", end, ")");
  KILN_CHECK(xstep != 0.0, "arange: step must be non-zero (start ", start, ", end ", end, ", step ", step, ")");
  KILN_CHECK((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart),
             "arange: upper bound and step are inconsistent (start ", start, ", end ", end, ", step ", step, ")");

  int64_t size;
  if (all_integers) {
    size = integer_range_size(start.to<int64_t>(), end.to<int64_t>(), step.to<int64_t>());
  } else {
    double size_d = std::ceil((xend - xstart) / xstep);
    KILN_CHECK(size_d < 9.2e18, "arange: the range has too many elements (start ", start, ", end ", end, ", step ",
               step, ")");
    size = static_cast<int64_t>(size_d);
  }

  Tensor host = Tensor::empty({size}, dtype);
  visit_dtype(dtype, [&]<class T>() {
    T* out = host.data<T>();
    if (all_integers) {
      // Integer bounds stay exact in int64, even past 2^53.
      int64_t s = start.to<int64_t>(), d = step.to<int64_t>();
      for (int64_t i = 0; i < size; ++i) {
        int64_t v = s + i * d;
        if constexpr (std::is_integral_v<T>) out[i] = static_cast<T>(v);
        else out[i] = cast_to<T>(static_cast<double>(v));
      }
    } else {
      // start + i * step in double, not repeated addition, so errors do not
      // accumulate along the range (torch's formula).
      for (int64_t i = 0; i < size; ++i) out[i] = cast_to<T>(xstart + xstep * static_cast<double>(i));
    }
  });
  return host.to(options.device);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  KILN_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor host = Tensor::empty({steps}, options.dtype);
  visit_dtype(options.dtype, [&]<class T>() {
    T* out = host.data<T>();
    if (steps == 1) {
      out[0] = cast_to<T>(start);
      return;
    }
    // torch's formula: the step is computed in the output's precision (double
    // for integers), the first half counts up from start and the second half
    // down from end, so the result is symmetric and ends exactly on `end`.
    using Step = std::conditional_t<std::is_floating_point_v<ComputeType<T>>, ComputeType<T>, double>;
    Step s = static_cast<Step>(static_cast<ComputeType<T>>(cast_to<T>(start)));
    Step e = static_cast<Step>(static_cast<ComputeType<T>>(cast_to<T>(end)));
    Step step = (e - s) / static_cast<Step>(steps - 1);
    int64_t halfway = steps / 2;
    for (int64_t i = 0; i < steps; ++i) {
      Step v = i < halfway ? s + step * static_cast<Step>(i) : e - step * static_cast<Step>(steps - i - 1);
      out[i] = cast_to<T>(static_cast<double>(v));
    }
  });
  return host.to(options.device);
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  KILN_CHECK(n >= 0, "eye: n must be non-negative, got ", n);
  if (m < 0) m = n;
  Tensor t = zeros({n, m}, options);
  // The diagonal of a row-major (n, m) matrix is a 1-d view with stride m + 1.
  Tensor diagonal = t.as_strided({std::min(n, m)}, {m + 1}, 0);
  backend_for(t.device()).fill(diagonal, 1);
  return t;
}

}  // namespace kiln
