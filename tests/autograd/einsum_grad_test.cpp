// Gradients of einsum, a composition of views, mul, sum and bmm (Note
// [Einsum by composition]): gradcheck and gradgradcheck in float64 over
// contractions, diagonals, ellipses, size-1 broadcasting and three
// operands, and the gradient of a matrix product by hand.
#include <string>
#include <vector>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

struct Case {
  std::string equation;
  std::vector<Shape> shapes;
};

autograd::GradcheckFn einsum_of(const std::string& equation) {
  return [equation](const TensorList& in) { return TensorList{einsum(equation, in)}; };
}

TEST(EinsumGrad, GradcheckOverEveryKindOfSubscript) {
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}},
      {"ij,jk", {{2, 3}, {3, 4}}},
      {"bij,bjk->bik", {{2, 2, 3}, {2, 3, 2}}},
      {"i,j->ij", {{3}, {2}}},
      {"i,i->", {{4}, {4}}},
      {"ij->ji", {{2, 3}}},
      {"ij->", {{2, 3}}},
      {"ii->i", {{3, 3}}},
      {"ii", {{3, 3}}},
      {"iij->ji", {{2, 2, 3}}},
      {"aab,bcc->ac", {{2, 2, 3}, {3, 2, 2}}},
      {"...ij,...jk->...ik", {{2, 2, 3}, {2, 3, 2}}},
      {"...ij,jk", {{2, 2, 3}, {3, 2}}},
      {"i...j,j...", {{2, 3, 2}, {2, 3}}},
      {"...ij->ij", {{2, 2, 3}}},
      {"ij,jk", {{2, 3}, {1, 2}}},
      {"ij,ij->ij", {{2, 3}, {1, 3}}},
      {"ab,bc,cd->ad", {{2, 3}, {3, 2}, {2, 2}}},
      {"ij,ij,ij->j", {{2, 3}, {2, 3}, {2, 3}}},
      {"bxik,bkjy->byij", {{2, 2, 2, 3}, {2, 3, 2, 2}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.equation);
    TensorList inputs;
    for (size_t i = 0; i < c.shapes.size(); ++i) inputs.push_back(leaf(c.shapes[i], 1 + i));
    expect_gradcheck(einsum_of(c.equation), inputs);
    expect_gradgradcheck(einsum_of(c.equation), inputs);
  }
}

TEST(EinsumGrad, NonContiguousOperands) {
  expect_gradcheck(einsum_of("ij,jk->ik"), {transposed_leaf({3, 4}, 10), strided_leaf({4, 2}, 11)});
  expect_gradcheck(einsum_of("ii->i"), {transposed_leaf({3, 3}, 12)});
  expect_gradgradcheck(einsum_of("ii->i"), {strided_leaf({3, 3}, 13)});
}

TEST(EinsumGrad, AMatrixProductByHand) {
  Tensor a = leaf({2, 3}, 14), b = leaf({3, 4}, 15);
  Tensor g = uniform64({2, 4}, 16);
  Tensor c = einsum("ij,jk->ik", {a, b});
  EXPECT_NE(c.grad_fn_name(), "EinsumBackward");  // the parts' nodes, none of its own
  c.backward(g);
  // dA = g B^T, dB = A^T g.
  expect_values(a.grad(), gradtest::values(ops::matmul(g, b.detach().t())));
  expect_values(b.grad(), gradtest::values(ops::matmul(a.detach().t(), g)));
  // A trace's gradient is the identity.
  Tensor m = leaf({3, 3}, 17);
  einsum("ii", {m}).backward();
  expect_values(m.grad(), {1, 0, 0, 0, 1, 0, 0, 0, 1});
}

TEST(EinsumGrad, ErrorsAreTheTensorLayers) {
  expect_error([] { einsum("ij,jk", {leaf({2, 3}, 18)}); }, "einsum: the equation 'ij,jk' has 2 input terms");
}

}  // namespace
}  // namespace kiln::gradtest
