// Mixed precision, as torch.autocast: inside an AutocastGuard, each
// differentiable op chooses the dtype it runs in, so that the matrix
// products run in a 16-bit float while the parameters stay float32.
//
//   {
//     kiln::AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
//     Tensor loss = F::cross_entropy(model(images), labels);  // conv2d, linear: bfloat16; the loss: float32
//   }
//   loss.backward();  // outside the scope, as PyTorch recommends; weight.grad() is float32
//
// Note [Autocast]
// An autocast state per thread and device type (enabled, dtype; as torch,
// the dtype defaults to bfloat16 on the CPU and float16 on CUDA) is read by
// every differentiable op at its entry, which sorts the op into one of
// PyTorch's three lists:
// - lower precision (mm, bmm, matmul, linear, conv2d): the floating inputs
//   are cast to the autocast dtype. These are the ops whose cost is the
//   multiply-adds, which 16-bit tensor cores and halved memory traffic speed
//   up, and which accumulate in float32 inside the kernel anyway.
// - float32 (exp, log, rsqrt, pow, sum, prod, softmax, log_softmax,
//   logsumexp, layer_norm and the losses): 16-bit inputs are cast up to
//   float32, because their results leave the 16-bit range (exp, pow),
//   or they sum many terms (reductions, norms, losses), where bfloat16's 8-bit
//   mantissa would lose the small ones.
// - promote (scatter_add): inputs of different floating dtypes are cast to
//   the widest of them. The elementwise ops, cat, stack and where already
//   promote by themselves (tensor/ops.h), so they need no entry here.
// Every other op (relu, max_pool2d, batch_norm, the views...) runs in
// whatever dtype its input has, which inside a lower-precision chain is the
// 16-bit one. Only floating tensors on the autocast device type are cast,
// never integer ones, and never float64 ones (as torch: whoever asked for
// float64 meant it).
//
// The entry of an op is one line that re-enters the op with cast arguments
// when autocast changes any of them:
//   Tensor mm(const Tensor& a, const Tensor& b) {
//     if (auto cast = autograd::autocast_lower_precision(a, b)) return mm((*cast)[0], (*cast)[1]);
// The re-entered call finds its arguments already in the op's dtype, so the
// body below the entry never sees autocast. The casts are ordinary
// differentiable Tensor::to conversions: the gradient reaching a bfloat16
// copy of a float32 weight is cast back to float32 on its way to the
// weight's .grad(), which therefore stays float32 (as does the optimizer's
// update of it).
//
// Within one autocast region (until the outermost AutocastGuard closes),
// the lower-precision copy of a float32 leaf that requires grad (a
// parameter) is made once and reused, as PyTorch's autocast cache: a weight
// shared by several ops, or used at every step of a recurrence, is converted
// once per forward. Each use still records its own cast node, so backward
// may run after each of several forwards in one region. The cache checks the
// parameter's version, so an optimizer step inside the region forces a fresh
// copy. It is used only while grad mode is on (a copy made without history
// would cut the parameter's gradient off in a later forward).
//
// Backward should run outside the region (as in PyTorch): the backward
// formulas are written with the same differentiable ops, and inside a
// region their products would be cast again. The gradients would still
// reach every input in its own dtype (the engine converts them), but in
// precisions the forward did not choose.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>

#include "tensor/tensor.h"

namespace kiln {

// The autocast state of this thread for one device type.
bool autocast_enabled(DeviceType device_type);
DType autocast_dtype(DeviceType device_type);
void set_autocast_enabled(DeviceType device_type, bool enabled);
// dtype must be Float16 or BFloat16; throws kiln::Error otherwise.
void set_autocast_dtype(DeviceType device_type, DType dtype);
// Drops the parameter copies kept for the current region (Note [Autocast]);
// the outermost AutocastGuard calls it when it closes.
void clear_autocast_cache();

// Sets the autocast state of one device type for its scope and restores the
// previous one on exit, as `with torch.autocast(device_type, dtype, enabled,
// cache_enabled)`. Nestable: an inner guard with enabled=false turns
// autocast off for a part of a region (say, for an op that must see float32).
//   kiln::AutocastGuard autocast(DeviceType::CUDA, DType::Float16);
class AutocastGuard {
 public:
  // dtype must be Float16 or BFloat16; throws kiln::Error otherwise.
  AutocastGuard(DeviceType device_type, DType dtype, bool enabled = true, bool cache_enabled = true);
  // Keeps the device type's current autocast dtype.
  explicit AutocastGuard(DeviceType device_type, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_type_;
  bool previous_enabled_;
  DType previous_dtype_;
  bool previous_cache_enabled_;
};

namespace autograd {

// The op lists of Note [Autocast].
enum class AutocastPolicy { LowerPrecision, Float32, Promote };

// Applies `policy` to args in place (undefined tensors stay undefined) and
// returns whether any of them changed. The device type is the first defined
// argument's; nothing changes when autocast is off for it.
bool autocast_cast(AutocastPolicy policy, std::span<Tensor> args);

// True when some device type has autocast enabled on this thread: the
// one check an op pays outside autocast.
bool any_autocast_enabled();

// The op-entry forms: the arguments cast by the policy, or nullopt when the
// policy leaves every one of them as it is (then the op runs unchanged).
template <size_t N>
using AutocastArgs = std::optional<std::array<Tensor, N>>;

template <class... Tensors>
AutocastArgs<sizeof...(Tensors)> autocast_args(AutocastPolicy policy, const Tensors&... args) {
  if (!any_autocast_enabled()) return std::nullopt;
  std::array<Tensor, sizeof...(Tensors)> cast{args...};
  if (!autocast_cast(policy, cast)) return std::nullopt;
  return cast;
}

template <class... Tensors>
AutocastArgs<sizeof...(Tensors)> autocast_lower_precision(const Tensors&... args) {
  return autocast_args(AutocastPolicy::LowerPrecision, args...);
}

template <class... Tensors>
AutocastArgs<sizeof...(Tensors)> autocast_float32(const Tensors&... args) {
  return autocast_args(AutocastPolicy::Float32, args...);
}

template <class... Tensors>
AutocastArgs<sizeof...(Tensors)> autocast_promote(const Tensors&... args) {
  return autocast_args(AutocastPolicy::Promote, args...);
}

}  // namespace autograd

}  // namespace kiln
