// Backend: the kernels a device provides, behind one interface.
//
// Note [Device dispatch]
// Every op has a short front-end (tensor/elementwise.cpp, tensor/reduce.cpp,
// ...) that validates its arguments, works out the result's shape and dtype,
// allocates it, and then makes exactly one device decision:
//   backend_for(out.device()).binary(BinaryOp::Add, out, a, b);
// The kernels never re-check what the front-end has checked, and no op body
// contains `if (cuda)`. The CPU kernels live in tensor/cpu/, the CUDA ones in
// tensor/cuda/; each backend is one class implementing this interface.
// Op families added since the first ones are kernel groups outside this
// class (Note [Kernel groups] in tensor/kernel_group.h): new kernels go
// there, not here.
//
// Conventions for all kernels:
// - Every tensor argument is already on this backend's device.
// - Elementwise inputs are already broadcast to the output's shape (a
//   broadcast dim has stride 0) and already converted to one dtype, the
//   "compute dtype"; the output has that dtype, or Bool for comparisons.
// - Outputs are written through their strides, so a kernel must handle any
//   layout; contiguous layouts are the fast path. An output may alias an
//   input exactly (in-place ops), never partially.
// - Kernels that find bad data (an out-of-range index) throw kiln::Error;
//   OpenMP regions must not throw, so they record the error and throw after.
//   CUDA kernels cannot throw: theirs is thrown when the host next waits
//   for the device (Note [CUDA kernel errors] in tensor/cuda/kernel_errors.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/conv.h"  // Conv2dParams, Conv2dShape
#include "tensor/pool.h"  // MaxPool2dOptions, AvgPool2dOptions, Pool2dShape
#include "tensor/tensor.h"

namespace kiln {

enum class UnaryOp : uint8_t {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Relu, Sigmoid, Tanh,
  Gelu,      // exact: x * Phi(x), as torch's default
  GeluTanh,  // tanh approximation, as torch's approximate='tanh'
  LogicalNot,  // output Bool
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  ReluBackward,                          // a where b > 0, else 0 (a: gradient, b: relu's output)
  GeluBackward,                          // a * gelu'(b), exact (a: gradient, b: gelu's input)
  GeluTanhBackward,                      // a * gelu'(b), tanh approximation
  Eq, Ne, Lt, Le, Gt, Ge,                // output Bool
  LogicalAnd, LogicalOr, LogicalXor,     // output Bool
};

enum class ReduceOp : uint8_t { Sum, Prod, Max, Min };

enum class Distribution : uint8_t {
  Uniform,    // [a, b)
  Normal,     // mean a, std b
  Bernoulli,  // 1 with probability a
  RandInt,    // integers in [a, b)
};

// The scalars of one fused SGD step (Note [Fused optimizer steps] in
// tensor/fused_optim.h): optim::SGDOptions' fields.
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

// The scalars of one fused Adam or AdamW step (Note [Fused optimizer steps]):
// optim::AdamOptions' fields, and which of the two weight decays applies.
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false, maximize = false;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
};

// The scalars of one fused attention call (Note [Fused attention] in
// tensor/attention.h): softmax(scale * Q K^T + mask) V, with the causal
// mask (query i sees keys j <= i, torch's top-left alignment) and dropout
// on the probabilities drawn from Philox keyed by `seed` from counter
// `offset` (Note [Random streams] in tensor/random.h).
struct AttentionParams {
  double scale = 1.0;
  bool causal = false;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;
};

