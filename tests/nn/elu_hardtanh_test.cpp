// ELU, Hardtanh and ReLU6, functional and as layers: against PyTorch
// (values and gradients, at and around the bounds and zero, in place too),
// gradcheck and gradgradcheck in float64, the in-place forms equal to the
// out-of-place ones under autograd, their refused cases, printing as torch
// and the option builders.
#include <memory>
#include <sstream>

#include "kiln.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::expect_gradgradcheck;
using gradtest::leaf;
using gradtest::leaf_of;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;
using testing::values_of;

std::string printed(const Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

// Values on both sides of zero and of the bounds -1, 1, 0 and 6, some of
// them exactly on one.
Tensor input_with_bounds() {
  return leaf_of({-7.0, -2.0, -1.0, -1.001, -0.999, -0.3, 0.0, 1e-3, -1e-3, 0.999, 1.0, 1.001, 5.999, 6.0, 6.001, 9.0},
                 {4, 4});
}

OracleCase functional_case(const std::string& python, std::function<Tensor(const Tensor&)> kiln, Tensor x) {
  return {.name = python,
          .inputs = {x},
          .python = "outs = [" + python + "]",
          .kiln = [kiln](const TensorList& in) { return TensorList{kiln(in[0])}; }};
}

// The torch layer applied in place to in0 * 1 (a non-leaf), and Kiln's the same way.
OracleCase inplace_case(const std::string& torch, std::function<Tensor(Tensor&)> kiln_inplace, Tensor x) {
  return {.name = torch + " in place",
          .inputs = {x},
          .python = "m = " + torch + "\nh = in0 * 1.0\nr = m(h)\nassert r is h\nouts = [h]",
          .kiln = [kiln_inplace](const TensorList& in) {
            Tensor h = mul(in[0], 1.0);
            EXPECT_TRUE(kiln_inplace(h).is_same(h));
            return TensorList{h};
          }};
}

TEST(EluHardtanh, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  // Each case its own leaf: the gradients are compared after every case ran.
  auto x = [] { return input_with_bounds(); };
  auto wide = [] { return leaf({3, 5}, 7, -4.0, 4.0); };
  auto elu = std::make_shared<ELU>(ELUOptions().alpha(0.7));
  auto hardtanh = std::make_shared<Hardtanh>(HardtanhOptions().min_val(-2.0).max_val(2.5));
  auto relu6 = std::make_shared<ReLU6>();
  auto elu_inplace = std::make_shared<ELU>(ELUOptions().alpha(1.5).inplace(true));
  auto hardtanh_inplace = std::make_shared<Hardtanh>(-1.0, 1.0, true);
  auto relu6_inplace = std::make_shared<ReLU6>(true);
  std::vector<OracleCase> cases = {
      functional_case("F.elu(in0)", [](const Tensor& t) { return F::elu(t); }, x()),
      functional_case("F.elu(in0, 0.3)", [](const Tensor& t) { return F::elu(t, 0.3); }, x()),
      functional_case("F.elu(in0, 0.0)", [](const Tensor& t) { return F::elu(t, 0.0); }, x()),
      functional_case("F.elu(in0, -0.5)", [](const Tensor& t) { return F::elu(t, -0.5); }, x()),
      functional_case("F.hardtanh(in0)", [](const Tensor& t) { return F::hardtanh(t); }, x()),
      functional_case("F.hardtanh(in0, -0.3, 6.0)", [](const Tensor& t) { return F::hardtanh(t, -0.3, 6.0); }, x()),
      functional_case("F.hardtanh(in0, 1.0, 1.0)", [](const Tensor& t) { return F::hardtanh(t, 1.0, 1.0); }, x()),
      functional_case("F.relu6(in0)", [](const Tensor& t) { return F::relu6(t); }, x()),
      testing::layer_case("nn.ELU(alpha=0.7)", elu, wide()),
      testing::layer_case("nn.Hardtanh(-2.0, 2.5)", hardtanh, wide()),
      testing::layer_case("nn.ReLU6()", relu6, x()),
      inplace_case("nn.ELU(alpha=1.5, inplace=True)", [elu_inplace](Tensor& h) { return (*elu_inplace)(h); }, x()),
      inplace_case("nn.Hardtanh(inplace=True)", [hardtanh_inplace](Tensor& h) { return (*hardtanh_inplace)(h); }, x()),
      inplace_case("nn.ReLU6(inplace=True)", [relu6_inplace](Tensor& h) { return (*relu6_inplace)(h); }, x()),
      inplace_case("lambda t: F.elu(t, 0.0, inplace=True)",
                   [](Tensor& h) { return F::elu(h, F::ELUFuncOptions().alpha(0.0).inplace(true)); }, x()),
      inplace_case("lambda t: F.hardtanh(t, 0.0, 1.0, inplace=True)",
                   [](Tensor& h) { return F::hardtanh(h, F::HardtanhFuncOptions().min_val(0.0).inplace(true)); }, x()),
      inplace_case("lambda t: F.relu6(t, inplace=True)",
                   [](Tensor& h) { return F::relu6(h, F::ReLU6FuncOptions(true)); }, wide()),
      inplace_case("lambda t: F.elu_(t, 0.4)", [](Tensor& h) { return F::elu_(h, 0.4); }, wide()),
  };
  expect_matches_torch(cases);
}

TEST(EluHardtanh, Gradcheck) {
  // Points at least 1e-3 from zero and from the bounds, where the
  // functions have kinks that central differences would straddle.
  Tensor x = leaf_of({-3.0, -1.2, -0.8, -0.4, -1e-3, 1e-3, 0.6, 0.95, 1.05, 2.0, 5.5, 6.5}, {3, 4});
  for (double alpha : {1.0, 0.4, 0.0, 2.0}) {
    auto fn = [alpha](const TensorList& in) { return TensorList{F::elu(in[0], alpha)}; };
    expect_gradcheck(fn, {x});
    expect_gradgradcheck(fn, {x});
    auto in_place = [alpha](const TensorList& in) {
      Tensor h = mul(in[0], 1.0);
      F::elu_(h, alpha);
      return TensorList{h};
    };
    expect_gradcheck(in_place, {x});
    expect_gradgradcheck(in_place, {x});
  }
  auto hardtanh = [](const TensorList& in) { return TensorList{F::hardtanh(in[0], -0.7, 1.0)}; };
  auto relu6_in_place = [](const TensorList& in) {
    Tensor h = mul(in[0], 2.0);
    F::relu6_(h);
    return TensorList{h};
  };
  for (const auto& fn : {autograd::GradcheckFn(hardtanh), autograd::GradcheckFn(relu6_in_place)}) {
    expect_gradcheck(fn, {x});
    expect_gradgradcheck(fn, {x});
  }
  // A transposed input goes through the strided kernels.
  expect_gradcheck(hardtanh, {gradtest::transposed_leaf({3, 4}, 3, -2.0, 2.0)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::elu(in[0], 0.5)}; },
                   {gradtest::transposed_leaf({3, 4}, 4, -2.0, 2.0)});
}

