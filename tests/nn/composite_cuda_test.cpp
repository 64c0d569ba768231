// The composite layers (Note [Composite layers] in nn/functional_composite.h)
// on CUDA against the CPU: the same float64 weights and inputs on both
// devices, then outputs and the gradients of inputs and parameters
// compared. Compiled in every build; each test skips without a GPU.
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "kiln.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

using autograd::TensorList;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason()

// A float64 tensor uniform in [-1, 1) from `seed`, the same on every device.
Tensor uniform(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = rand(shape, DType::Float64, &gen);
  return ops::sub(ops::mul(t, 2.0), 1.0);
}

void expect_close(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  std::vector<double> a = testing::values_of(cpu), b = testing::values_of(gpu);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-9 * (1 + std::abs(a[i]))) << what << " element " << i;
}

// Builds the layer twice (make() must give the same weights each call, so
// the second copy loads the first's state), runs it on the CPU and on the
// GPU with the same inputs and upstream gradients, and compares.
void expect_cuda_matches_cpu(const std::string& name, const std::function<std::shared_ptr<Module>()>& make,
                             const std::vector<Shape>& input_shapes, bool training = true) {
  std::shared_ptr<Module> cpu = make(), gpu = make();
  cpu->to(DType::Float64);
  gpu->to(DType::Float64);
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(cuda_device(0));
  cpu->train(training);
  gpu->train(training);
  TensorList in_cpu, in_gpu;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    Tensor x = uniform(input_shapes[i], 10 + i);
    in_cpu.push_back(x.clone().requires_grad_());
    in_gpu.push_back(x.to(cuda_device(0)).requires_grad_());
  }
  TensorList out_cpu = (*cpu)(in_cpu), out_gpu = (*gpu)(in_gpu);
  ASSERT_EQ(out_cpu.size(), out_gpu.size()) << name;
  Tensor loss_cpu, loss_gpu;
  for (size_t o = 0; o < out_cpu.size(); ++o) {
    expect_close(out_cpu[o], out_gpu[o], name + " output " + std::to_string(o));
    Tensor g = uniform(out_cpu[o].shape(), 100 + o);
    Tensor term_cpu = sum(mul(out_cpu[o], g)), term_gpu = sum(mul(out_gpu[o], g.to(cuda_device(0))));
    loss_cpu = loss_cpu.defined() ? add(loss_cpu, term_cpu) : term_cpu;
    loss_gpu = loss_gpu.defined() ? add(loss_gpu, term_gpu) : term_gpu;
  }
  loss_cpu.backward();
  loss_gpu.backward();
  for (size_t i = 0; i < in_cpu.size(); ++i)
    expect_close(in_cpu[i].grad(), in_gpu[i].grad(), name + " grad of input " + std::to_string(i));
  TensorDict params_gpu = gpu->named_parameters();
  for (const auto& [key, p] : cpu->named_parameters())
    expect_close(p.grad(), params_gpu.at(key).grad(), name + " grad of " + key);
  TensorDict buffers_gpu = gpu->named_buffers();
  for (const auto& [key, b] : cpu->named_buffers()) expect_close(b, buffers_gpu.at(key), name + " buffer " + key);
}

TEST(CompositeLayersCuda, NormsMatchCpu) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu("GroupNorm", [] { return std::make_shared<GroupNorm>(2, 6); }, {{3, 6, 4, 5}});
  expect_cuda_matches_cpu("InstanceNorm2d with running stats",
                          [] { return std::make_shared<InstanceNorm2d>(3, 1e-5, 0.2, true, true); }, {{2, 3, 4, 4}});
  expect_cuda_matches_cpu("InstanceNorm1d eval",
                          [] { return std::make_shared<InstanceNorm1d>(3, 1e-5, 0.1, true, true); }, {{2, 3, 6}},
                          /*training=*/false);
  expect_cuda_matches_cpu("InstanceNorm3d with running stats",
                          [] { return std::make_shared<InstanceNorm3d>(3, 1e-5, 0.2, true, true); }, {{2, 3, 2, 3, 4}});
}

TEST(CompositeLayersCuda, ConvAndPixelShuffleMatchCpu) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu("Conv1d", [] { return std::make_shared<Conv1d>(4, 6, 3, 2, 1, 2, 2); }, {{2, 4, 11}});
  expect_cuda_matches_cpu("ConvTranspose2d",
                          [] { return std::make_shared<ConvTranspose2d>(4, 6, 3, 2, 1, 1, /*groups=*/2); },
                          {{2, 4, 5, 4}});
  expect_cuda_matches_cpu(
      "Conv2d padding_mode reflect",
      [] {
        return std::make_shared<Conv2d>(Conv2dOptions(3, 4, 3).padding({1, 2}).padding_mode(PaddingMode::Reflect));
      },
      {{2, 3, 5, 6}});
  expect_cuda_matches_cpu(
      "Conv1d padding_mode circular",
      [] { return std::make_shared<Conv1d>(Conv1dOptions(3, 4, 3).padding(2).padding_mode(PaddingMode::Circular)); },
      {{2, 3, 7}});
  expect_cuda_matches_cpu("PixelShuffle", [] { return std::make_shared<PixelShuffle>(2); }, {{2, 8, 3, 3}});
  expect_cuda_matches_cpu("PixelUnshuffle", [] { return std::make_shared<PixelUnshuffle>(3); }, {{2, 2, 6, 3}});
}

TEST(CompositeLayersCuda, RecurrentMatchCpu) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu("LSTM",
                          [] { return std::make_shared<LSTM>(RNNOptions(3, 4).num_layers(2).bidirectional(true)); },
                          {{5, 2, 3}, {4, 2, 4}, {4, 2, 4}});
  expect_cuda_matches_cpu("LSTM proj_size",
                          [] { return std::make_shared<LSTM>(LSTMOptions(3, 4).num_layers(2).proj_size(2)); },
                          {{5, 2, 3}, {2, 2, 2}, {2, 2, 4}});
  expect_cuda_matches_cpu("GRU", [] { return std::make_shared<GRU>(RNNOptions(3, 4).num_layers(2).batch_first(true)); },
                          {{2, 5, 3}});
  expect_cuda_matches_cpu("RNN relu",
                          [] { return std::make_shared<RNN>(RNNOptions(3, 4).nonlinearity(RNNNonlinearity::ReLU)); },
                          {{5, 2, 3}, {1, 2, 4}});
  expect_cuda_matches_cpu("LSTMCell", [] { return std::make_shared<LSTMCell>(3, 4); }, {{2, 3}, {2, 4}, {2, 4}});
  expect_cuda_matches_cpu("GRUCell", [] { return std::make_shared<GRUCell>(3, 4); }, {{2, 3}, {2, 4}});
}

}  // namespace
}  // namespace kiln::nn
