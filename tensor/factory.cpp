// Constant factories. Ranges live in tensor/range.cpp, random ones in
// tensor/random.cpp.
#include "tensor/factory.h"

#include <cstring>

#include "tensor/backend.h"

namespace kiln {

Tensor empty(const Shape& shape, TensorOptions options) { return Tensor::empty(shape, options); }

Tensor full(const Shape& shape, Scalar value, TensorOptions options) {
  Tensor t = Tensor::empty(shape, options);
  backend_for(t.device()).fill(t, value);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1, options); }
Tensor scalar_tensor(Scalar value, TensorOptions options) { return full({}, value, options); }

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), {t.dtype(), t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {t.dtype(), t.device()}); }
Tensor full_like(const Tensor& t, Scalar value) { return full(t.shape(), value, {t.dtype(), t.device()}); }

template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape, Device device) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  int64_t numel = shape_numel(shape, "from_vector");
  KILN_CHECK(numel == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
             " values cannot fill shape ", shape, " (", numel, " elements)");
  Tensor host = Tensor::empty(shape, dtype_of<T>());
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> is packed: copy element by element.
    bool* dst = host.data<bool>();
    for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
  } else if (!values.empty()) {
    std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  return host.to(device);
}

template Tensor from_vector<bool>(const std::vector<bool>&, Shape, Device);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, Shape, Device);
template Tensor from_vector<int8_t>(const std::vector<int8_t>&, Shape, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, Shape, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, Shape, Device);
template Tensor from_vector<Half>(const std::vector<Half>&, Shape, Device);
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, Shape, Device);
template Tensor from_vector<float>(const std::vector<float>&, Shape, Device);
template Tensor from_vector<double>(const std::vector<double>&, Shape, Device);

}  // namespace kiln