TEST(EluHardtanh, InPlaceEqualsOutOfPlaceUnderAutograd) {
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> out_of_place;
    std::function<Tensor&(Tensor&)> in_place;
    std::string grad_fn;
  };
  const std::vector<Case> cases = {
      {"elu", [](const Tensor& t) { return F::elu(t, 0.6); }, [](Tensor& t) -> Tensor& { return F::elu_(t, 0.6); },
       "EluBackward"},
      {"hardtanh", [](const Tensor& t) { return F::hardtanh(t, -0.5, 0.5); },
       [](Tensor& t) -> Tensor& { return F::hardtanh_(t, -0.5, 0.5); }, "HardtanhBackward"},
      {"relu6", [](const Tensor& t) { return F::relu6(t); }, [](Tensor& t) -> Tensor& { return F::relu6_(t); },
       "HardtanhBackward"},
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      // Through a float64 leaf scaled so that some values land exactly on
      // 0, the bounds and beyond them.
      Tensor a = leaf_of({-3.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 3.0, 6.0, 7.0, 2.0}, {3, 4});
      Tensor b = leaf_of({-3.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 3.0, 6.0, 7.0, 2.0}, {3, 4});
      Tensor u = uniform64({3, 4}, 9);
      Tensor want = c.out_of_place(mul(a, 1.0).to(dtype));
      Tensor h = mul(b, 1.0).to(dtype);
      Tensor& got = c.in_place(h);
      EXPECT_TRUE(got.is_same(h)) << c.name;
      EXPECT_EQ(want.grad_fn_name(), c.grad_fn) << c.name;
      EXPECT_EQ(got.grad_fn_name(), c.grad_fn) << c.name;
      EXPECT_EQ(values_of(got), values_of(want)) << c.name;
      sum(mul(want, u.to(dtype))).backward();
      sum(mul(got, u.to(dtype))).backward();
      // hardtanh's mask is the same from the output, so the gradients are
      // equal; elu's is g (y + alpha) against g alpha e^x, equal to rounding.
      const double tol = c.name != "elu" ? 0.0 : dtype == DType::Float32 ? 1e-6 : 1e-15;
      std::vector<double> ga = values_of(a.grad()), gb = values_of(b.grad());
      for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(ga[i], gb[i], tol) << c.name << " " << dtype << " at " << i;
    }
  }
}

