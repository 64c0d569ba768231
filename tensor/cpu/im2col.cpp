// CPU im2col / col2im.
//
// cols[n, (c*kh + ki)*kw + kj, oy*ow + ox] = x[n, c, iy, ix] with
//   iy = oy*stride.h - padding.h + ki*dilation.h,  ix = ox*stride.w - padding.w + kj*dilation.w,
// and 0 where (iy, ix) falls in the padding. Work is split over the N*C input
// planes: plane (n, c) owns cols rows c*kh*kw .. (c+1)*kh*kw - 1 of image n,
// so im2col threads write disjoint rows and col2im threads accumulate into
// disjoint planes, without atomics and in a fixed order.
//
// For one kernel tap (ki, kj) the valid ox form one interval [lo, hi), the
// same for every oy, so each cols row is zeros, a run read from one input
// row, zeros. With stride.w 1 and contiguous rows that run is a memcpy (im2col)
// or a unit-stride add loop the compiler vectorizes (col2im); that is the
// float32 fast path of the convolution layers. Other layouts take the same
// loops with explicit strides.
#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"

namespace kiln::cpu {

// Elements moved per thread below which the work stays serial.
static constexpr int64_t kIm2colGrain = 1 << 15;

// The output positions o in [0, out) with 0 <= o*stride + offset < size form
// one interval; returns it as [lo, hi) (lo == hi when empty).
struct Interval {
  int64_t lo, hi;
};
static Interval valid_outputs(int64_t offset, int64_t stride, int64_t size, int64_t out) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

// Planes per parallel chunk so that a chunk moves at least kIm2colGrain elements.
static int64_t plane_grain(const Conv2dShape& s) {
  int64_t per_plane = s.kernel.h * s.kernel.w * s.output.h * s.output.w;
  return std::max<int64_t>(1, kIm2colGrain / std::max<int64_t>(per_plane, 1));
}

// Copies n elements. Below a few cache lines a memcpy call costs more than
// the copy (LeNet conv2's rows are 10 floats), so short runs use a plain loop.
template <class T>
static inline void copy_run(T* dst, const T* src, int64_t n) {
  if (n * static_cast<int64_t>(sizeof(T)) >= 256) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

// im2col moves bytes without looking at them, so it is instantiated per
// element size (T is an unsigned integer of that size; zero bits are the
// value 0 in every dtype).
template <class T>
static void im2col_kernel(const Tensor& cols, const Tensor& x, const Conv2dParams& p, const Conv2dShape& s) {
  // x: (N, C, H, W); cols: (N, C*kh*kw, oh*ow)
  const T* x_data = static_cast<const T*>(x.data_ptr());
  T* cols_data = static_cast<T*>(cols.data_ptr());
  const Shape& xs = x.strides();
  const Shape& cs = cols.strides();
  int64_t oh = s.output.h, ow = s.output.w;
  int64_t planes = x.size(0) * s.channels;
  bool unit_rows = xs[3] == 1 && cs[2] == 1;

  parallel_for(0, planes, plane_grain(s), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      int64_t n = plane / s.channels, c = plane % s.channels;
      const T* image = x_data + n * xs[0] + c * xs[1];  // (H, W)
      for (int64_t ki = 0; ki < s.kernel.h; ++ki) {
        int64_t off_h = ki * p.dilation.h - p.padding.h;
        Interval ys = valid_outputs(off_h, p.stride.h, s.input.h, oh);
        for (int64_t kj = 0; kj < s.kernel.w; ++kj) {
          int64_t off_w = kj * p.dilation.w - p.padding.w;
          Interval xr = valid_outputs(off_w, p.stride.w, s.input.w, ow);
          T* row = cols_data + n * cs[0] + ((c * s.kernel.h + ki) * s.kernel.w + kj) * cs[1];  // (oh*ow)
          for (int64_t oy = 0; oy < oh; ++oy) {
            T* dst = row + oy * ow * cs[2];  // (ow)
            if (oy < ys.lo || oy >= ys.hi) {
              for (int64_t ox = 0; ox < ow; ++ox) dst[ox * cs[2]] = T{};
              continue;
            }
            const T* src = image + (oy * p.stride.h + off_h) * xs[2];  // input row iy: (W)
            for (int64_t ox = 0; ox < xr.lo; ++ox) dst[ox * cs[2]] = T{};
            if (unit_rows && p.stride.w == 1) {
              copy_run(dst + xr.lo, src + xr.lo + off_w, xr.hi - xr.lo);
            } else if (unit_rows) {
              for (int64_t ox = xr.lo; ox < xr.hi; ++ox) dst[ox] = src[ox * p.stride.w + off_w];
            } else {
              for (int64_t ox = xr.lo; ox < xr.hi; ++ox) dst[ox * cs[2]] = src[(ox * p.stride.w + off_w) * xs[3]];
            }
            for (int64_t ox = xr.hi; ox < ow; ++ox) dst[ox * cs[2]] = T{};
          }
        }
      }
    }
  });
}

