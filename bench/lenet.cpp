// lenet: Kiln training and evaluating LeNet-5 (nn/models/lenet.h) on
// CIFAR-shaped data held in memory, in images per second. The anchor is the
// same workload in PyTorch (bench/lenet_torch.py); bench/lenet_vs_pytorch.sh
// runs both and prints the ratios.
//
// The workload, identical in both programs:
// - training: SGD (lr 0.01, momentum 0.9), batch 64, float32, one pass over
//   the first floor(N / 64) * 64 of N images (N = 10000: 156 steps);
//   zero_grad sets gradients to none, as PyTorch 2.x does by default;
// - evaluation: M images in batches of 1000 under NoGradGuard, model->eval().
// The images are N(0, 1) noise (already normalised) and the labels uniform
// in [0, 10), drawn with a fixed seed: the values do not change the speed.
// The training pass is timed once after a few warm-up steps; the evaluation
// pass, much shorter and so more exposed to a noisy machine, is timed
// kEvalPasses times and reports the median. One line per (pass, threads):
//   lenet_train threads=1 kiln_img_s=..
//   lenet_eval threads=1 kiln_img_s=..
//
// --device cuda trains instead on a GPU, one pass over the images at each
// batch size of --batch (default 64 and 512), the images already resident on
// the device, as the CUDA benchmark of bench/lenet_vs_pytorch.sh asks:
//   lenet_train_cuda batch=64 kiln_img_s=..
//   lenet_train_cuda_graph batch=64 kiln_img_s=..
// The first runs the step eagerly; the second captures it once in a CUDA
// graph (Note [CUDA graphs] in tensor/cuda/graph.h) and per step copies the
// batch into the captured input tensors and replays. The clock stops when
// the last step's loss has reached the host, so the queued GPU work is all
// inside the timing.
//
// --profile adds a second, instrumented training pass that prints the mean
// time of each phase of a step. The forward runs the model's submodules one
// by one (the ops of LeNet::forward); the backward is split by gradient hooks
// on the activations between layers (Note [Timing backward by hooks]).
//
// Usage: build/bench/lenet [--threads T] [--train-images N] [--eval-images M] [--cifar DIR] [--profile]
//                          [--device cuda [--batch B]...]
//        (default: threads 1 and 2, N = M = 10000, synthetic data; --cifar DIR reads CIFAR-10's
//        binary format from DIR, as bench/lenet_vs_pytorch.sh passes it)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/cifar10.h"
#include "kiln.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/graph.h"
#endif

namespace {

namespace F = kiln::nn::functional;
using kiln::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int64_t kTrainBatch = 64;
constexpr int64_t kEvalBatch = 1000;
constexpr int64_t kWarmupSteps = 5;
constexpr int kEvalPasses = 5;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Options {
  std::vector<int> threads{1, 2};
  int64_t train_images = 10000;
  int64_t eval_images = 10000;
  bool profile = false;
  std::string cifar;  // a CIFAR-10 binary folder, or empty for synthetic data
  std::string device = "cpu";
  std::vector<int64_t> cuda_batches{64, 512};  // --device cuda only
};

Options parse(int argc, char** argv) {
  Options options;
  bool batch_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--threads" && has_value) {
      options.threads = {std::atoi(argv[++i])};
    } else if (arg == "--train-images" && has_value) {
      options.train_images = std::atoll(argv[++i]);
    } else if (arg == "--eval-images" && has_value) {
      options.eval_images = std::atoll(argv[++i]);
    } else if (arg == "--profile") {
      options.profile = true;
    } else if (arg == "--cifar" && has_value) {
      options.cifar = argv[++i];
    } else if (arg == "--device" && has_value) {
      options.device = argv[++i];
    } else if (arg == "--batch" && has_value) {
      if (!batch_given) options.cuda_batches.clear();
      batch_given = true;
      options.cuda_batches.push_back(std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: lenet [--threads T] [--train-images N] [--eval-images M] [--cifar DIR] [--profile]\n"
                   "             [--device cpu|cuda] [--batch B]...\n");
      std::exit(2);
    }
  }
  KILN_CHECK(options.threads[0] >= 1, "lenet: --threads must be >= 1, got ", options.threads[0]);
  KILN_CHECK(options.train_images >= kTrainBatch, "lenet: --train-images must be >= ", kTrainBatch, ", got ",
             options.train_images);
  KILN_CHECK(options.eval_images >= kEvalBatch, "lenet: --eval-images must be >= ", kEvalBatch, ", got ",
             options.eval_images);
  KILN_CHECK(options.device == "cpu" || options.device == "cuda", "lenet: --device must be cpu or cuda, got '",
             options.device, "'");
  for (int64_t batch : options.cuda_batches) {
    KILN_CHECK(batch >= 1 && batch <= options.train_images, "lenet: --batch must be in [1, --train-images = ",
               options.train_images, "], got ", batch);
  }
  return options;
}

