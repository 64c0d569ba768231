// Gradients on CUDA: gradcheck in float64 of the differentiable ops a model
// is made of, run with every input on the GPU, and the CUDA gradients
// compared with the CPU's for the same inputs. Every test skips on a machine
// without a GPU; a CPU-only build compiles none of them.
//
// gradcheck itself is device-blind (autograd/gradcheck.cpp reads values
// through .to(kCPU) and perturbs elements with fill_), so the Jacobians
// compared here are those of the CUDA kernels, forward and backward.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using autograd::GradcheckOptions;
using autograd::TensorList;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

const Device kGpu = cuda_device(0);

// A float64 leaf on `device`, values uniform in [lo, hi) from `seed` (the
// same values on every device).
Tensor leaf_on(Device device, const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator gen(seed);
  Tensor t = rand(shape, DType::Float64, &gen);
  ops::mul_(t, hi - lo);
  ops::add_(t, lo);
  return t.to(device).requires_grad_();
}

struct Case {
  std::string name;
  std::vector<Shape> shapes;  // one float64 leaf per shape
  std::function<Tensor(const TensorList&)> fn;
  double lo = -1.0, hi = 1.0;
};

std::vector<Case> cases() {
  const Tensor index = from_vector<int64_t>({2, 0, 1, 2}, {4});
  const Tensor gather_index = from_vector<int64_t>({0, 2, 1, 1, 0, 2}, {2, 3});
  const Tensor targets = from_vector<int64_t>({1, 0, 3}, {3});
  auto on = [](const Tensor& t, const TensorList& like) { return t.to(like[0].device()); };
  return {
      {"tanh*sigmoid", {{3, 5}}, [](const TensorList& x) { return mul(tanh(x[0]), sigmoid(x[0])); }},
      {"exp+log", {{4, 3}}, [](const TensorList& x) { return add(exp(x[0]), log(x[0])); }, 0.5, 2.0},
      {"gelu", {{2, 7}}, [](const TensorList& x) { return gelu(x[0]); }},
      {"gelu tanh", {{2, 7}}, [](const TensorList& x) { return gelu(x[0], true); }},
      {"broadcast div", {{2, 3, 4}, {3, 1}},
       [](const TensorList& x) { return div(x[0], x[1]); }, 0.5, 2.0},
      {"pow", {{3, 4}, {3, 4}}, [](const TensorList& x) { return pow(x[0], x[1]); }, 0.5, 2.0},
      {"maximum", {{3, 4}, {4}}, [](const TensorList& x) { return maximum(x[0], x[1]); }},
      {"sum over dims", {{2, 3, 4}}, [](const TensorList& x) { return sum(x[0], {0, 2}); }},
      {"mean", {{5, 6}}, [](const TensorList& x) { return mean(x[0], {1}, true); }},
      {"amax", {{4, 5}}, [](const TensorList& x) { return amax(x[0], {1}); }},
      {"var", {{4, 5}}, [](const TensorList& x) { return var(x[0], {0}); }},
      {"logsumexp", {{3, 6}}, [](const TensorList& x) { return logsumexp(x[0], {1}); }},
      {"softmax", {{3, 6}}, [](const TensorList& x) { return softmax(x[0], 1); }},
      {"log_softmax dim 0", {{4, 3}}, [](const TensorList& x) { return log_softmax(x[0], 0); }},
      {"matmul batched", {{2, 3, 4}, {4, 5}}, [](const TensorList& x) { return matmul(x[0], x[1]); }},
      {"mm transposed", {{4, 3}, {4, 5}}, [](const TensorList& x) { return mm(x[0].t(), x[1]); }},
      {"linear", {{3, 4}, {5, 4}, {5}}, [](const TensorList& x) { return linear(x[0], x[1], x[2]); }},
      {"index_select", {{3, 4}},
       [index, on](const TensorList& x) { return index_select(x[0], 0, on(index, x)); }},
      {"gather", {{2, 3}},
       [gather_index, on](const TensorList& x) { return gather(x[0], 1, on(gather_index, x)); }},
      {"conv2d", {{2, 3, 6, 5}, {4, 3, 3, 3}, {4}},
       [](const TensorList& x) { return F::conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv2d strided grouped", {{1, 4, 7, 7}, {4, 2, 3, 2}},
       [](const TensorList& x) { return F::conv2d(x[0], x[1], Tensor(), 2, {1, 0}, 1, 2); }},
      {"max_pool2d", {{2, 2, 6, 6}}, [](const TensorList& x) { return F::max_pool2d(x[0], {.kernel = 2}); }},
      {"avg_pool2d padded", {{1, 2, 5, 5}},
       [](const TensorList& x) { return F::avg_pool2d(x[0], {.kernel = 3, .stride = 2, .padding = 1}); }},
      {"adaptive_avg_pool2d", {{1, 2, 5, 7}}, [](const TensorList& x) { return F::adaptive_avg_pool2d(x[0], {2, 3}); }},
      {"batch_norm training", {{4, 3, 2, 2}, {3}, {3}},
       [](const TensorList& x) { return F::batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); }},
      {"layer_norm", {{3, 2, 5}, {2, 5}, {2, 5}},
       [](const TensorList& x) { return F::layer_norm(x[0], {2, 5}, x[1], x[2]); }},
      {"cross_entropy", {{3, 5}},
       [targets, on](const TensorList& x) { return F::cross_entropy(x[0], on(targets, x)); }},
      // The fused kernels' other paths (Note [Fused cross entropy]): class
      // weights, label smoothing, an ignored row, per-row losses.
      {"cross_entropy weighted smoothed ignoring", {{4, 5}},
       [on](const TensorList& x) {
         const Tensor weight = from_vector<double>({0.5, 1.5, 1.0, 2.0, 0.25}, {5});
         return F::cross_entropy(x[0], on(from_vector<int64_t>({1, 0, 4, 2}, {4}), x),
                                 {.weight = on(weight, x), .ignore_index = 0, .label_smoothing = 0.2});
       }},
      {"cross_entropy per row", {{2, 3, 4}},
       [on](const TensorList& x) {
         return F::cross_entropy(x[0], on(from_vector<int64_t>({2, 0, 1, 1, 2, 0, 0, 1}, {2, 4}), x),
                                 {.reduction = F::Reduction::None});
       }},
  };
}

