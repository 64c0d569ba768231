// A whole LeNet training step (forward, loss, backward, SGD with momentum)
// captured in a CUDA graph (Note [CUDA graphs] in tensor/cuda/graph.h) and
// replayed on new batches trains exactly as the same steps run eagerly.
// Needs a GPU; skips without one.
#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "kiln.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/graph.h"

namespace kiln {
namespace {

namespace F = nn::functional;

TEST(CudaGraphTraining, AReplayedLeNetStepTrainsAsTheEagerStep) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  const Device dev = cuda_device(0);
  manual_seed(0);
  auto eager = std::make_shared<nn::LeNet>();
  auto graphed = std::make_shared<nn::LeNet>();
  graphed->load_state_dict(eager->state_dict());
  eager->to(dev);
  graphed->to(dev);
  const optim::SGDOptions sgd = optim::SGDOptions(0.01).momentum(0.9);
  optim::SGD eager_optimizer(eager->parameters(), sgd);
  optim::SGD graphed_optimizer(graphed->parameters(), sgd);

  // Batch i: (64, 3, 32, 32) images and (64,) labels, made on the CPU from seed 100 + i.
  auto batch = [&](int i) {
    Generator gen;
    gen.manual_seed(static_cast<uint64_t>(100 + i));
    Tensor x = randn({64, 3, 32, 32}, DType::Float32, &gen);
    Tensor y = randint(0, 10, {64}, DType::Int64, &gen);
    return std::make_pair(x.to(dev), y.to(dev));
  };
  auto eager_step = [&](const Tensor& x, const Tensor& y) {
    eager_optimizer.zero_grad();
    Tensor loss = F::cross_entropy(eager->forward(x), y);
    loss.backward();
    eager_optimizer.step();
    return loss;
  };
  // The graphed model reads its batch from static tensors.
  Tensor static_x = zeros({64, 3, 32, 32}, {DType::Float32, dev});
  Tensor static_y = zeros({64}, {DType::Int64, dev});
  auto graphed_step = [&] {
    graphed_optimizer.zero_grad();
    Tensor loss = F::cross_entropy(graphed->forward(static_x), static_y);
    loss.backward();
    graphed_optimizer.step();
    return loss;
  };
  auto load = [&](const std::pair<Tensor, Tensor>& b) {
    static_x.copy_(b.first);
    static_y.copy_(b.second);
    cuda::synchronize(dev);  // the copies, on the default stream, before the side stream's warm-up reads them
  };

  // Warm-up, eagerly on both (the graphed model on the capture stream): the
  // momentum buffers appear, cuDNN picks its algorithms, the allocator fills.
  cuda::Stream side = cuda::Stream::create(dev);
  for (int i = 0; i < 3; ++i) {
    const auto b = batch(i);
    eager_step(b.first, b.second);
    load(b);
    {
      cuda::StreamGuard on_side(side);
      graphed_step();
    }
    side.synchronize();
  }
  const Tensor conv1_before = graphed->named_parameters().at("conv1.weight").cpu().clone();

  cuda::Graph graph;
  graph.capture_begin(side);
  Tensor static_loss = graphed_step();  // recorded, not run
  graph.capture_end();

  for (int i = 3; i < 13; ++i) {
    const auto b = batch(i);
    const double eager_loss = eager_step(b.first, b.second).cpu().item<double>();
    load(b);
    graph.replay();  // on the default stream, after the copies and before the read below
    EXPECT_NEAR(static_loss.cpu().item<double>(), eager_loss, 1e-5) << "step " << i;
  }
  const TensorDict eager_params = eager->named_parameters();
  for (const auto& [name, p] : graphed->named_parameters()) {
    const double diff = max(abs(p.cpu() - eager_params.at(name).cpu())).item<double>();
    EXPECT_LE(diff, 1e-5) << name;
  }
  // The replays trained: a check that could not pass if they did nothing.
  EXPECT_GT(max(abs(graphed->named_parameters().at("conv1.weight").cpu() - conv1_before)).item<double>(), 1e-4);
}

// Adam's bias corrections come from a step count the host reads: a replay
// would repeat the captured step's for ever, so Adam refuses the capture
// (as torch's does unless capturable) and the capture itself stays usable.
TEST(CudaGraphTraining, AdamRefusesToBeCaptured) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  const Device dev = cuda_device(0);
  Tensor w = full({4}, 1.0, {DType::Float32, dev});
  w.requires_grad_();
  sum(mul(w, w)).backward();
  for (const bool fused : {false, true}) {
    optim::Adam adam({w}, optim::AdamOptions(0.1).fused(fused));
    cuda::Stream side = cuda::Stream::create(dev);
    cuda::synchronize(dev);
    cuda::Graph graph;
    graph.capture_begin(side);
    try {
      adam.step();
      ADD_FAILURE() << "expected kiln::Error (fused " << fused << ")";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("Adam::step: cannot be captured in a CUDA graph (cuda:0 is capturing)"),
                std::string::npos)
          << e.message();
    }
    graph.capture_end();
    EXPECT_EQ(sum(w.cpu()).item<double>(), 4.0) << "the refused step changed the parameter (fused " << fused << ")";
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
