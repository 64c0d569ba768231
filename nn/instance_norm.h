// InstanceNorm1d, InstanceNorm2d and InstanceNorm3d, as torch.nn's:
// composites of batch_norm (Note [Composite layers] in
// nn/functional_composite.h), with batch norm's parameters and buffers
// (NormBase in nn/normalization.h).
//
//   auto in = std::make_shared<nn::InstanceNorm2d>(16);
//   Tensor y = (*in)(x);   // x: (N, 16, H, W), each (sample, channel) plane normalised by itself
//   nn::InstanceNorm3d in3(nn::InstanceNorm3dOptions(8).affine(true));   // as LibTorch
#pragma once

#include <cstdint>
#include <optional>

#include "nn/normalization.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.InstanceNorm1d's, 2d's and 3d's arguments (Note [Option
// builders] in tensor/arg.h); momentum std::nullopt leaves the running
// statistics as they are (torch's momentum=None, a factor of 0).
class InstanceNormOptions {
 public:
  explicit InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}

  KILN_ARG(int64_t, num_features);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(std::optional<double>, momentum) = 0.1;
  KILN_ARG(bool, affine) = false;
  KILN_ARG(bool, track_running_stats) = false;
};
using InstanceNorm1dOptions = InstanceNormOptions;  // LibTorch's names
using InstanceNorm2dOptions = InstanceNormOptions;
using InstanceNorm3dOptions = InstanceNormOptions;

// The shared implementation (torch's _InstanceNorm): the three differ only
// in the number of spatial dims.
//
// Each (sample, channel) plane is normalised by its own mean and biased
// variance. Affine parameters are off by default, as torch, and so are the
// running statistics. With track_running_stats, training updates them with
// momentum and the batch's average per-plane statistics, and eval normalises
// with them; num_batches_tracked is kept for torch's state-dict keys and, as
// in torch, never advanced. Without running statistics, eval normalises as
// training does.
//
// A channel count other than num_features is refused, even without affine
// parameters or running statistics where torch only warns: the module was
// built for num_features channels, and a mismatch is almost always a bug.
class InstanceNorm : public NormBase {
 public:
  // input (N, num_features, *spatial) or, unbatched, (num_features, *spatial).
  Tensor forward(const Tensor& input) override;

 protected:
  InstanceNorm(int64_t spatial_dims, const InstanceNormOptions& options);

 private:
  const int64_t spatial_dims_;  // 1, 2 or 3
};

// Over (N, C, L) or (C, L) inputs.
class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(const InstanceNormOptions& options) : InstanceNorm(1, options) {}
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                          bool affine = false, bool track_running_stats = false)
      : InstanceNorm1d(InstanceNormOptions(num_features)
                           .eps(eps)
                           .momentum(momentum)
                           .affine(affine)
                           .track_running_stats(track_running_stats)) {}
};

// Over (N, C, H, W) or (C, H, W) inputs.
class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(const InstanceNormOptions& options) : InstanceNorm(2, options) {}
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                          bool affine = false, bool track_running_stats = false)
      : InstanceNorm2d(InstanceNormOptions(num_features)
                           .eps(eps)
                           .momentum(momentum)
                           .affine(affine)
                           .track_running_stats(track_running_stats)) {}
};

// Over (N, C, D, H, W) or (C, D, H, W) inputs.
class InstanceNorm3d : public InstanceNorm {
 public:
  explicit InstanceNorm3d(const InstanceNormOptions& options) : InstanceNorm(3, options) {}
  explicit InstanceNorm3d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                          bool affine = false, bool track_running_stats = false)
      : InstanceNorm3d(InstanceNormOptions(num_features)
                           .eps(eps)
                           .momentum(momentum)
                           .affine(affine)
                           .track_running_stats(track_running_stats)) {}
};

}  // namespace kiln::nn
