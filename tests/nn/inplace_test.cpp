// LibTorch's inplace options: ReLU, LeakyReLU and Dropout and their
// functional builders write the input and return it (Note [Recorded
// in-place ops] in autograd/function.h). Against PyTorch's inplace=True
// layers (values and gradients), equal to the out-of-place forms (dropout
// on the same draws), a network's gradients unchanged, printing as torch,
// and the refused cases.
#include <memory>

#include "kiln.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;
using testing::values_of;

// The torch layer applied in place to in0 * 1 (a non-leaf), and Kiln's the same way.
OracleCase inplace_case(const std::string& torch, std::function<Tensor(Tensor&)> kiln_inplace, uint64_t seed) {
  return {.name = torch,
          .inputs = {leaf({3, 5}, seed)},
          .python = "m = " + torch + "\nh = in0 * 1.0\nr = m(h)\nassert r is h\nouts = [h]",
          .kiln = [kiln_inplace](const TensorList& in) {
            Tensor h = mul(in[0], 1.0);
            EXPECT_TRUE(kiln_inplace(h).is_same(h));
            return TensorList{h};
          }};
}

TEST(Inplace, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  auto relu = std::make_shared<ReLU>(ReLUOptions().inplace(true));
  auto leaky = std::make_shared<LeakyReLU>(LeakyReLUOptions().negative_slope(0.2).inplace(true));
  std::vector<OracleCase> cases = {
      inplace_case("nn.ReLU(inplace=True)", [relu](Tensor& h) { return (*relu)(h); }, 1),
      inplace_case("nn.LeakyReLU(0.2, inplace=True)", [leaky](Tensor& h) { return (*leaky)(h); }, 2),
      inplace_case("lambda t: F.relu(t, inplace=True)",
                   [](Tensor& h) { return F::relu(h, F::ReLUFuncOptions().inplace(true)); }, 3),
      inplace_case("lambda t: F.leaky_relu(t, 0.1, inplace=True)",
                   [](Tensor& h) { return F::leaky_relu(h, F::LeakyReLUFuncOptions().negative_slope(0.1).inplace(true)); },
                   4),
      inplace_case("lambda t: F.leaky_relu_(t, 0.0)", [](Tensor& h) { return F::leaky_relu_(h, 0.0); }, 5),
  };
  expect_matches_torch(cases);
}

TEST(Inplace, DropoutEqualsOutOfPlace) {
  Tensor a = leaf({4, 6}, 1), b = leaf({4, 6}, 1);
  Tensor u = uniform64({4, 6}, 2);
  Generator g1(7), g2(7);
  Dropout in_place(DropoutOptions(0.4).generator(&g1).inplace(true));
  Dropout out_of_place(DropoutOptions(0.4).generator(&g2));
  Tensor h = mul(a, 1.0);
  Tensor y = in_place(h);
  EXPECT_TRUE(y.is_same(h));
  Tensor want = out_of_place(mul(b, 1.0));
  EXPECT_EQ(values_of(y), values_of(want));
  sum(mul(y, u)).backward();
  sum(mul(want, u)).backward();
  EXPECT_EQ(values_of(a.grad()), values_of(b.grad()));
  // In eval, and through the functional builder in eval, it is the identity.
  in_place.eval();
  Tensor e = mul(a, 1.0);
  EXPECT_EQ(values_of(in_place(e)), values_of(e));
  Tensor f = mul(a, 1.0);
  Tensor r = F::dropout(f, F::DropoutFuncOptions().p(0.5).training(true).inplace(true));
  EXPECT_TRUE(r.is_same(f));
  EXPECT_EQ(r.grad_fn_name(), "DropoutBackward");
}

TEST(Inplace, NetworkGradientsUnchanged) {
  manual_seed(3);
  auto make = [](bool inplace) {
    manual_seed(3);
    return std::make_shared<Sequential>(std::make_shared<Linear>(5, 8), std::make_shared<ReLU>(inplace),
                                        std::make_shared<Linear>(8, 6),
                                        std::make_shared<LeakyReLU>(LeakyReLUOptions().inplace(inplace)),
                                        std::make_shared<Linear>(6, 2));
  };
  auto plain = make(false), in_place = make(true);
  Tensor x = uniform64({4, 5}, 4).to(DType::Float32);
  sum((*plain)(x)).backward();
  sum((*in_place)(x)).backward();
  for (const auto& [name, p] : plain->named_parameters()) {
    EXPECT_EQ(values_of(p.grad()), values_of(in_place->named_parameters().at(name).grad())) << name;
  }
}

TEST(Inplace, PrintsAsTorch) {
  EXPECT_EQ(ReLU().extra_repr(), "");
  EXPECT_EQ(ReLU(ReLUOptions().inplace(true)).extra_repr(), "inplace=True");
  EXPECT_EQ(LeakyReLU(0.2, true).extra_repr(), "negative_slope=0.2, inplace=True");
  EXPECT_EQ(LeakyReLU().extra_repr(), "negative_slope=0.01");
  EXPECT_EQ(Dropout(DropoutOptions(0.2).inplace(true)).extra_repr(), "p=0.2, inplace=True");
  EXPECT_EQ(Dropout(0.2).extra_repr(), "p=0.2, inplace=False");
}

TEST(Inplace, RefusedCases) {
  Tensor x = leaf({2, 3}, 5);
  ReLU relu(true);
  expect_error([&] { relu(x); }, "relu_: a leaf tensor that requires grad is being used in an in-place operation");
  Tensor h = mul(x, 1.0);
  LeakyReLU negative(-0.1, true);
  expect_error([&] { negative(h); }, "leaky_relu_: in place with a negative slope (-0.1) cannot be differentiated");
  Tensor v = h.view({3, 2});
  Dropout drop(DropoutOptions(0.5).inplace(true));
  expect_error([&] { drop(v); }, "dropout_: in-place operation on a tensor that requires grad and shares its memory");
  // Without autograd, any of them is a plain write.
  Tensor plain = uniform64({2, 3}, 6);
  EXPECT_EQ(values_of(negative(plain)), values_of(F::leaky_relu(uniform64({2, 3}, 6), -0.1)));
}

}  // namespace
}  // namespace kiln::nn