TEST(EluHardtanh, NetworkGradientsUnchangedInPlace) {
  auto make = [](bool inplace) {
    manual_seed(5);
    return std::make_shared<Sequential>(
        std::make_shared<Linear>(5, 8), std::make_shared<ELU>(ELUOptions().alpha(0.8).inplace(inplace)),
        std::make_shared<Linear>(8, 6), std::make_shared<Hardtanh>(HardtanhOptions().max_val(0.5).inplace(inplace)),
        std::make_shared<Linear>(6, 6), std::make_shared<ReLU6>(inplace), std::make_shared<Linear>(6, 2));
  };
  auto plain = make(false), in_place = make(true);
  Tensor x = mul(uniform64({4, 5}, 4), 3.0).to(DType::Float32);
  sum((*plain)(x)).backward();
  sum((*in_place)(x)).backward();
  // Equal to float32 rounding: in place, ELU's derivative is formed from
  // its output (g (y + alpha) rather than g alpha e^x).
  for (const auto& [name, p] : plain->named_parameters()) {
    std::vector<double> want = values_of(p.grad()), got = values_of(in_place->named_parameters().at(name).grad());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << name << " at " << i;
  }
}

TEST(EluHardtanh, RefusedCases) {
  Tensor x = leaf({2, 3}, 5);
  expect_error([&] { ELU(1.0, true)(x); }, "elu_: a leaf tensor that requires grad is being used in an in-place");
  expect_error([&] { Hardtanh(-1.0, 1.0, true)(x); }, "hardtanh_: a leaf tensor that requires grad");
  expect_error([&] { ReLU6(true)(x); }, "relu6_: a leaf tensor that requires grad");
  Tensor h = mul(x, 1.0);
  const std::vector<double> before = values_of(h);
  expect_error([&] { F::elu_(h, -0.5); },
               "elu_: in place with a negative alpha (-0.5) cannot be differentiated from its output; use the "
               "out-of-place elu");
  EXPECT_EQ(values_of(h), before);  // refused before writing
  Tensor v = h.view({3, 2});
  expect_error([&] { F::hardtanh_(v); }, "hardtanh_: in-place operation on a tensor that requires grad and shares");
  expect_error([&] { F::relu6_(v); }, "relu6_: in-place operation on a tensor that requires grad and shares");
  expect_error([&] { F::elu(from_vector<int64_t>({1, 2})); }, "elu: expected a floating tensor, got int64");
  expect_error([&] { F::hardtanh(h, 2.0, 1.0); }, "hardtanh: min_val (2) is greater than max_val (1)");
  // torch.nn.Hardtanh asserts max_val > min_val; F::hardtanh takes equal bounds.
  expect_error([] { Hardtanh(1.0, 1.0); }, "Hardtanh: max_val (1) must be greater than min_val (1)");
  expect_error([] { Hardtanh(HardtanhOptions().min_val(2.0)); },
               "Hardtanh: max_val (1) must be greater than min_val (2)");
  // Without autograd, a negative alpha in place is a plain write.
  Tensor plain = uniform64({2, 3}, 6);
  EXPECT_EQ(values_of(F::elu_(plain, -0.5)), values_of(F::elu(uniform64({2, 3}, 6), -0.5)));
}

