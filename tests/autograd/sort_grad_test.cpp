// Gradients of sort: gradcheck and gradgradcheck in float64 along every dim
// and in both orders (distinct values, so small perturbations keep the
// order), the gradient of tied and NaN entries by hand, and argsort's
// indices, which carry none.
#include <limits>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

TEST(SortGrad, Values) {
  for (bool descending : {false, true}) {
    for (int64_t dim : {0, 1, -1}) {
      SCOPED_TRACE(testing::Message() << (descending ? "descending" : "ascending") << " dim " << dim);
      autograd::GradcheckFn fn = [=](const TensorList& in) { return TensorList{sort(in[0], dim, descending).values}; };
      expect_gradcheck(fn, {leaf({3, 4, 5}, 1)});
      expect_gradcheck(fn, {transposed_leaf({4, 3}, 2)});
      expect_gradgradcheck(fn, {leaf({3, 4}, 3)});
    }
  }
  expect_gradcheck([](const TensorList& in) { return TensorList{sort(in[0]).values}; }, {leaf({}, 4)});
}

TEST(SortGrad, EachValueSendsItsGradientToWhereItCameFrom) {
  // Ties and NaN: sorted stably, [1, 3, 3, nan, nan] from indices [2, 0, 3, 1, 4].
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = leaf_of({3, nan, 1, 3, nan}, {5});
  ValuesIndices s = sort(x);
  EXPECT_EQ(s.values.grad_fn_name(), "SortBackward");
  EXPECT_FALSE(s.indices.requires_grad());
  s.values.backward(from_vector<double>({10, 20, 30, 40, 50}));
  expect_values(x.grad(), {20, 40, 10, 30, 50});
  // An empty dim gives an empty gradient.
  Tensor e = leaf({2, 0}, 5);
  sum(sort(e, 1).values).backward();
  EXPECT_EQ(e.grad().shape(), (Shape{2, 0}));
}

TEST(SortGrad, ArgsortCarriesNoGradient) {
  Tensor x = leaf({4}, 6);
  Tensor i = argsort(x, 0, /*descending=*/true);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_EQ(i.dtype(), DType::Int64);
}

}  // namespace
}  // namespace kiln::gradtest
