// InstanceNorm1d and InstanceNorm2d, as torch.nn's: composites of
// batch_norm (Note [Composite layers] in nn/functional_composite.h).
//
//   auto in = std::make_shared<nn::InstanceNorm2d>(16);
//   Tensor y = (*in)(x);   // x: (N, 16, H, W), each (sample, channel) plane normalised by itself
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace kiln::nn {

// The shared implementation (torch's _InstanceNorm): the two differ only in
// the number of spatial dims.
//
// Each (sample, channel) plane is normalised by its own mean and biased
// variance. Parameters "weight" (ones) and "bias" (zeros), (num_features),
// when affine (off by default, as torch). With track_running_stats, buffers
// "running_mean" (zeros), "running_var" (ones) and "num_batches_tracked"
// (0-dim int64, kept for torch's state-dict keys and, as in torch, never
// advanced); training updates the running statistics with momentum and the
// batch's average per-plane statistics, and eval normalises with them.
// Without running statistics, eval normalises as training does.
//
// A channel count other than num_features is refused, even without affine
// parameters or running statistics where torch only warns: the module was
// built for num_features channels, and a mismatch is almost always a bug.
class InstanceNorm : public Module {
 public:
  // input (N, num_features, *spatial) or, unbatched, (num_features, *spatial).
  Tensor forward(const Tensor& input) override;
  // "16, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False"
  std::string extra_repr() const override;
  // running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();
  // reset_running_stats(), weight = 1, bias = 0.
  void reset_parameters();

  const int64_t num_features;
  const double eps;
  const double momentum;
  const bool affine;
  const bool track_running_stats;
  Tensor weight;
  Tensor bias;
  Tensor running_mean;
  Tensor running_var;
  Tensor num_batches_tracked;

 protected:
  InstanceNorm(int64_t spatial_dims, int64_t num_features, double eps, double momentum, bool affine,
               bool track_running_stats);

 private:
  const int64_t spatial_dims_;  // 1 for InstanceNorm1d, 2 for InstanceNorm2d
};

// Over (N, C, L) or (C, L) inputs.
class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false)
      : InstanceNorm(1, num_features, eps, momentum, affine, track_running_stats) {}
};

// Over (N, C, H, W) or (C, H, W) inputs.
class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false)
      : InstanceNorm(2, num_features, eps, momentum, affine, track_running_stats) {}
};

}  // namespace kiln::nn