struct Data {
  Tensor images;  // (N, 3, 32, 32) float32
  Tensor labels;  // (N,) int64
};

Data make_data(int64_t n, uint64_t seed) {
  kiln::manual_seed(seed);
  return {kiln::randn({n, 3, 32, 32}), kiln::randint(0, 10, {n})};
}

// CIFAR-10 from the binary format, normalized per channel as the trainer
// does (the pixels do not change the speed, but both sides see one data set).
Data load_data(const std::string& root, bool train, int64_t n) {
  kiln::data::Cifar10Split split = kiln::data::load_cifar10(root, train);
  KILN_CHECK(split.images.size(0) >= n, "lenet: ", root, " holds ", split.images.size(0), " ",
             train ? "training" : "test", " images, fewer than the ", n, " asked for");
  Tensor mean = kiln::from_vector<float>({0.4914f, 0.4822f, 0.4465f}, {1, 3, 1, 1});
  Tensor std = kiln::from_vector<float>({0.2470f, 0.2435f, 0.2616f}, {1, 3, 1, 1});
  Tensor x = kiln::div(split.images.narrow(0, 0, n).to(kiln::DType::Float32), 255.0);
  return {kiln::div(kiln::sub(x, mean), std).contiguous(), split.labels.narrow(0, 0, n).contiguous()};
}

// A model and its optimizer, freshly initialised for each thread count so
// that every run starts from the same weights.
struct Trainer {
  std::shared_ptr<kiln::nn::LeNet> model;
  std::unique_ptr<kiln::optim::SGD> optimizer;

  explicit Trainer(kiln::Device device = kiln::kCPU) {
    kiln::manual_seed(0);
    model = std::make_shared<kiln::nn::LeNet>();
    model->to(device);
    optimizer = std::make_unique<kiln::optim::SGD>(model->parameters(), kiln::optim::SGDOptions(0.01).momentum(0.9));
  }

  Tensor step(const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = F::cross_entropy((*model)(x), y);
    loss.backward();
    optimizer->step();
    return loss;
  }
};

// Images per second of one training pass over the first `steps` batches.
double time_training(Trainer& trainer, const Data& data, int64_t steps) {
  trainer.model->train();
  for (int64_t s = 0; s < kWarmupSteps; ++s) {
    trainer.step(data.images.narrow(0, s * kTrainBatch, kTrainBatch), data.labels.narrow(0, s * kTrainBatch, kTrainBatch));
  }
  const auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    trainer.step(data.images.narrow(0, s * kTrainBatch, kTrainBatch), data.labels.narrow(0, s * kTrainBatch, kTrainBatch));
  }
  return static_cast<double>(steps * kTrainBatch) / seconds_between(start, Clock::now());
}

// Images per second of one training pass over `data` (resident on the GPU)
// in batches of `batch`, after kWarmupSteps steps. Reading a loss back to
// the host waits for all the work queued before it.
double time_training_cuda(Trainer& trainer, const Data& data, int64_t batch) {
  trainer.model->train();
  const int64_t steps = data.images.size(0) / batch;
  Tensor loss;
  for (int64_t s = 0; s < kWarmupSteps; ++s) {
    const int64_t at = (s % steps) * batch;
    loss = trainer.step(data.images.narrow(0, at, batch), data.labels.narrow(0, at, batch));
  }
  (void)loss.item<double>();
  const auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    loss = trainer.step(data.images.narrow(0, s * batch, batch), data.labels.narrow(0, s * batch, batch));
  }
  (void)loss.item<double>();
  return static_cast<double>(steps * batch) / seconds_between(start, Clock::now());
}

#ifdef KILN_WITH_CUDA
// As time_training_cuda, with the step captured in a CUDA graph after the
// warm-up and replayed: every step, on the capture stream, copies its batch
// into the tensors the capture read, then replays the graph.
double time_training_cuda_graph(Trainer& trainer, const Data& data, int64_t batch) {
  trainer.model->train();
  const kiln::Device dev = data.images.device();
  const int64_t steps = data.images.size(0) / batch;
  Tensor x = kiln::zeros({batch, 3, 32, 32}, {kiln::DType::Float32, dev});  // the captured step's input
  Tensor y = kiln::zeros({batch}, {kiln::DType::Int64, dev});
  kiln::cuda::synchronize(dev);  // `data` and the zeros were written on the default stream
  kiln::cuda::Stream side = kiln::cuda::Stream::create(dev);
  kiln::cuda::StreamGuard on_side(side);
  auto load = [&](int64_t s) {
    const int64_t at = (s % steps) * batch;
    x.copy_(data.images.narrow(0, at, batch));
    y.copy_(data.labels.narrow(0, at, batch));
  };
  for (int64_t s = 0; s < kWarmupSteps; ++s) {
    load(s);
    trainer.step(x, y);
  }
  kiln::cuda::Graph graph;
  graph.capture_begin(side);
  Tensor loss = trainer.step(x, y);
  graph.capture_end();
  side.synchronize();
  const auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    load(s);
    graph.replay();
  }
  (void)loss.item<double>();
  return static_cast<double>(steps * batch) / seconds_between(start, Clock::now());
}
#endif

