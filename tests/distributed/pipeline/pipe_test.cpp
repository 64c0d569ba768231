// Pipe: the pipeline's stages on threads of one process, and plain model
// parallelism. Both equal single-process training; CUDA placements compare
// with the CPU (skipped without a GPU).
#include "distributed/pipeline/pipe.h"

#include <gtest/gtest.h>

#include "kiln.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "optim/sgd.h"
#include "tests/distributed/store_test_util.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::distributed::pipeline {
namespace {

namespace F = nn::functional;
using testing::error_of;
constexpr Device kCuda0{DeviceType::CUDA, 0};

// An MLP of 8 modules, float64.
std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  std::vector<std::shared_ptr<nn::Module>> layers;
  for (int i = 0; i < 4; ++i) {
    layers.push_back(std::make_shared<nn::Linear>(i == 0 ? 6 : 16, i == 3 ? 5 : 16));
    layers.push_back(std::make_shared<nn::Tanh>());
  }
  auto model = std::make_shared<nn::Sequential>(layers);
  model->to(DType::Float64);
  return model;
}

std::pair<Tensor, Tensor> batch_for(int step, int64_t batch) {
  Generator gen(300 + static_cast<uint64_t>(step));
  return {randn({batch, 6}, DType::Float64, &gen), randint(0, 5, {batch}, DType::Int64, &gen)};
}

Tensor cross_entropy_of(const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); }

bool cuda_present() {
#ifdef KILN_WITH_CUDA
  return cuda::cuda_available();
#else
  return false;
#endif
}

#ifdef KILN_WITH_GLOO
// A Pipe's in-process group is a gloo group when its stages are on the CPU.

// Trains `model` and a reference of the same seed for `steps` steps and
// compares their parameters.
void expect_pipe_equals_single_process(const PipeOptions& options, int chunks, int steps = 20) {
  SCOPED_TRACE(::testing::Message() << options.schedule << " chunks=" << chunks << " stages="
                                    << (options.balance.empty() ? 2 : options.balance.size()));
  auto reference = make_mlp(5), model = make_mlp(5);
  Pipe pipe(model, chunks, cross_entropy_of, options);
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  const int64_t batch = 2 * chunks - 1;  // the last micro-batch smaller
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch_for(step, batch);
    ref_opt.zero_grad();
    Tensor ref_loss = F::cross_entropy((*reference)(x), y);
    ref_loss.backward();
    ref_opt.step();
    opt.zero_grad();
    Tensor loss = pipe.step({x}, y);
    opt.step();
    EXPECT_NEAR(loss.to(kCPU).item<double>(), ref_loss.item<double>(), 1e-12);
  }
  const auto want = reference->parameters(), got = model->parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(max(abs(got[i].to(kCPU) - want[i])).item<double>(), 1e-12) << "parameter " << i;
  auto [x, y] = batch_for(99, batch);
  EXPECT_NEAR(pipe.evaluate({x}, y).to(kCPU).item<double>(), F::cross_entropy((*reference)(x), y).item<double>(),
              1e-12);
}

TEST(Pipe, StagesOnThreadsEqualSingleProcessForEverySchedule) {
  for (const char* schedule : {"gpipe", "1f1b", "zero-bubble"}) {
    PipeOptions options;
    options.schedule = schedule;
    options.balance = {2, 2, 2, 2};
    expect_pipe_equals_single_process(options, 4);
    options.balance = {4, 4};
    expect_pipe_equals_single_process(options, 3);
  }
  PipeOptions interleaved;
  interleaved.schedule = "interleaved";
  interleaved.stages_per_rank = 2;
  interleaved.balance = {2, 2, 2, 2};
  expect_pipe_equals_single_process(interleaved, 4);
  PipeOptions checkpointed;
  checkpointed.schedule = "1f1b";
  checkpointed.checkpoint_activations = true;
  expect_pipe_equals_single_process(checkpointed, 2);
}