TensorList leaves_on(Device device, const Case& c) {
  TensorList leaves;
  for (size_t i = 0; i < c.shapes.size(); ++i) leaves.push_back(leaf_on(device, c.shapes[i], 100 + i, c.lo, c.hi));
  return leaves;
}

TEST(CudaGradcheck, EveryOpPassesGradcheckOnTheGpu) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const TensorList inputs = leaves_on(kGpu, c);
    try {
      autograd::gradcheck([&](const TensorList& x) { return TensorList{c.fn(x)}; }, inputs);
    } catch (const Error& e) {
      ADD_FAILURE() << e.message();
    }
  }
}

// The same random output gradient backpropagated through the op on each
// device gives the same input gradients (float64: to rounding).
TEST(CudaGradcheck, GradientsEqualTheCpuGradients) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const TensorList cpu_in = leaves_on(kCPU, c), gpu_in = leaves_on(kGpu, c);
    const Tensor cpu_out = c.fn(cpu_in), gpu_out = c.fn(gpu_in);
    ASSERT_TRUE(gpu_out.device().is_cuda());
    Generator gen(7);
    const Tensor grad = rand(cpu_out.shape(), DType::Float64, &gen);
    const TensorList cpu_grads = autograd::grad({cpu_out}, cpu_in, {grad});
    const TensorList gpu_grads = autograd::grad({gpu_out}, gpu_in, {grad.to(kGpu)});
    ASSERT_EQ(cpu_grads.size(), gpu_grads.size());
    EXPECT_TRUE(allclose(gpu_out.detach().cpu(), cpu_out.detach(), 1e-10, 1e-12));
    for (size_t i = 0; i < cpu_grads.size(); ++i) {
      ASSERT_TRUE(gpu_grads[i].device().is_cuda()) << "input " << i;
      EXPECT_TRUE(allclose(gpu_grads[i].cpu(), cpu_grads[i], 1e-10, 1e-12)) << "input " << i;
    }
  }
}