// Images per second of an evaluation pass over `batches` batches of 1000: the
// median of kEvalPasses passes.
double time_evaluation(Trainer& trainer, const Data& data, int64_t batches) {
  trainer.model->eval();
  kiln::NoGradGuard no_grad;
  Tensor predicted = kiln::argmax((*trainer.model)(data.images.narrow(0, 0, kEvalBatch)), 1);
  std::vector<double> rates;
  for (int pass = 0; pass < kEvalPasses; ++pass) {
    const auto start = Clock::now();
    for (int64_t b = 0; b < batches; ++b) {
      predicted = kiln::argmax((*trainer.model)(data.images.narrow(0, b * kEvalBatch, kEvalBatch)), 1);
    }
    rates.push_back(static_cast<double>(batches * kEvalBatch) / seconds_between(start, Clock::now()));
  }
  std::sort(rates.begin(), rates.end());
  return rates[kEvalPasses / 2];
}

// ---- the per-phase profile ----------------------------------------------------

// Note [Timing backward by hooks]
// A hook registered on an activation runs when that activation's gradient is
// complete, just before the backward of the op that produced it. LeNet is a
// chain, so the hook on the output of layer k fires when the backward of
// every layer after k has finished: the gaps between consecutive hooks are
// the backward times of the layers between them. The hooks return an
// undefined tensor, which leaves the gradient as it is.
enum Phase {
  kFwdConv1,
  kFwdPool1,
  kFwdConv2,
  kFwdPool2,
  kFwdFc,
  kLoss,
  kBwdLoss,
  kBwdFc,
  kBwdPool2,
  kBwdConv2,
  kBwdPool1,
  kBwdConv1,
  kZeroGrad,
  kOptimizerStep,
  kPhaseCount
};

const char* const kPhaseNames[kPhaseCount] = {
    "forward  conv1",      "forward  pool1+relu", "forward  conv2", "forward  pool2+relu",
    "forward  fc1..fc3",   "loss     cross_entropy", "backward cross_entropy", "backward fc3..fc1+flatten",
    "backward relu+pool2", "backward conv2", "backward relu+pool1", "backward conv1",
    "zero_grad",           "optimizer step"};