// Words the error for an index value outside its range (check_index_range).
using IndexErrorMessage = std::function<std::string(int64_t value)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Whether work queued now for `device` is being recorded for later
  // replay rather than run (a CUDA graph capture, Note [CUDA graphs] in
  // tensor/cuda/graph.h). An op whose replay would be wrong (Adam's step
  // count, a collective) refuses to be captured.
  virtual bool capturing(Device device) const {
    (void)device;
    return false;
  }

  // dst = src elementwise, converting dtype. Shapes equal (src may have
  // stride-0 dims). One of the two may be on the CPU when this backend is a
  // device backend: that is how host<->device copies happen.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& out, Scalar value) = 0;

  // ---- elementwise (tensor/cpu/unary.cpp, binary.cpp) ----
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& in) = 0;
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out = cond ? a : b; cond is Bool.
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;
  virtual void clamp(const Tensor& out, const Tensor& in, std::optional<Scalar> lo, std::optional<Scalar> hi) = 0;

  // ---- reductions (tensor/cpu/reduce.cpp) ----
  // `out` has the input's rank with size 1 in every reduced dim (keepdim
  // shape); `dims` are sorted, unique, non-negative. Sum/Prod of integers or
  // bool accumulate in int64 (out is Int64); floats accumulate in at least
  // float32 (double for float64) and write out's dtype.
  virtual void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) = 0;
  // Max/Min along one dim with the index of the first extreme (NaN wins, as
  // torch). values/indices have keepdim shape; indices are Int64.
  virtual void reduce_with_index(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in,
                                 int64_t dim) = 0;
  // Softmax or log-softmax along `dim`, numerically stable (max subtracted).
  virtual void softmax(const Tensor& out, const Tensor& in, int64_t dim, bool log) = 0;

  // ---- matrix multiply (tensor/cpu/gemm*.cpp) ----
  // c = alpha * a @ b + beta * c, batched: a (B, M, K), b (B, K, N),
  // c (B, M, N), any strides (a batch stride of 0 broadcasts). When beta == 0
  // c's old contents are ignored, even NaN.
  virtual void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) = 0;

  // ---- indexing (tensor/cpu/index.cpp) ----
  // out = in.index_select(dim, index); index is 1-d Int64.
  virtual void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) = 0;
  // out[i][j][k] = in[i][index[i][j][k]][k] for dim 1, etc.
  virtual void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) = 0;
  // out[i][index[i][j][k]][k] += src[i][j][k] for dim 1, etc. (in place on out).
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // Rejects a value v of `index` (Int64, any layout, not empty) outside
  // [0, limit) with kiln::Error(message(v)): at once on the CPU; on CUDA
  // when the host next waits for the device (Note [CUDA kernel errors] in
  // tensor/cuda/kernel_errors.h).
  virtual void check_index_range(const Tensor& index, int64_t limit, const IndexErrorMessage& message) = 0;

  // ---- class-index cross entropy (tensor/cpu/cross_entropy.cpp) ----
  // Note [Fused cross entropy] in tensor/cross_entropy.h, whose front-end
  // checks the operands: x (M, C) with C >= 1, target (M) Int64, weight (C)
  // of x's dtype or undefined, all contiguous. Overwrites losses and
  // target_weights (M); a target outside [0, C) other than ignore_index is
  // an error worded by message(target).
  virtual void cross_entropy(const Tensor& losses, const Tensor& target_weights, const Tensor& x,
                             const Tensor& target, const Tensor& weight, int64_t ignore_index, double smoothing,
                             const IndexErrorMessage& message) = 0;
  // Overwrites grad (M, C); grad_out is (M) or 0-dim, denominator 0-dim or
  // undefined, both contiguous; rows whose target is out of range get 0.
  virtual void cross_entropy_backward(const Tensor& grad, const Tensor& grad_out, const Tensor& denominator,
                                      const Tensor& x, const Tensor& target, const Tensor& weight,
                                      int64_t ignore_index, double smoothing) = 0;

  // ---- convolution helpers (tensor/cpu/im2col.cpp) ----
  // The convolution kernels take the layer's Conv2dParams as it is and the
  // sizes the front-end derived from the tensors (Note [One convolution
  // parameter struct] in tensor/conv.h); they see one group (s.channels =
  // C / groups) and ignore p.groups.
  // x: (N, C, H, W) -> cols: (N, C*kh*kw, oh*ow), zero padding.
  virtual void im2col(const Tensor& cols, const Tensor& x, const Conv2dParams& p, const Conv2dShape& s) = 0;
  // cols: (N, C*kh*kw, oh*ow) -> x: (N, C, H, W), overlapping patches summed;
  // x is overwritten.
  virtual void col2im(const Tensor& x, const Tensor& cols, const Conv2dParams& p, const Conv2dShape& s) = 0;

  // ---- 2-d convolution (tensor/cpu/conv2d.cpp) ----
  // Whether conv2d and conv2d_backward take tensors of `dtype`: float32 and
  // float64 everywhere; a backend whose library runs 16-bit convolutions
  // (cuDNN, on tensor cores) takes float16 and bfloat16 too. The front-end
  // (tensor/conv.cpp) computes any other floating dtype in float32.
  virtual bool conv2d_takes(DType dtype) const { return dtype == DType::Float32 || dtype == DType::Float64; }
  // One group of a convolution in a dtype conv2d_takes (the front-end in
  // tensor/conv.cpp loops over groups).
  // x: (N, C, H, W), any strides; weight: (OC, C*kh*kw), any strides;
  // bias: (OC) or undefined; out: (N, OC, oh, ow) with every (oh, ow) plane
  // contiguous (stride(3) == 1, stride(2) == ow), overwritten.
  virtual void conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const Conv2dParams& p, const Conv2dShape& s) = 0;
  // grad_out: (N, OC, oh, ow) with contiguous planes. Overwrites
  // grad_input (N, C, H, W) with contiguous planes, grad_weight
  // (OC, C*kh*kw) with contiguous rows and grad_bias (OC), the sum of
  // grad_out over (N, oh, ow), each only when defined. The bias gradient is
  // here, not a separate reduction, so that a backend may compute it in the
  // same pass as the weight's (Note [Direct CUDA convolution]).
  virtual void conv2d_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                               const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                               const Conv2dShape& s) = 0;

  // ---- pooling (tensor/cpu/pool.cpp) ----
  // Every tensor is contiguous and holds P = N*C planes: x and grad_x are
  // (P, H, W), values, indices, out and grad_out (P, oh, ow); the floating
  // tensors share one dtype, indices are Int64 into one plane's H*W.
  // Backward kernels overwrite grad_x. The kernels take the op's options as
  // the user gave them (the stride through stride_or_kernel()) and s, the
  // front-end's (H, W) and (oh, ow) (Note [One pooling parameter struct] in
  // tensor/pool.h); they ignore ceil_mode, which s.output already follows.
  // Max pooling: padding is -inf; ties keep the first tap in row-major window
  // order, NaN wins (the last NaN, as torch); a window with no tap inside the
  // input gives -inf and index -1, which the backward skips.
  // indices may be undefined (inference): then only values are written.
  virtual void max_pool2d(const Tensor& values, const Tensor& indices, const Tensor& x, const MaxPool2dOptions& o,
                          const Pool2dShape& s) = 0;
  // grad_x[p, indices[p, i]] += grad_out[p, i] (o, s: the forward's, each
  // index inside its own window); throws on an index outside the plane.
  virtual void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                   const MaxPool2dOptions& o, const Pool2dShape& s) = 0;
  // Window sums divided by o.divisor_override when given (non-zero), else by
  // the window's size clipped to the padded input (o.count_include_pad) or
  // to the input itself.
  virtual void avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s) = 0;
  virtual void avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const AvgPool2dOptions& o,
                                   const Pool2dShape& s) = 0;
  // Output cell (i, j) averages rows floor(i*H/oh) .. ceil((i+1)*H/oh) - 1
  // and the columns alike; sizes come from the tensors.
  virtual void adaptive_avg_pool2d(const Tensor& out, const Tensor& x) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out) = 0;

  // ---- fused optimizer steps (tensor/cpu/optim_step.cpp) ----
  // The front-end (tensor/fused_optim.cpp) has checked the lists: equal
  // lengths, each i contiguous with one shape, float dtype and device;
  // momentum_buffers is empty when step.momentum == 0.
  virtual void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_step,
                        const SgdStep& step) = 0;
  // Adam/AdamW (optim/adam.h) on each parameter i, whose step count t is
  // steps[i] (already incremented, >= 1): updates params[i], exp_avgs[i],
  // exp_avg_sqs[i] and, with step.amsgrad, max_exp_avg_sqs[i] (else empty).
  virtual void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                         const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps,
                         const AdamStep& step) = 0;
  // The gradient scaler's unscale (tensor/fused_optim.h): grads[i] *=
  // inv_scale in place, each product rounded to its dtype, and found_inf
  // (a float32 scalar on the gradients' device) set to 1 when any product
  // is not finite, else left as it is.
  virtual void unscale_grads(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found_inf) = 0;

  // ---- normalization (tensor/cpu/norm.cpp, layer_norm.cpp) ----
  // Front-end: tensor/norm.cpp (Note [Normalization statistics] in
  // tensor/norm.h). Every tensor is contiguous. Batch norm sees x as
  // (N, C, S), S the product of the dims after C; layer norm sees x as
  // (M, K) rows. Per-channel, per-row and weight tensors have the stats dtype
  // (float32 for a 16-bit x, else x's); the rest have x's dtype.
  // mean, var: (C) <- each channel's mean and biased variance over N and S.
  virtual void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) = 0;
  // out[n, c, s] = (x[n, c, s] - mean[c]) * scale[c] + shift[c].
  virtual void batch_norm_apply(const Tensor& out, const Tensor& x, const Tensor& mean, const Tensor& scale,
                                const Tensor& shift) = 0;
  // sum_dy[c] = sum of grad_out, sum_dy_xmu[c] = sum of grad_out * (x - mean[c]),
  // over N and S.
  virtual void batch_norm_backward_reduce(const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& grad_out,
                                          const Tensor& x, const Tensor& mean) = 0;
  // grad_input = grad_out * dy_scale[c] + (x - mean[c]) * xmu_scale[c] + shift[c].
  virtual void batch_norm_backward_apply(const Tensor& grad_input, const Tensor& grad_out, const Tensor& x,
                                         const Tensor& mean, const Tensor& dy_scale, const Tensor& xmu_scale,
                                         const Tensor& shift) = 0;
  // Per row r of x (M, K): mean[r], rstd[r] = 1 / sqrt(biased var + eps) (M),
  // and out = (x - mean) * rstd * weight + bias; weight, bias: (K).
  virtual void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps) = 0;
  // Overwrites grad_input (M, K), grad_weight (K) and grad_bias (K), each
  // only when defined; weight (K) is all ones for a layer norm without one.
  virtual void layer_norm_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                   const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight) = 0;

  // ---- selection and sampling (tensor/cpu/select.cpp) ----
  // The k largest (largest) or smallest entries of each row of `in`
  // (rows, n), contiguous, 0 <= k <= n: `values` (rows, k) in in's dtype and
  // `indices` (rows, k) Int64, best first; among equal values the lower
  // index comes first. NaN counts as larger than every number, as torch.
  virtual void topk(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) = 0;
  // For each row of `probs` (rows, n), contiguous and floating, draws
  // `num_samples` Int64 column indices into `out` (rows, num_samples), each
  // with probability proportional to its entry; without replacement no index
  // repeats in a row (num_samples <= the row's non-zero entries). A row with
  // a negative, infinite or NaN entry, or summing to zero, is an error. The
  // uniforms come from Philox keyed by `seed`, row r using counter blocks
  // offset + r * num_samples onwards (Note [Random streams]).
  virtual void multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement,
                           uint64_t seed, uint64_t offset) = 0;

  // ---- fused attention (tensor/cpu/attention.cpp; Note [Fused attention]) ----
  // q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv) of one floating
  // dtype, each with its last dim contiguous and any strides elsewhere (the
  // heads of a (B, T, H, D) projection, transposed, are taken as they are;
  // Note [Attention layouts]); `mask` undefined, or Bool (true = attend) or
  // of q's dtype (added to the scores), with shape (B, H, Tq, Tk) where a
  // dim may have stride 0 (broadcast). Writes out (B, H, Tq, Dv), last dim
  // contiguous and any strides elsewhere, and `logsumexp` (contiguous)
  // (B, H, Tq), Float32 (Float64 for Float64 inputs): the log of each row's
  // softmax denominator, all the backward needs to rebuild the probabilities
  // block by block. A row that attends to nothing gives zeros (torch: NaN).
  virtual void attention(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& mask, const AttentionParams& params) = 0;
  // The gradients of attention() for grad_out (B, H, Tq, Dv), from the
  // saved inputs, out and logsumexp; grad_q/k/v have q/k/v's shapes, and
  // like them and grad_out need only their last dim contiguous.
  virtual void attention_backward(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                  const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& logsumexp, const Tensor& mask,
                                  const AttentionParams& params) = 0;

  // ---- random numbers (tensor/cpu/random.cpp) ----
  // Fills `out` (contiguous) from Philox4x32-10 keyed by `seed`: element i
  // uses counter block `offset + i` (see tensor/random.h), so the values do
  // not depend on threads or device.
  virtual void random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed,
                      uint64_t offset) = 0;
};

// The backend that runs kernels for `device`; throws kiln::Error naming the
// device when Kiln was built without it.
Backend& backend_for(Device device);

// backend_for(device).capturing(device): false on the CPU.
bool capturing(Device device);

// The backend that owns a copy between `dst` and `src` (the device side when
// one of them is on the CPU); throws for copies between two different device
// types that are both not the CPU.
Backend& backend_for_copy(Device dst, Device src);

}  // namespace kiln
