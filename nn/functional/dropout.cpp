// Inverted dropout: the scaling by 1 / (1 - p) happens in training, so that
// evaluation is the identity and a trained model needs no rescaling.
#include "autograd/function.h"
#include "nn/functional.h"
#include "tensor/factory.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// x's shape, 1 / (1 - p) where the element is kept, 0 where it is dropped.
// It is both the forward's factor and the backward's, so the backward
// reuses the very draws of the forward. p == 1 drops everything (the keep
// probability 0 gives an all-zero mask; the scale is moot).
Tensor dropout_mask(const Tensor& x, double p, Generator* gen) {
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  return ops::mul(bernoulli(x.shape(), 1.0 - p, {x.dtype(), x.device()}, gen), scale);
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: the probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  KILN_CHECK(x.is_floating_point(), "dropout: expected a floating tensor, got ", x.dtype());
  Tensor mask = dropout_mask(x, p, gen);
  Tensor out = autograd::untracked([&] { return ops::mul(x, mask); });
  if (autograd::needs_grad({x})) {
    autograd::record("dropout", {x}, {out}, [mask = SavedTensor(mask)](const TensorList& g) -> TensorList {
      return {kiln::mul(g[0], mask.get())};
    });
  }
  return out;
}

// The same mask, multiplied into x; the backward needs only the mask, so
// nothing of the overwritten input (Note [Recorded in-place ops] in
// autograd/function.h).
Tensor& dropout_(Tensor& x, double p, bool training, Generator* gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_: the probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  KILN_CHECK(x.is_floating_point(), "dropout_: expected a floating tensor, got ", x.dtype());
  const bool record = autograd::records_inplace("dropout_", x);
  Tensor mask = dropout_mask(x, p, gen);
  autograd::untracked([&] { ops::mul_(x, mask); });
  if (record) {
    autograd::record("dropout_", {x}, {x}, [mask = SavedTensor(mask)](const TensorList& g) -> TensorList {
      return {kiln::mul(g[0], mask.get())};
    });
  }
  return x;
}

}  // namespace kiln::nn::functional
