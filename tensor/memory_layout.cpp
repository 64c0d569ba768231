// Dense layouts and channels-last tensors (Note [Channels-last quantized
// activations] in tensor/memory_layout.h).
#include "tensor/memory_layout.h"

#include <algorithm>
#include <numeric>

#include "tensor/error.h"

namespace kiln {

std::optional<std::vector<int64_t>> dense_dim_order(const Tensor& t) {
  // Size-1 dims (whose stride means nothing) first, in their own order; the
  // others by decreasing stride, ties kept in order.
  std::vector<int64_t> order, sized;
  for (int64_t d = 0; d < t.dim(); ++d) (t.size(d) == 1 ? order : sized).push_back(d);
  std::stable_sort(sized.begin(), sized.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  order.insert(order.end(), sized.begin(), sized.end());
  if (t.numel() == 0) return order;
  int64_t expected = 1;
  for (auto d = sized.rbegin(); d != sized.rend(); ++d) {
    if (t.stride(*d) != expected) return std::nullopt;
    expected *= t.size(*d);
  }
  return order;
}

Tensor empty_like_layout(const Tensor& t, TensorOptions options) {
  if (t.is_contiguous()) return Tensor::empty(t.shape(), options);
  const auto order = dense_dim_order(t);
  if (!order) return Tensor::empty(t.shape(), options);
  Shape permuted_shape;
  for (int64_t d : *order) permuted_shape.push_back(t.size(d));
  Shape inverse(order->size());
  for (size_t i = 0; i < order->size(); ++i) inverse[static_cast<size_t>((*order)[i])] = static_cast<int64_t>(i);
  return Tensor::empty(permuted_shape, options).permute(inverse);
}

Tensor empty_channels_last(const Shape& nchw, TensorOptions options) {
  KILN_CHECK(nchw.size() == 4, "empty_channels_last: expected an (N, C, H, W) shape, got ", nchw);
  // The (N, H, W, C) allocation under NCHW sizes and NHWC strides: a tensor
  // of its own (the NHWC handle is dropped), not a recorded view of one.
  const Tensor nhwc = Tensor::empty({nchw[0], nchw[2], nchw[3], nchw[1]}, options);
  const int64_t c = nchw[1], w = nchw[3];
  return Tensor(std::make_shared<TensorImpl>(nhwc.storage(), nhwc.dtype(), nchw,
                                             Shape{nchw[2] * w * c, 1, w * c, c}, nhwc.storage_offset()));
}

bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4) return false;
  const int64_t expected[4] = {t.size(1) * t.size(2) * t.size(3), 1, t.size(3) * t.size(1), t.size(1)};
  for (int d = 0; d < 4; ++d)
    if (t.size(d) != 1 && t.stride(d) != expected[d]) return false;
  return true;
}

Tensor flat_view(const Tensor& t, std::string_view op) {
  KILN_CHECK(dense_dim_order(t).has_value(), op, ": expected a tensor whose elements fill their memory densely, got "
             "shape ", t.shape(), " with strides ", t.strides());
  const auto& params = t.impl()->quant_params();
  KILN_CHECK(!params || params->scheme == QuantParams::Scheme::PerTensor, op,
             ": a tensor quantized per channel has no flat view (its channels would be lost)");
  // The dense span starts at the element with every index 0 (dense_dim_order
  // admits only positive strides). One handle on the same storage and
  // version counter, as a view has, built directly: the ops that flatten
  // run on tensors that need no gradient, and this is their per-call cost.
  auto impl = std::make_shared<TensorImpl>(t.storage(), t.dtype(), Shape{t.numel()}, Shape{1}, t.storage_offset(),
                                           t.impl()->version_counter());
  impl->set_quant_params(params);
  return Tensor(std::move(impl));
}

}  // namespace kiln
