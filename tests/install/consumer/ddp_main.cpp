// DistributedDataParallel as an embedder runs it: this program, started
// twice by the installed kiln-run, trains a small model for a few steps on
// data that differs per rank, and checks that the ranks end with identical
// parameters, equal to those of one process training on both ranks' data
// (the mean of their gradients is the gradient of the whole batch). Exits
// non-zero on any mismatch.
#include <kiln.h>
#include <kiln/distributed.h>

#include <cmath>
#include <cstdio>
#include <memory>

namespace {

using namespace kiln;

// Rank r's batch of step s: (8, 4) inputs and (8) targets of a fixed rule.
std::pair<Tensor, Tensor> batch(int rank, int step) {
  Generator gen(100 * step + rank);
  Tensor x = rand({8, 4}, DType::Float64, &gen);
  Tensor y = ops::argmax(x, 1);
  return {x, y};
}

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(7);  // the same initial weights everywhere
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 8));
  model->push_back(std::make_shared<nn::Tanh>());
  model->push_back(std::make_shared<nn::Linear>(8, 4));
  model->to(DType::Float64);
  return model;
}

constexpr int kSteps = 3;
constexpr double kLr = 0.5;

}  // namespace

int main() {
#ifndef KILN_WITH_GLOO
  std::fprintf(stderr, "kiln consumer ddp: this Kiln was built without Gloo; the install test does not run it\n");
  return 1;
#else
  try {
    distributed::init_process_group("gloo");
    const int rank = distributed::get_rank(), world = distributed::get_world_size();
    auto ddp = std::make_shared<distributed::DistributedDataParallel>(make_model());
    optim::SGD optimizer(ddp->parameters(), optim::SGDOptions(kLr));
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batch(rank, step);
      Tensor loss = nn::functional::cross_entropy((*ddp)(x), y);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }

    // One process on every rank's data: the mean of the per-rank losses.
    auto single = make_model();
    optim::SGD single_optimizer(single->parameters(), optim::SGDOptions(kLr));
    for (int step = 0; step < kSteps; ++step) {
      Tensor total;
      for (int r = 0; r < world; ++r) {
        auto [x, y] = batch(r, step);
        Tensor l = nn::functional::cross_entropy((*single)(x), y);
        total = total.defined() ? add(total, l) : l;
      }
      single_optimizer.zero_grad();
      div(total, static_cast<double>(world)).backward();
      single_optimizer.step();
    }

    double worst = 0;
    TensorDict reference = single->named_parameters();
    for (const auto& [name, p] : ddp->named_parameters()) {
      Tensor other = p.detach().clone();
      distributed::broadcast(other, 0);  // rank 0's copy
      worst = std::max(worst, ops::max(ops::abs(ops::sub(other, p.detach()))).item<double>());
      const std::string key = name.substr(std::string("module.").size());
      worst = std::max(worst, ops::max(ops::abs(ops::sub(reference.at(key), p.detach()))).item<double>());
    }
    distributed::destroy_process_group();
    if (worst > 1e-12) {
      std::fprintf(stderr, "kiln consumer ddp: FAILED on rank %d: parameters differ by %g\n", rank, worst);
      return 1;
    }
    if (rank == 0) std::printf("kiln consumer ddp: ok (%d ranks, %d steps)\n", world, kSteps);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln consumer ddp: FAILED with kiln::Error: %s\n", e.what());
    return 1;
  }
#endif
}