void profile_training(Trainer& trainer, const Data& data, int64_t steps, int threads) {
  kiln::nn::LeNet& m = *trainer.model;
  m.train();
  std::vector<double> total(kPhaseCount, 0.0);
  for (int64_t s = 0; s < kWarmupSteps + steps; ++s) {
    // The warm-up steps take the first batches, then the pass starts over.
    const int64_t batch = s < kWarmupSteps ? s : s - kWarmupSteps;
    const Tensor x = data.images.narrow(0, batch * kTrainBatch, kTrainBatch);  // (64, 3, 32, 32)
    const Tensor y = data.labels.narrow(0, batch * kTrainBatch, kTrainBatch);  // (64,)
    // begin[p], end[p]: phase p. Consecutive forward phases and consecutive
    // backward phases share their boundary stamps.
    Clock::time_point begin[kPhaseCount], end[kPhaseCount];
    begin[kZeroGrad] = Clock::now();
    trainer.optimizer->zero_grad();
    end[kZeroGrad] = Clock::now();

    begin[kFwdConv1] = Clock::now();
    // LeNet::forward's order: relu after pooling.
    Tensor c1 = (*m.conv1)(x);  // (64, 6, 28, 28)
    end[kFwdConv1] = begin[kFwdPool1] = Clock::now();
    Tensor p1 = F::relu((*m.pool)(c1));  // (64, 6, 14, 14)
    end[kFwdPool1] = begin[kFwdConv2] = Clock::now();
    Tensor c2 = (*m.conv2)(p1);  // (64, 16, 10, 10)
    end[kFwdConv2] = begin[kFwdPool2] = Clock::now();
    Tensor p2 = F::relu((*m.pool)(c2));  // (64, 16, 5, 5)
    end[kFwdPool2] = begin[kFwdFc] = Clock::now();
    Tensor h = F::relu((*m.fc1)(F::flatten(p2, 1)));  // (64, 120)
    h = F::relu((*m.fc2)(h));                         // (64, 84)
    Tensor logits = (*m.fc3)(h);                      // (64, 10)
    end[kFwdFc] = begin[kLoss] = Clock::now();
    Tensor loss = F::cross_entropy(logits, y);
    end[kLoss] = Clock::now();

    // Each hook ends one backward phase and begins the next (Note [Timing
    // backward by hooks]); registering them is outside every phase.
    auto stamp = [&begin, &end](Phase next) {
      return [&begin, &end, next](const Tensor&) {
        end[next - 1] = begin[next] = Clock::now();
        return Tensor();
      };
    };
    logits.register_hook(stamp(kBwdFc));
    p2.register_hook(stamp(kBwdPool2));
    c2.register_hook(stamp(kBwdConv2));
    p1.register_hook(stamp(kBwdPool1));
    c1.register_hook(stamp(kBwdConv1));
    begin[kBwdLoss] = Clock::now();
    loss.backward();
    end[kBwdConv1] = Clock::now();

    begin[kOptimizerStep] = Clock::now();
    trainer.optimizer->step();
    end[kOptimizerStep] = Clock::now();

    if (s < kWarmupSteps) continue;
    for (int p = 0; p < kPhaseCount; ++p) total[p] += seconds_between(begin[p], end[p]);
  }
  double forward = 0, backward = 0, all = 0;
  for (int p = 0; p < kPhaseCount; ++p) {
    if (p <= kFwdFc) forward += total[p];
    if (p >= kBwdLoss && p <= kBwdConv1) backward += total[p];
    all += total[p];
  }
  const double per_step_ms = 1e3 / static_cast<double>(steps);
  std::printf("lenet_profile threads=%d steps=%lld (ms per training step, mean; share of the step)\n", threads,
              static_cast<long long>(steps));
  for (int p = 0; p < kPhaseCount; ++p) {
    std::printf("  %-27s %8.3f  %5.1f%%\n", kPhaseNames[p], total[p] * per_step_ms, 100.0 * total[p] / all);
  }
  std::printf("  %-27s %8.3f  %5.1f%%\n", "forward (total)", forward * per_step_ms, 100.0 * forward / all);
  std::printf("  %-27s %8.3f  %5.1f%%\n", "backward (total)", backward * per_step_ms, 100.0 * backward / all);
  std::printf("  %-27s %8.3f  (%.0f img/s)\n", "step (total)", all * per_step_ms,
              static_cast<double>(steps * kTrainBatch) / all);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  const int64_t train_steps = options.train_images / kTrainBatch;
  const int64_t eval_batches = options.eval_images / kEvalBatch;
  // The warm-up steps reuse the first batches; the data must hold them.
  const int64_t train_n = std::max(options.train_images, kWarmupSteps * kTrainBatch);
  const Data train = options.cifar.empty() ? make_data(train_n, 1) : load_data(options.cifar, true, train_n);
  const Data eval = options.cifar.empty() ? make_data(options.eval_images, 2)
                                          : load_data(options.cifar, false, options.eval_images);

  if (options.device == "cuda") {
    const kiln::Device gpu = kiln::cuda_device(0);
    const Data resident{train.images.narrow(0, 0, options.train_images).to(gpu),
                        train.labels.narrow(0, 0, options.train_images).to(gpu)};
    for (int64_t batch : options.cuda_batches) {
      Trainer trainer(gpu);
      std::printf("lenet_train_cuda batch=%lld kiln_img_s=%.0f\n", static_cast<long long>(batch),
                  time_training_cuda(trainer, resident, batch));
      std::fflush(stdout);
#ifdef KILN_WITH_CUDA
      Trainer graphed(gpu);
      std::printf("lenet_train_cuda_graph batch=%lld kiln_img_s=%.0f\n", static_cast<long long>(batch),
                  time_training_cuda_graph(graphed, resident, batch));
      std::fflush(stdout);
#endif
    }
    return 0;
  }
  for (int threads : options.threads) {
    kiln::set_num_threads(threads);
    Trainer trainer;
    const double train_img_s = time_training(trainer, train, train_steps);
    std::printf("lenet_train threads=%d kiln_img_s=%.0f\n", threads, train_img_s);
    const double eval_img_s = time_evaluation(trainer, eval, eval_batches);
    std::printf("lenet_eval threads=%d kiln_img_s=%.0f\n", threads, eval_img_s);
    std::fflush(stdout);
    if (options.profile) {
      Trainer profiled;
      profile_training(profiled, train, train_steps, threads);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