TEST(Pipe, AStageErrorIsRethrownNotTheTimeoutsItCauses) {
  PipeOptions options;
  options.timeout = std::chrono::seconds(2);
  Pipe pipe(make_mlp(1), 2, cross_entropy_of, options);
  auto [x, y] = batch_for(0, 4);
  try {
    pipe.step({x}, y.narrow(0, 0, 3));
    FAIL() << "a target of the wrong size must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the target has shape [3] but the batch on stage 0's rank has 4 examples"),
              std::string::npos)
        << e.what();
  }
}

TEST(Pipe, OptionsAreChecked) {
  PipeOptions devices;
  devices.balance = {4, 4};
  devices.devices = {kCPU};
  EXPECT_NE(error_of([&] { Pipe(make_mlp(1), 2, cross_entropy_of, devices); }).find("1 devices for 2 stages"),
            std::string::npos);
  PipeOptions odd;
  odd.schedule = "interleaved";
  odd.stages_per_rank = 2;
  odd.balance = {3, 3, 2};
  EXPECT_NE(error_of([&] { Pipe(make_mlp(1), 2, cross_entropy_of, odd); })
                .find("3 stages cannot be shared by ranks of 2 stages each"),
            std::string::npos);
  PipeOptions unknown;
  unknown.schedule = "pipedream";
  EXPECT_NE(error_of([&] { Pipe(make_mlp(1), 2, cross_entropy_of, unknown); }).find("unknown schedule 'pipedream'"),
            std::string::npos);
}

#endif  // KILN_WITH_GLOO

TEST(Pipe, ModelParallelismKeepsTheModelsValuesKeysAndGradients) {
  auto reference = make_mlp(2), model = make_mlp(2);
  auto placed = place_on_devices(*model, {3, 5}, {kCPU, kCPU});
  EXPECT_EQ(placed->state_dict().keys(), reference->state_dict().keys());
  auto [x, y] = batch_for(0, 7);
  Tensor want = F::cross_entropy((*reference)(x), y);
  Tensor got = F::cross_entropy((*placed)(x), y);
  EXPECT_EQ(got.item<double>(), want.item<double>());
  want.backward();
  got.backward();
  const auto a = reference->parameters(), b = model->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(max(abs(a[i].grad() - b[i].grad())).item<double>(), 0.0);
}

TEST(Pipe, CudaModelParallelismEqualsTheCpu) {
  if (!cuda_present()) GTEST_SKIP() << "no CUDA device: place_on_devices across the CPU and cuda:0 did not run";
  // Stage 0 on the CPU, stage 1 on the GPU: gradients cross devices.
  auto reference = make_mlp(3), model = make_mlp(3);
  auto placed = place_on_devices(*model, {4, 4}, {kCPU, kCuda0});
  auto [x, y] = batch_for(1, 9);
  Tensor want = F::cross_entropy((*reference)(x), y);
  Tensor got = F::cross_entropy((*placed)(x), y.to(kCuda0));
  EXPECT_NEAR(got.to(kCPU).item<double>(), want.item<double>(), 1e-10);
  want.backward();
  got.backward();
  const auto a = reference->parameters(), b = model->parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LE(max(abs(a[i].grad() - b[i].grad().to(kCPU))).item<double>(), 1e-10);
}

#ifdef KILN_WITH_GLOO
// expect_pipe_equals_single_process is above, under the same condition.
TEST(Pipe, CudaStagesEqualTheCpu) {
  if (!cuda_present()) GTEST_SKIP() << "no CUDA device: the Pipe with both stages on cuda:0 did not run";
  // Both stages on the one GPU: the in-process group is gloo, through the host.
  PipeOptions options;
  options.schedule = "1f1b";
  options.balance = {4, 4};
  options.devices = {kCuda0, kCuda0};
  expect_pipe_equals_single_process(options, 3, 5);
}
#endif  // KILN_WITH_GLOO

}  // namespace
}  // namespace kiln::distributed::pipeline
