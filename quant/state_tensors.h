// Reading and writing the small state tensors of the observers and of
// FakeQuantize (min/max, histogram, scale, zero point, flags) wherever
// Module::to has put them: any device, and any floating dtype for the
// floating ones. The statistics are computed on host float32 copies and
// written back. Internal to quant/.
#pragma once

#include <vector>

#include "tensor/elementwise.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"

namespace kiln::quant::detail {

// t's values as float32, in order.
inline std::vector<float> host_floats(const Tensor& t) {
  Tensor c = t.detach().to(DType::Float32, kCPU).contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// The single value of a one-element tensor, as float32.
inline float scalar_of(const Tensor& t) { return t.item<float>(); }

// Copies v (t.numel() values) into t, converting to t's dtype and device.
inline void store_floats(Tensor& t, const std::vector<float>& v) {
  t.copy_(from_vector<float>(v, t.shape()));
}

inline void fill(Tensor& t, double value) { ops::fill_(t, value); }

// Points t (keeping its handle, which module members and optimizers hold)
// at zeros of `shape` in t's dtype and device, when its shape differs.
inline void resize_keeping_handle(Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return;
  t.impl()->set_storage(zeros(shape, {t.dtype(), t.device()}), shape);
}

}  // namespace kiln::quant::detail