// Not a gradient, but the same ops' bad input on the GPU: a class target or
// an embedding index out of range is found by a kernel and thrown, with
// the op's own message, when the host next waits (here: item()), not
// inside the op (Note [CUDA kernel errors] in tensor/cuda/kernel_errors.h).
TEST(CudaLosses, BadTargetsAndIndicesThrowAtTheNextWait) {
  SKIP_WITHOUT_GPU();
  const Tensor logits = zeros({2, 3}, {DType::Float32, kGpu});
  const Tensor high = from_vector<int64_t>({0, 3}, {2}).to(kGpu), low = from_vector<int64_t>({-1, 0}, {2}).to(kGpu);
  const std::pair<Tensor, std::string> cases[] = {
      {high, "cross_entropy: target 3 is out of bounds for 3 classes (and is not ignore_index = -100)"},
      {low, "cross_entropy: target -1 is out of bounds for 3 classes"}};
  for (const auto& [target, expected] : cases) {
    Tensor loss;
    ASSERT_NO_THROW(loss = F::cross_entropy(logits, target));
    try {
      (void)loss.item<double>();
      ADD_FAILURE() << "expected kiln::Error containing: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
    }
  }
  // An ignored target is not checked.
  const Tensor ignored = from_vector<int64_t>({-100, 2}, {2}).to(kGpu);
  EXPECT_NO_THROW((void)F::cross_entropy(logits, ignored).item<double>());
  const Tensor weight = zeros({4, 2}, {DType::Float32, kGpu});
  try {
    (void)F::embedding(from_vector<int64_t>({0, 4}, {2}).to(kGpu), weight).cpu();
    ADD_FAILURE() << "expected kiln::Error from embedding";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("embedding: index 4 is out of range for 4 embeddings"), std::string::npos)
        << e.message();
  }
}

// Mixed precision on the GPU (Note [Autocast], Note [16-bit cuDNN
// convolutions]): under a float16 autocast, conv2d and linear run in
// float16 and the loss in float32, and the float32 parameters get float32
// gradients. The CPU under a float16 autocast of its own computes each
// 16-bit op in float32 and rounds it, as cuDNN and cuBLAS do, so the two
// devices agree to float16 rounding.
TEST(CudaAutocast, ConvolutionAndLinearRunInFloat16AsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  struct Result {
    DType activation_dtype, loss_dtype;
    Tensor loss, grad_conv_weight, grad_conv_bias, grad_linear_weight;  // on the CPU
  };
  auto train_step = [](Device device) {
    Generator gen(11);
    auto uniform = [&gen, device](const Shape& shape, double scale) {
      return ops::mul(ops::sub(rand(shape, DType::Float32, &gen), 0.5), 2 * scale).to(device);
    };
    const Tensor x = uniform({4, 3, 12, 12}, 1.0);              // (N, C, H, W)
    const Tensor w = uniform({5, 3, 3, 3}, 0.3).requires_grad_();  // (OC, C, kh, kw)
    const Tensor b = uniform({5}, 0.3).requires_grad_();
    const Tensor v = uniform({10, 5 * 12 * 12}, 0.03).requires_grad_();  // (classes, OC*H*W)
    const Tensor target = from_vector<int64_t>({3, 0, 9, 5}, {4}).to(device);
    Result r;
    {
      AutocastGuard autocast(device.type, DType::Float16);
      // tanh, not relu: cuDNN rounds the convolution before adding the bias
      // (Note [16-bit cuDNN convolutions]), so where the two nearly cancel
      // the devices may disagree on the sign, and a relu would pass the
      // gradient on one device and not the other.
      const Tensor h = tanh(F::conv2d(x, w, b, /*stride=*/1, /*padding=*/1));  // (4, 5, 12, 12)
      const Tensor logits = F::linear(F::flatten(h, 1), v);                     // (4, 10)
      r.activation_dtype = logits.dtype();
      r.loss = F::cross_entropy(logits, target);
      r.loss_dtype = r.loss.dtype();
    }
    r.loss.backward();
    r.loss = r.loss.detach().cpu();
    r.grad_conv_weight = w.grad().cpu(), r.grad_conv_bias = b.grad().cpu(), r.grad_linear_weight = v.grad().cpu();
    return r;
  };
  const Result cpu = train_step(kCPU), gpu = train_step(kGpu);
  EXPECT_EQ(gpu.activation_dtype, DType::Float16);
  EXPECT_EQ(gpu.loss_dtype, DType::Float32);
  const std::pair<const char*, std::pair<Tensor, Tensor>> compared[] = {
      {"loss", {cpu.loss, gpu.loss}},
      {"conv weight grad", {cpu.grad_conv_weight, gpu.grad_conv_weight}},
      {"conv bias grad", {cpu.grad_conv_bias, gpu.grad_conv_bias}},
      {"linear weight grad", {cpu.grad_linear_weight, gpu.grad_linear_weight}}};
  for (const auto& [what, pair] : compared) {
    const auto& [expected, actual] = pair;
    EXPECT_EQ(actual.dtype(), DType::Float32) << what;
    // float16 keeps 11 significant bits: a few roundings deep, relative to
    // the largest element.
    const double largest = ops::amax(ops::abs(expected)).item<double>();
    EXPECT_TRUE(allclose(actual, expected, 0, 4e-3 * largest)) << what;
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
