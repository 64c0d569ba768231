// What the batch norm (norm.cu) and layer norm (layer_norm.cu) kernels'
// host sides share: the dtype dispatch and typed data pointers.
#pragma once

#include "tensor/cuda/dtype.cuh"
#include "tensor/tensor.h"

namespace kiln::cuda {

// Calls fn.template operator()<T, C>() with T the device type of x's
// floating dtype and C its compute (stats) type.
template <class Fn>
void visit_norm_types(DType dtype, const char* op, Fn&& fn) {
  visit_floating_dtype(dtype, op, [&]<class KT>() {
    using T = DeviceType<KT>;
    fn.template operator()<T, decltype(to_compute(T{}))>();
  });
}

template <class T>
const T* data_of(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}

// The data of `t`, or null when it is undefined (an output not asked for).
template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace kiln::cuda