TEST(EluHardtanh, PrintsAsTorch) {
  EXPECT_EQ(printed(ELU()), "ELU(alpha=1.0)");
  EXPECT_EQ(printed(ELU(ELUOptions().alpha(0.5).inplace(true))), "ELU(alpha=0.5, inplace=True)");
  EXPECT_EQ(printed(ELU(1e-5)), "ELU(alpha=1e-05)");
  EXPECT_EQ(printed(Hardtanh()), "Hardtanh(min_val=-1.0, max_val=1.0)");
  EXPECT_EQ(printed(Hardtanh(HardtanhOptions().min_val(-2).max_val(3).inplace(true))),
            "Hardtanh(min_val=-2.0, max_val=3.0, inplace=True)");
  EXPECT_EQ(printed(Hardtanh(0.5, 2.25)), "Hardtanh(min_val=0.5, max_val=2.25)");
  EXPECT_EQ(printed(ReLU6()), "ReLU6()");
  EXPECT_EQ(printed(ReLU6(true)), "ReLU6(inplace=True)");
  EXPECT_EQ(printed(ReLU6(ReLU6Options(true))), "ReLU6(inplace=True)");
}

TEST(EluHardtanh, OptionBuilders) {
  EXPECT_EQ(ELUOptions().alpha(), 1.0);
  EXPECT_FALSE(ELUOptions().inplace());
  EXPECT_EQ(HardtanhOptions().min_val(), -1.0);
  EXPECT_EQ(HardtanhOptions().max_val(), 1.0);
  EXPECT_FALSE(HardtanhOptions().inplace());
  EXPECT_FALSE(ReLU6Options().inplace());
  ELU elu(ELUOptions().alpha(0.25).inplace(true));
  EXPECT_EQ(elu.alpha, 0.25);
  EXPECT_TRUE(elu.inplace);
  Hardtanh hardtanh(HardtanhOptions().min_val(-3).max_val(4));
  EXPECT_EQ(hardtanh.min_val, -3.0);
  EXPECT_EQ(hardtanh.max_val, 4.0);
  EXPECT_FALSE(hardtanh.inplace);
  EXPECT_TRUE(ReLU6(ReLU6Options(true)).inplace);

  // The functional builders give the plain forms' values; inplace writes x.
  Tensor x = mul(uniform64({3, 4}, 8), 8.0);
  EXPECT_EQ(values_of(F::elu(x, F::ELUFuncOptions().alpha(0.3))), values_of(F::elu(x, 0.3)));
  EXPECT_EQ(values_of(F::hardtanh(x, F::HardtanhFuncOptions().min_val(-2).max_val(5))),
            values_of(F::hardtanh(x, -2.0, 5.0)));
  EXPECT_EQ(values_of(F::relu6(x, F::ReLU6FuncOptions())), values_of(F::hardtanh(x, 0.0, 6.0)));
  for (int op = 0; op < 3; ++op) {
    Tensor h = x.clone();
    Tensor r = op == 0   ? F::elu(h, F::ELUFuncOptions().inplace(true))
               : op == 1 ? F::hardtanh(h, F::HardtanhFuncOptions().inplace(true))
                         : F::relu6(h, F::ReLU6FuncOptions(true));
    EXPECT_TRUE(r.is_same(h)) << op;
    EXPECT_EQ(values_of(h), values_of(op == 0 ? F::elu(x) : op == 1 ? F::hardtanh(x) : F::relu6(x))) << op;
  }
}

}  // namespace
}  // namespace kiln::nn
