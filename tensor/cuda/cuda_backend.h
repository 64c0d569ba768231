// The CUDA backend: kernels for tensors on NVIDIA GPUs.
//
// Each group of methods is defined in its own file under tensor/cuda/
// (copy.cu, fill.cu, elementwise.cu, where_clamp.cu, reduce.cu, softmax.cu,
// gemm.cpp, im2col.cu, conv.cpp, pool.cu, index.cu, optim_step.cu, norm.cu,
// layer_norm.cu, random.cu). All work is queued on the calling thread's
// current stream for the tensor's device (Note [Current stream] in
// stream.h), with that device made current (cuda::DeviceGuard) around it.
//
// This header does not include the CUDA runtime; tensor/backend.cpp includes
// it from plain C++.
#pragma once

#include "tensor/backend.h"

namespace kiln::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  std::string_view name() const override { return "cuda"; }
  // Whether the calling thread's current stream on `device` is capturing a
  // CUDA graph (tensor/cuda/graph.cpp).
  bool capturing(Device device) const override;

  // tensor/cuda/copy.cu: host<->device and device<->device, any layout and dtype.
  void copy(const Tensor& dst, const Tensor& src) override;
  // tensor/cuda/fill.cu
  void fill(const Tensor& out, Scalar value) override;

  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void clamp(const Tensor& out, const Tensor& in, std::optional<Scalar> lo, std::optional<Scalar> hi) override;

  void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) override;
  void reduce_with_index(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in,
                         int64_t dim) override;
  void softmax(const Tensor& out, const Tensor& in, int64_t dim, bool log) override;

  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) override;

  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  void check_index_range(const Tensor& index, int64_t limit, const IndexErrorMessage& message) override;

  void cross_entropy(const Tensor& losses, const Tensor& target_weights, const Tensor& x, const Tensor& target,
                     const Tensor& weight, int64_t ignore_index, double smoothing,
                     const IndexErrorMessage& message) override;
  void cross_entropy_backward(const Tensor& grad, const Tensor& grad_out, const Tensor& denominator, const Tensor& x,
                              const Tensor& target, const Tensor& weight, int64_t ignore_index,
                              double smoothing) override;

  void im2col(const Tensor& cols, const Tensor& x, const Conv2dParams& p, const Conv2dShape& s) override;
  void col2im(const Tensor& x, const Tensor& cols, const Conv2dParams& p, const Conv2dShape& s) override;

  bool conv2d_takes(DType dtype) const override;  // also float16 and bfloat16, through cuDNN
  void conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
              const Conv2dShape& s) override;
  void conv2d_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                       const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                       const Conv2dShape& s) override;

  void max_pool2d(const Tensor& values, const Tensor& indices, const Tensor& x, const MaxPool2dOptions& o,
                  const Pool2dShape& s) override;
  void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                           const MaxPool2dOptions& o, const Pool2dShape& s) override;
  void avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s) override;
  void avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const AvgPool2dOptions& o,
                           const Pool2dShape& s) override;
  void adaptive_avg_pool2d(const Tensor& out, const Tensor& x) override;
  void adaptive_avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out) override;
  void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_step,
                const SgdStep& step) override;
  void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps,
                 const AdamStep& step) override;
  void unscale_grads(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found_inf) override;

  void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) override;
  void batch_norm_apply(const Tensor& out, const Tensor& x, const Tensor& mean, const Tensor& scale,
                        const Tensor& shift) override;
  void batch_norm_backward_reduce(const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& grad_out,
                                  const Tensor& x, const Tensor& mean) override;
  void batch_norm_backward_apply(const Tensor& grad_input, const Tensor& grad_out, const Tensor& x,
                                 const Tensor& mean, const Tensor& dy_scale, const Tensor& xmu_scale,
                                 const Tensor& shift) override;
  void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  void layer_norm_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                           const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                           const Tensor& weight) override;

  void topk(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) override;
  void multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                   uint64_t offset) override;
  void attention(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, const AttentionParams& params) override;
  void attention_backward(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v, const Tensor& grad_out,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& logsumexp, const Tensor& mask, const AttentionParams& params) override;

  void random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed, uint64_t offset) override;
};

// The one CudaBackend, serving every CUDA device. Constructing it needs no GPU:
// a machine without one gets a backend whose kernels throw "no CUDA device".
CudaBackend& backend();

}  // namespace kiln::cuda
