// Shared by the data-parallel tests (ddp_test.cpp, data_parallel_test.cpp,
// nccl_test.cpp): a float64 LeNet, a model that can skip a layer, seeded
// batches, and the largest parameter difference.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "kiln.h"
#include "nn/linear.h"
#include "nn/models/lenet.h"

namespace kiln::distributed::testing {

// LeNet in float64, initialised from `seed`.
inline std::shared_ptr<nn::Module> make_lenet(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::LeNet>();
  model->to(DType::Float64);
  return model;
}

// fc1 (4 -> 3) always; fc2 (3 -> 3) only when `use_second`: a model whose
// forward skips a layer on some steps. Float64 on the CPU unless told.
class Branchy : public nn::Module {
 public:
  explicit Branchy(TensorOptions options = DType::Float64) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 3));
    to(options.dtype);
    to(options.device);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = fc1->forward(x);
    return use_second ? fc2->forward(h) : h;
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
  bool use_second = true;
};

// Step `step`'s whole batch, the same in every process: (batch, 3, 32, 32)
// float64 images and int64 labels.
inline std::pair<Tensor, Tensor> batch_for(int step, int64_t batch) {
  Generator gen;
  gen.manual_seed(1000 + static_cast<uint64_t>(step));
  Tensor x = randn({batch, 3, 32, 32}, DType::Float64, &gen);
  Tensor y = randint(0, 10, {batch}, DType::Int64, &gen);
  return {x, y};
}

// max |a - b| over every parameter, in float64.
inline double max_difference(const nn::Module& a, const nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    Tensor d = max(abs(pa[i].to(DType::Float64) - pb[i].to(DType::Float64)));
    worst = std::max(worst, d.item<double>());
  }
  return worst;
}

}  // namespace kiln::distributed::testing
