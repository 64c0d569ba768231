// flip, roll, repeat, tile, sort, sign, where with numbers and einsum on
// CUDA against the CPU: the same float64 inputs and upstream gradients on
// both devices, then the outputs and the inputs' gradients compared.
// Compiled in every build; each test skips without a GPU.
#include <functional>
#include <string>
#include <vector>

#include "autograd_test_util.h"
#include "tensor/cuda_status.h"

namespace kiln::gradtest {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason()

using Op = std::function<TensorList(const TensorList&)>;

// Runs op on leaves of `shapes` on the CPU and on the GPU and compares the
// outputs and the gradients of the inputs.
void expect_cuda_matches_cpu(const std::string& name, const std::vector<Shape>& shapes, const Op& op) {
  const Device gpu = cuda_device(0);
  TensorList cpu_in, gpu_in;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor x = uniform64(shapes[i], 40 + i);
    cpu_in.push_back(x.clone().requires_grad_());
    gpu_in.push_back(x.to(gpu).requires_grad_());
  }
  TensorList cpu_out = op(cpu_in), gpu_out = op(gpu_in);
  ASSERT_EQ(cpu_out.size(), gpu_out.size()) << name;
  Tensor cpu_loss, gpu_loss;
  for (size_t o = 0; o < cpu_out.size(); ++o) {
    EXPECT_EQ(gpu_out[o].device(), gpu) << name;
    ASSERT_EQ(cpu_out[o].shape(), gpu_out[o].shape()) << name;
    std::vector<double> a = values(cpu_out[o]), b = values(gpu_out[o]);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << name << " output " << o << " element " << i;
    if (!cpu_out[o].is_floating_point()) continue;
    Tensor g = uniform64(cpu_out[o].shape(), 90 + o);
    Tensor cpu_term = sum(mul(cpu_out[o], g)), gpu_term = sum(mul(gpu_out[o], g.to(gpu)));
    cpu_loss = cpu_loss.defined() ? add(cpu_loss, cpu_term) : cpu_term;
    gpu_loss = gpu_loss.defined() ? add(gpu_loss, gpu_term) : gpu_term;
  }
  cpu_loss.backward();
  gpu_loss.backward();
  for (size_t i = 0; i < shapes.size(); ++i) {
    ASSERT_TRUE(gpu_in[i].grad().defined()) << name << " input " << i;
    EXPECT_EQ(gpu_in[i].grad().device(), gpu) << name;
    std::vector<double> a = values(cpu_in[i].grad()), b = values(gpu_in[i].grad());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-12) << name << " grad " << i << " element " << k;
  }
}

TEST(TensorOpsCuda, ReorderingMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu("flip", {{3, 4, 5}}, [](const TensorList& in) { return TensorList{flip(in[0], {0, 2})}; });
  expect_cuda_matches_cpu("flip transposed", {{4, 5}},
                          [](const TensorList& in) { return TensorList{flip(in[0].t(), {1})}; });
  expect_cuda_matches_cpu("roll", {{3, 4, 5}},
                          [](const TensorList& in) { return TensorList{roll(in[0], {2, -3}, {0, 2})}; });
  expect_cuda_matches_cpu("roll flattened", {{3, 4}}, [](const TensorList& in) { return TensorList{roll(in[0], {5})}; });
  expect_cuda_matches_cpu("repeat", {{2, 3}},
                          [](const TensorList& in) { return TensorList{repeat(in[0], {2, 3, 1})}; });
  expect_cuda_matches_cpu("tile", {{2, 3}}, [](const TensorList& in) { return TensorList{tile(in[0], {2})}; });
}

TEST(TensorOpsCuda, SortSignAndWhereMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (bool descending : {false, true}) {
    expect_cuda_matches_cpu("sort", {{4, 300}}, [descending](const TensorList& in) {
      ValuesIndices s = sort(in[0], -1, descending);
      return TensorList{s.values, s.indices};
    });
    expect_cuda_matches_cpu("sort dim 0", {{50, 3}}, [descending](const TensorList& in) {
      return TensorList{sort(in[0], 0, descending).values, argsort(in[0], 0, descending)};
    });
  }
  expect_cuda_matches_cpu("sign", {{3, 4}}, [](const TensorList& in) { return TensorList{mul(sign(in[0]), in[0])}; });
  expect_cuda_matches_cpu("where numbers", {{3, 4}}, [](const TensorList& in) {
    Tensor cond = gt(in[0].detach(), 0.0);
    return TensorList{where(cond, 0.5, in[0]), where(cond, 1.0, -1.0)};
  });
}

TEST(TensorOpsCuda, EinsumMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  auto einsum_of = [](std::string equation) {
    return [equation](const TensorList& in) { return TensorList{einsum(equation, in)}; };
  };
  expect_cuda_matches_cpu("einsum bmm", {{3, 2, 4}, {3, 4, 5}}, einsum_of("bij,bjk->bik"));
  expect_cuda_matches_cpu("einsum diagonal", {{4, 4, 3}}, einsum_of("iij->ji"));
  expect_cuda_matches_cpu("einsum ellipsis", {{2, 5, 3}, {3, 4}}, einsum_of("...ij,jk"));
  expect_cuda_matches_cpu("einsum chain", {{2, 3}, {3, 4}, {4, 5}}, einsum_of("ab,bc,cd->ad"));
  expect_cuda_matches_cpu("einsum mixed", {{2, 3, 4, 5}, {2, 5, 3, 2}}, einsum_of("bxik,bkjy->byij"));
}

}  // namespace
}  // namespace kiln::gradtest