// Adds one image's cols rows for channel c into acc, a contiguous (H, W)
// plane of the accumulation type.
template <class T, class Acc>
static void col2im_plane(Acc* acc, const T* cols_image, const Shape& cs, int64_t c, const Conv2dParams& p,
                         const Conv2dShape& s) {
  int64_t oh = s.output.h, ow = s.output.w;
  for (int64_t ki = 0; ki < s.kernel.h; ++ki) {
    int64_t off_h = ki * p.dilation.h - p.padding.h;
    Interval ys = valid_outputs(off_h, p.stride.h, s.input.h, oh);
    for (int64_t kj = 0; kj < s.kernel.w; ++kj) {
      int64_t off_w = kj * p.dilation.w - p.padding.w;
      Interval xr = valid_outputs(off_w, p.stride.w, s.input.w, ow);
      const T* row = cols_image + ((c * s.kernel.h + ki) * s.kernel.w + kj) * cs[1];  // (oh*ow)
      for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
        const T* src = row + oy * ow * cs[2];                  // (ow)
        Acc* dst = acc + (oy * p.stride.h + off_h) * s.input.w;  // input row iy: (W)
        if (cs[2] == 1 && p.stride.w == 1) {
          for (int64_t ox = xr.lo; ox < xr.hi; ++ox) {
            dst[ox + off_w] = static_cast<Acc>(dst[ox + off_w] + static_cast<Acc>(src[ox]));
          }
        } else {
          for (int64_t ox = xr.lo; ox < xr.hi; ++ox) {
            Acc& d = dst[ox * p.stride.w + off_w];
            d = static_cast<Acc>(d + static_cast<Acc>(src[ox * cs[2]]));
          }
        }
      }
    }
  }
}

template <class T>
static void col2im_kernel(const Tensor& x, const Tensor& cols, const Conv2dParams& p, const Conv2dShape& s) {
  using Acc = ComputeType<T>;
  // x: (N, C, H, W); cols: (N, C*kh*kw, oh*ow)
  T* x_data = x.data<T>();
  const T* cols_data = cols.data<T>();
  const Shape& xs = x.strides();
  const Shape& cs = cols.strides();
  int64_t planes = x.size(0) * s.channels;
  int64_t plane_size = s.input.h * s.input.w;
  // A contiguous plane of the accumulation type is summed in place; other
  // planes (16-bit floats, strided x) go through a per-thread scratch plane.
  bool direct = std::is_same_v<T, Acc> && xs[3] == 1 && xs[2] == s.input.w;

  parallel_for(0, planes, plane_grain(s), [&](int64_t begin, int64_t end) {
    // (H, W); not a std::vector, whose bool specialisation has no data().
    std::unique_ptr<Acc[]> scratch(direct ? nullptr : new Acc[plane_size]);
    for (int64_t plane = begin; plane < end; ++plane) {
      int64_t n = plane / s.channels, c = plane % s.channels;
      T* image = x_data + n * xs[0] + c * xs[1];  // (H, W)
      Acc* acc = direct ? reinterpret_cast<Acc*>(image) : scratch.get();
      std::fill(acc, acc + plane_size, Acc{});
      col2im_plane<T, Acc>(acc, cols_data + n * cs[0], cs, c, p, s);
      if (direct) continue;
      for (int64_t iy = 0; iy < s.input.h; ++iy) {
        for (int64_t ix = 0; ix < s.input.w; ++ix) {
          image[iy * xs[2] + ix * xs[3]] = static_cast<T>(acc[iy * s.input.w + ix]);
        }
      }
    }
  });
}

void CpuBackend::im2col(const Tensor& cols, const Tensor& x, const Conv2dParams& p, const Conv2dShape& s) {
  switch (x.element_size()) {
    case 1: return im2col_kernel<uint8_t>(cols, x, p, s);
    case 2: return im2col_kernel<uint16_t>(cols, x, p, s);
    case 4: return im2col_kernel<uint32_t>(cols, x, p, s);
    case 8: return im2col_kernel<uint64_t>(cols, x, p, s);
    default: KILN_FAIL("im2col: unsupported element size ", x.element_size());
  }
}

void CpuBackend::col2im(const Tensor& x, const Tensor& cols, const Conv2dParams& p, const Conv2dShape& s) {
  visit_dtype(x.dtype(), [&]<class T>() { col2im_kernel<T>(x, cols, p, s); });
}

}  // namespace kiln::cpu
