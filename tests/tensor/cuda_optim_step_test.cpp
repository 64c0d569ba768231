// The CUDA fused optimizer steps (tensor/cuda/optim_step.cu) against the
// CPU's: bitwise equal parameters and state for every option, in float32
// and float64, over enough tensors of mixed sizes and dtypes to take
// several multi-tensor launches (Note [Multi-tensor launches]).
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tensor/fused_optim.h"
#include "tests/tensor/cuda_test_util.h"

namespace kiln {

using namespace kiln::ops;
using namespace kiln::backend_compare;
namespace {

// 40 tensors (more than one launch holds), from 1 element to several
// chunks (1024 elements each), float32 and float64 mixed.
struct TensorLists {
  std::vector<Tensor> cpu, dev;
};

TensorLists make_lists(uint64_t seed, double lo, double hi) {
  TensorLists lists;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = i % 7 == 0 ? 40000 + i : 1 + 37 * i;
    const DType dtype = i % 3 == 0 ? DType::Float64 : DType::Float32;
    Tensor t = from_vector(pseudo_random(n, lo, hi, seed * 100 + i), {n}).to(dtype);
    lists.cpu.push_back(t);
    lists.dev.push_back(t.to(gpu()));
  }
  return lists;
}

void expect_lists_equal(const TensorLists& lists, const std::string& what) {
  for (size_t i = 0; i < lists.cpu.size(); ++i) {
    expect_matches(lists.cpu[i], lists.dev[i], detail::str(what, " tensor ", i), 0);
  }
}

TEST(CudaOptimStep, SgdMatchesTheCpuForEveryOption) {
  SKIP_WITHOUT_GPU();
  for (double momentum : {0.0, 0.9}) {
    for (double dampening : {0.0, 0.25}) {
      for (double weight_decay : {0.0, 5e-4}) {
        for (bool nesterov : {false, true}) {
          if (nesterov && (momentum == 0.0 || dampening != 0.0)) continue;
          for (bool maximize : {false, true}) {
            const SgdStep step{.lr = 0.05, .momentum = momentum, .dampening = dampening,
                               .weight_decay = weight_decay, .nesterov = nesterov, .maximize = maximize};
            const std::string what = detail::str("sgd momentum ", momentum, " dampening ", dampening, " decay ",
                                                 weight_decay, " nesterov ", nesterov, " maximize ", maximize);
            TensorLists params = make_lists(1, -1, 1), buffers = make_lists(2, -1, 1);
            for (int s = 0; s < 3; ++s) {
              TensorLists grads = make_lists(10 + s, -2, 2);
              const std::vector<bool> first(params.cpu.size(), s == 0);
              const std::vector<Tensor> none;
              sgd_step_(params.cpu, grads.cpu, momentum != 0.0 ? buffers.cpu : none, first, step);
              sgd_step_(params.dev, grads.dev, momentum != 0.0 ? buffers.dev : none, first, step);
              expect_lists_equal(params, what + detail::str(" step ", s));
              if (momentum != 0.0) expect_lists_equal(buffers, what + detail::str(" buffers step ", s));
            }
          }
        }
      }
    }
  }
}

TEST(CudaOptimStep, AdamMatchesTheCpuForEveryOption) {
  SKIP_WITHOUT_GPU();
  for (bool decoupled : {false, true}) {
    for (double weight_decay : {0.0, 0.01}) {
      for (bool amsgrad : {false, true}) {
        for (bool maximize : {false, true}) {
          const AdamStep step{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = weight_decay,
                              .amsgrad = amsgrad, .maximize = maximize, .decoupled = decoupled};
          const std::string what = detail::str("adam decoupled ", decoupled, " decay ", weight_decay, " amsgrad ",
                                               amsgrad, " maximize ", maximize);
          TensorLists params = make_lists(3, -1, 1);
          TensorLists exp_avg = make_lists(4, 0, 0), exp_avg_sq = make_lists(5, 0, 0), max_sq = make_lists(6, 0, 0);
          const std::vector<Tensor> none;
          for (int s = 1; s <= 3; ++s) {
            TensorLists grads = make_lists(20 + s, -2, 2);
            const std::vector<double> steps(params.cpu.size(), static_cast<double>(s));
            adam_step_(params.cpu, grads.cpu, exp_avg.cpu, exp_avg_sq.cpu, amsgrad ? max_sq.cpu : none, steps, step);
            adam_step_(params.dev, grads.dev, exp_avg.dev, exp_avg_sq.dev, amsgrad ? max_sq.dev : none, steps, step);
            expect_lists_equal(params, what + detail::str(" step ", s));
            expect_lists_equal(exp_avg, what + detail::str(" exp_avg step ", s));
            expect_lists_equal(exp_avg_sq, what + detail::str(" exp_avg_sq step ", s));
            if (amsgrad) expect_lists_equal(max_sq, what + detail::str(" max_exp_avg_sq step ", s));
          }
        }
      }
    }
  }
}

TEST(CudaOptimStep, UnscaleGradsMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const double inv_scale = 1.0 / 65536;
  TensorLists grads = make_lists(30, -1e4, 1e4);
  Tensor cpu_found = zeros({}), gpu_found = zeros({}, {DType::Float32, gpu()});
  unscale_grads_(grads.cpu, inv_scale, cpu_found);
  unscale_grads_(grads.dev, inv_scale, gpu_found);
  expect_lists_equal(grads, "unscale");
  EXPECT_EQ(gpu_found.item<float>(), 0.0f);
  // A NaN in the last chunk of a large float32 tensor, an inf in a small
  // float64 one: each alone raises the flag.
  for (auto [index, at] : {std::pair<size_t, int64_t>{35, 40000}, {3, 5}}) {
    TensorLists bad = make_lists(31, -1, 1);
    Tensor poisoned = bad.cpu[index].clone();
    if (poisoned.dtype() == DType::Float32) {
      poisoned.data<float>()[at] = std::nanf("");
    } else {
      poisoned.data<double>()[at] = std::numeric_limits<double>::infinity();
    }
    bad.dev[index] = poisoned.to(gpu());
    Tensor flag = zeros({}, {DType::Float32, gpu()});
    unscale_grads_(bad.dev, 1.0, flag);
    EXPECT_EQ(flag.item<float>(), 1.0f) << "tensor " << index;
  }
}

TEST(CudaOptimStep, TensorsOnDifferentDevicesCannotBeFused) {
  SKIP_WITHOUT_GPU();
  Tensor p = zeros({3}, {DType::Float32, gpu()});
  expect_error([&] { sgd_step_({p}, {zeros({3})}, {}, {}, {.lr = 0.1}); },
               "sgd_step_: cannot fuse parameter 0: a gradient or buffer is float32 [3] on cpu");
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
