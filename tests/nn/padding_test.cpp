// F::pad and the padding layers: every mode by hand, against PyTorch
// (forward and backward, float64 and float32, non-contiguous inputs, the
// layers with their printing), gradcheck, other dtypes, empty inputs and
// every error.
#include "nn/padding.h"

#include <sstream>

#include "nn/functional_composite.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using F::PadMode;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;

Tensor row(const std::vector<double>& values) {
  return from_vector<double>(values, {1, 1, static_cast<int64_t>(values.size())});
}

TEST(Pad, EachModeByHand) {
  Tensor x = row({0, 1, 2, 3});
  EXPECT_EQ(testing::values_of(F::pad(x, {2, 1}, PadMode::Reflect)), (std::vector<double>{2, 1, 0, 1, 2, 3, 2}));
  EXPECT_EQ(testing::values_of(F::pad(x, {2, 1}, PadMode::Replicate)), (std::vector<double>{0, 0, 0, 1, 2, 3, 3}));
  EXPECT_EQ(testing::values_of(F::pad(x, {2, 1}, PadMode::Circular)), (std::vector<double>{2, 3, 0, 1, 2, 3, 0}));
  EXPECT_EQ(testing::values_of(F::pad(x, {2, 1})), (std::vector<double>{0, 0, 0, 1, 2, 3, 0}));
  EXPECT_EQ(testing::values_of(F::pad(x, {2, -1}, PadMode::Constant, 9)), (std::vector<double>{9, 9, 0, 1, 2}));
  // A negative pad crops; reflect and replicate still mirror about the
  // original edges, circular wraps around what is kept (as torch).
  EXPECT_EQ(testing::values_of(F::pad(x, {-1, 2}, PadMode::Reflect)), (std::vector<double>{1, 2, 3, 2, 1}));
  EXPECT_EQ(testing::values_of(F::pad(x, {-1, 2}, PadMode::Replicate)), (std::vector<double>{1, 2, 3, 3, 3}));
  EXPECT_EQ(testing::values_of(F::pad(x, {-1, 2}, PadMode::Circular)), (std::vector<double>{1, 2, 3, 1, 2}));
  // Unbatched circular padding, which torch 2.x accepts (1.13 did not).
  EXPECT_EQ(testing::values_of(F::pad(x.squeeze(0), {1, 1}, PadMode::Circular)),
            (std::vector<double>{3, 0, 1, 2, 3, 0}));
  // Two dims: the last pair pads the rows, the first the columns.
  Tensor square = from_vector<double>({1, 2, 3, 4}, {1, 2, 2});
  EXPECT_EQ(testing::values_of(F::pad(square, {1, 0, 0, 1}, PadMode::Replicate)),
            (std::vector<double>{1, 1, 2, 3, 3, 4, 3, 3, 4}));
  EXPECT_EQ(F::pad(uniform64({2, 3, 4, 5}, 1), {1, 2, 0, 1, 3, 0}).shape(), (Shape{2, 6, 5, 8}));
}

TEST(Pad, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  struct Case {
    std::string name;
    Tensor x;
    std::vector<int64_t> pad;
    PadMode mode;
    std::optional<double> value;
    std::string python;
  };
  const std::vector<Case> cases_in = {
      {"constant, 3 of 4 dims",
       leaf({2, 3, 4, 5}, 1),
       {1, 2, 0, 1, 3, 0},
       PadMode::Constant,
       0.5,
       "F.pad(in0, (1, 2, 0, 1, 3, 0), value=0.5)"},
      {"constant, crop and pad",
       leaf({2, 3, 5}, 2),
       {-1, 2, 1, -2},
       PadMode::Constant,
       std::nullopt,
       "F.pad(in0, (-1, 2, 1, -2))"},
      {"constant, only crops", leaf({3, 6}, 3), {-1, -2}, PadMode::Constant, 4.0, "F.pad(in0, (-1, -2), value=4.0)"},
      {"constant, 1-d", leaf({5}, 4), {2, 3}, PadMode::Constant, -1.0, "F.pad(in0, (2, 3), value=-1.0)"},
      {"constant, every dim",
       leaf({2, 3}, 5),
       {1, 0, 2, 1},
       PadMode::Constant,
       std::nullopt,
       "F.pad(in0, (1, 0, 2, 1))"},
      {"reflect 1-d unbatched",
       leaf({3, 5}, 6),
       {2, 4},
       PadMode::Reflect,
       std::nullopt,
       "F.pad(in0, (2, 4), mode='reflect')"},
      {"reflect 1-d", leaf({2, 3, 5}, 7), {4, 1}, PadMode::Reflect, std::nullopt, "F.pad(in0, (4, 1), mode='reflect')"},
      {"reflect 2-d",
       leaf({2, 2, 4, 5}, 8),
       {1, 3, 3, 0},
       PadMode::Reflect,
       std::nullopt,
       "F.pad(in0, (1, 3, 3, 0), mode='reflect')"},
      {"reflect 2-d unbatched",
       leaf({2, 4, 5}, 9),
       {1, 2, 3, 1},
       PadMode::Reflect,
       std::nullopt,
       "F.pad(in0, (1, 2, 3, 1), mode='reflect')"},
      {"reflect 3-d",
       leaf({1, 2, 3, 4, 5}, 10),
       {1, 2, 2, 1, 1, 2},
       PadMode::Reflect,
       std::nullopt,
       "F.pad(in0, (1, 2, 2, 1, 1, 2), mode='reflect')"},
      {"reflect, crop and pad",
       leaf({2, 2, 6}, 11),
       {-2, 3},
       PadMode::Reflect,
       std::nullopt,
       "F.pad(in0, (-2, 3), mode='reflect')"},
      {"replicate 1-d",
       leaf({2, 3, 4}, 12),
       {3, 5},
       PadMode::Replicate,
       std::nullopt,
       "F.pad(in0, (3, 5), mode='replicate')"},
      {"replicate 2-d",
       leaf({2, 2, 3, 4}, 13),
       {2, 0, 1, 3},
       PadMode::Replicate,
       std::nullopt,
       "F.pad(in0, (2, 0, 1, 3), mode='replicate')"},
      {"replicate 3-d unbatched",
       leaf({2, 3, 2, 4}, 14),
       {1, 1, 2, 0, 1, 3},
       PadMode::Replicate,
       std::nullopt,
       "F.pad(in0, (1, 1, 2, 0, 1, 3), mode='replicate')"},
      {"replicate 3-d",
       leaf({2, 1, 2, 3, 3}, 15),
       {0, 2, 1, 1, 2, 0},
       PadMode::Replicate,
       std::nullopt,
       "F.pad(in0, (0, 2, 1, 1, 2, 0), mode='replicate')"},
      {"replicate, crop and pad",
       leaf({1, 2, 5}, 16),
       {-2, 3},
       PadMode::Replicate,
       std::nullopt,
       "F.pad(in0, (-2, 3), mode='replicate')"},
      {"circular 1-d",
       leaf({2, 3, 5}, 17),
       {2, 3},
       PadMode::Circular,
       std::nullopt,
       "F.pad(in0, (2, 3), mode='circular')"},
      {"circular 2-d",
       leaf({2, 2, 3, 4}, 18),
       {1, 2, 3, 0},
       PadMode::Circular,
       std::nullopt,
       "F.pad(in0, (1, 2, 3, 0), mode='circular')"},
      {"circular 3-d",
       leaf({1, 2, 2, 3, 4}, 19),
       {1, 1, 2, 0, 1, 2},
       PadMode::Circular,
       std::nullopt,
       "F.pad(in0, (1, 1, 2, 0, 1, 2), mode='circular')"},
      {"circular, crop and pad",
       leaf({2, 1, 5}, 20),
       {-1, 2},
       PadMode::Circular,
       std::nullopt,
       "F.pad(in0, (-1, 2), mode='circular')"},
      {"reflect, transposed input",
       gradtest::transposed_leaf({2, 3, 4, 5}, 21),
       {2, 1, 1, 3},
       PadMode::Reflect,
       std::nullopt,
       "F.pad(in0, (2, 1, 1, 3), mode='reflect')"},
      {"constant, strided input",
       gradtest::strided_leaf({3, 2, 4}, 22),
       {1, 1, 0, 2},
       PadMode::Constant,
       2.0,
       "F.pad(in0, (1, 1, 0, 2), value=2.0)"},
      {"circular, strided input",
       gradtest::strided_leaf({3, 2, 4}, 23),
       {2, 1},
       PadMode::Circular,
       std::nullopt,
       "F.pad(in0, (2, 1), mode='circular')"},
  };
  std::vector<OracleCase> cases;
  for (const Case& c : cases_in) {
    cases.push_back(
        {.name = c.name, .inputs = {c.x}, .python = "outs = [" + c.python + "]", .kiln = [c](const TensorList& in) {
           return TensorList{F::pad(in[0], c.pad, c.mode, c.value)};
         }});
  }
  // float32 in both: the same values (padding copies), the gradients
  // summed in float32 in another order.
  cases.push_back({.name = "reflect 2-d, float32",
                   .inputs = {uniform64({2, 3, 4, 4}, 24).to(DType::Float32).requires_grad_()},
                   .python = "outs = [F.pad(in0.float(), (3, 1, 2, 2), mode='reflect')]",
                   .kiln =
                       [](const TensorList& in) {
                         Tensor y = F::pad(in[0], {3, 1, 2, 2}, PadMode::Reflect);
                         EXPECT_EQ(y.dtype(), DType::Float32);
                         return TensorList{y};
                       },
                   .rtol = 1e-5,
                   .atol = 1e-6});
  cases.push_back({.name = "replicate 1-d, float32",
                   .inputs = {uniform64({2, 3, 4}, 25).to(DType::Float32).requires_grad_()},
                   .python = "outs = [F.pad(in0.float(), (5, 2), mode='replicate')]",
                   .kiln =
                       [](const TensorList& in) {
                         return TensorList{F::pad(in[0], {5, 2}, PadMode::Replicate)};
                       },
                   .rtol = 1e-5,
                   .atol = 1e-6});
  expect_matches_torch(cases);
}

TEST(Pad, Gradcheck) {
  for (PadMode mode : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    expect_gradcheck(
        [mode](const TensorList& in) {
          return TensorList{F::pad(in[0], {2, 1, 1, 2}, mode)};
        },
        {leaf({2, 3, 4}, 1)});
    expect_gradcheck(
        [mode](const TensorList& in) {
          return TensorList{F::pad(in[0], {-1, 2}, mode)};
        },
        {leaf({1, 2, 4}, 2)});
  }
  expect_gradcheck(
      [](const TensorList& in) {
        return TensorList{F::pad(in[0], {1, -1, 2, 0, 0, 1}, PadMode::Constant, 3)};
      },
      {leaf({2, 3, 3}, 3)});
  // The constant node's backward is itself a constant pad, and index_select's a scatter: both differentiate again.
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) {
        Tensor y = F::pad(in[0], {2, -1, 0, 1});
        return TensorList{kiln::mul(y, y)};
      },
      {leaf({2, 3, 3}, 4)});
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) {
        Tensor y = F::pad(in[0], {2, 1}, PadMode::Reflect);
        return TensorList{kiln::mul(y, y)};
      },
      {leaf({2, 4}, 5)});
}

TEST(Pad, OtherDtypesAndEmptyInputs) {
  Tensor ints = from_vector<int64_t>({1, 2, 3}, {1, 3});
  Tensor filled = F::pad(ints, {1, 2}, PadMode::Constant, 7);
  EXPECT_EQ(filled.dtype(), DType::Int64);
  EXPECT_EQ(testing::values_of(filled), (std::vector<double>{7, 1, 2, 3, 7, 7}));
  EXPECT_EQ(testing::values_of(F::pad(ints, {2, 1}, PadMode::Reflect)), (std::vector<double>{3, 2, 1, 2, 3, 2}));
  Tensor half = uniform64({2, 5}, 3).to(DType::Float16);
  EXPECT_EQ(testing::values_of(F::pad(half, {2, 3}, PadMode::Reflect)),
            testing::values_of(F::pad(half.to(DType::Float64), {2, 3}, PadMode::Reflect)));
  // A batch of no samples pads to no samples.
  EXPECT_EQ(F::pad(uniform64({0, 3, 4}, 1), {1, 2}, PadMode::Reflect).shape(), (Shape{0, 3, 7}));
  EXPECT_EQ(F::pad(uniform64({0, 3, 4}, 1), {1, 2}, PadMode::Constant).shape(), (Shape{0, 3, 7}));
  // Only crops may leave an empty dim; circular may pad an empty channel dim.
  EXPECT_EQ(F::pad(uniform64({2, 4}, 1), {-2, -2}).shape(), (Shape{2, 0}));
  EXPECT_EQ(F::pad(uniform64({3, 0, 4}, 1), {1, 1}, PadMode::Circular).shape(), (Shape{3, 0, 6}));
  // Replicate and reflect may empty one padded dim if another keeps elements.
  EXPECT_EQ(F::pad(uniform64({1, 3, 4}, 1), {-2, -2, 1, 1}, PadMode::Replicate).shape(), (Shape{1, 5, 0}));
  // The result never aliases the input, even with nothing to pad.
  Tensor x = uniform64({2, 3, 4}, 2);
  for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    Tensor y = F::pad(x, {0, 0}, mode);
    EXPECT_EQ(testing::values_of(y), testing::values_of(x));
    EXPECT_NE(y.data_ptr(), x.data_ptr());
  }
}

TEST(Pad, Errors) {
  Tensor x = uniform64({1, 2, 4}, 1);
  expect_error([&] { F::pad(x, {1, 2, 3}); }, "pad: the padding must come in (before, after) pairs, got 3 values");
  expect_error(
      [&] {
        F::pad(x, {1, 1, 1, 1, 1, 1, 1, 1});
      },
      "pad: 8 pad values pad 4 dims, more than the 3 of input of shape [1, 2, 4]");
  expect_error([&] { F::pad(x, {-5, 1}); }, "pad: padding (-5, 1) of dim 2 removes more than its 4 elements");
  expect_error([&] { F::pad(x, {-2, -3}); }, "pad: padding (-2, -3) of dim 2 removes more than its 4 elements");
  expect_error(
      [&] {
        F::pad(x, {-2, -2, 1, 0});
      },
      "pad: padding (-2, -2) of dim 2 of input of shape [1, 2, 4] leaves 0 elements; with positive padding "
      "elsewhere the output size must be positive");
  expect_error([&] { F::pad(x, {1, 1}, PadMode::Reflect, 2.0); }, "pad: reflect padding takes no value, got 2");
  expect_error(
      [&] {
        F::pad(x, {4, 0}, PadMode::Reflect);
      },
      "pad: reflect padding (4, 0) of dim 2 must be less than its size 4 (input of shape [1, 2, 4])");
  expect_error(
      [&] {
        F::pad(x, {0, 2, 1, 2}, PadMode::Reflect);
      },
      "pad: reflect padding (1, 2) of dim 1 must be less than its size 2");
  expect_error(
      [&] {
        F::pad(uniform64({4}, 1), {1, 1}, PadMode::Replicate);
      },
      "pad: replicate padding of 1 dims (2 pad values) needs a 2-d or 3-d (batched) input, got input of "
      "shape [4]");
  expect_error(
      [&] {
        F::pad(uniform64({1, 1, 2, 3, 4}, 1), {1, 1, 1, 1}, PadMode::Reflect);
      },
      "pad: reflect padding of 2 dims (4 pad values) needs a 3-d or 4-d (batched) input, got input of "
      "shape [1, 1, 2, 3, 4]");
  expect_error(
      [&] {
        F::pad(uniform64({1, 1, 1, 2, 3, 4}, 1), {1, 1, 1, 1, 1, 1, 1, 1}, PadMode::Circular);
      },
      "pad: circular padding takes 2, 4 or 6 pad values (the last 1, 2 or 3 dims), got 8");
  expect_error([&] { F::pad(x, {}, PadMode::Replicate); }, "pad: replicate padding takes 2, 4 or 6 pad values");
  expect_error(
      [&] {
        F::pad(uniform64({3, 0, 4}, 1), {1, 1}, PadMode::Replicate);
      },
      "pad: replicate padding needs a 2-d or 3-d (batched) input with every dim but the batch non-empty, "
      "got input of shape [3, 0, 4]");
  expect_error(
      [&] {
        F::pad(uniform64({0, 4}, 1), {1, 1}, PadMode::Reflect);
      },
      "every dim but the batch non-empty, got input of shape [0, 4]");
  expect_error(
      [&] {
        F::pad(x, {5, 1}, PadMode::Circular);
      },
      "pad: circular padding (5, 1) of dim 2 of size 4 wraps around the 4 elements it keeps more than once");
  // torch refuses this as an overlapping copy: the 2 elements kept cannot fill 3.
  expect_error(
      [&] {
        F::pad(x, {-2, 3}, PadMode::Circular);
      },
      "pad: circular padding (-2, 3) of dim 2 of size 4 wraps around the 2 elements it keeps more than once");
  expect_error(
      [&] {
        F::pad(x, {-2, -2}, PadMode::Replicate);
      },
      "pad: replicate padding [-2, -2] leaves every padded dim of input of shape [1, 2, 4] empty");
  expect_error(
      [&] {
        F::pad(uniform64({1, 3, 4}, 1), {-2, -3, 1, 1}, PadMode::Replicate);
      },
      "pad: replicate padding (-2, -3) of dim 2 of size 4 gives a negative size -1");
  expect_error([&] { F::pad(Tensor(), {1, 1}); }, "pad: input is undefined");
}

TEST(PaddingLayers, MatchTorch) {
  SKIP_WITHOUT_TORCH();
  struct Case {
    std::shared_ptr<Module> module;
    std::string torch;
    Shape shape;
  };
  const std::vector<Case> layers = {
      {std::make_shared<ZeroPad2d>(std::vector<int64_t>{1, 0, 2, 3}), "nn.ZeroPad2d((1, 0, 2, 3))", {2, 3, 4, 4}},
      {std::make_shared<ConstantPad1d>(2, 3.5), "nn.ConstantPad1d(2, 3.5)", {2, 3, 4}},
      {std::make_shared<ConstantPad2d>(std::vector<int64_t>{1, -1, 0, 2}, -1.0),
       "nn.ConstantPad2d((1, -1, 0, 2), -1.0)",
       {3, 4, 5}},
      {std::make_shared<ConstantPad3d>(1, 0.25), "nn.ConstantPad3d(1, 0.25)", {1, 2, 2, 3, 2}},
      {std::make_shared<ReflectionPad1d>(std::vector<int64_t>{3, 1}), "nn.ReflectionPad1d((3, 1))", {2, 3, 5}},
      {std::make_shared<ReflectionPad2d>(2), "nn.ReflectionPad2d(2)", {2, 2, 3, 4}},
      {std::make_shared<ReflectionPad3d>(std::vector<int64_t>{1, 2, 0, 1, 2, 1}),
       "nn.ReflectionPad3d((1, 2, 0, 1, 2, 1))",
       {1, 2, 3, 3, 4}},
      {std::make_shared<ReplicationPad1d>(std::vector<int64_t>{0, 4}), "nn.ReplicationPad1d((0, 4))", {3, 5}},
      {std::make_shared<ReplicationPad2d>(std::vector<int64_t>{2, 1, 0, 3}),
       "nn.ReplicationPad2d((2, 1, 0, 3))",
       {2, 1, 3, 3}},
      {std::make_shared<ReplicationPad3d>(1), "nn.ReplicationPad3d(1)", {2, 1, 2, 3, 2}},
  };
  std::vector<OracleCase> cases;
  for (size_t i = 0; i < layers.size(); ++i) {
    cases.push_back({.name = layers[i].torch,
                     .module = layers[i].module,
                     .torch_module = layers[i].torch,
                     .inputs = {leaf(layers[i].shape, 30 + i)},
                     .python = "outs = [m(in0)]"});
  }
  expect_matches_torch(cases);
}

TEST(PaddingLayers, PrintAsTorch) {
  // The strings torch 2.x prints for the same layers.
  EXPECT_EQ(ZeroPad2d(std::vector<int64_t>{1, 1, 2, 0}).extra_repr(), "(1, 1, 2, 0)");
  EXPECT_EQ(ConstantPad1d(2, 3.5).extra_repr(), "padding=(2, 2), value=3.5");
  EXPECT_EQ(ConstantPad3d(1, 0.0).extra_repr(), "padding=(1, 1, 1, 1, 1, 1), value=0.0");
  EXPECT_EQ(ConstantPad2d(std::vector<int64_t>{1, 2, 3, 4}, -1e-5).extra_repr(), "padding=(1, 2, 3, 4), value=-1e-05");
  EXPECT_EQ(ReflectionPad1d(std::vector<int64_t>{1, 2}).extra_repr(), "(1, 2)");
  EXPECT_EQ(ReflectionPad2d(2).extra_repr(), "(2, 2, 2, 2)");
  EXPECT_EQ(ReplicationPad3d(1).extra_repr(), "(1, 1, 1, 1, 1, 1)");
  std::ostringstream os;
  os << ReplicationPad2d(std::vector<int64_t>{0, 1, 2, 3});
  EXPECT_EQ(os.str(), "ReplicationPad2d((0, 1, 2, 3))");
  std::ostringstream zero;
  zero << ZeroPad2d(1);
  EXPECT_EQ(zero.str(), "ZeroPad2d((1, 1, 1, 1))");
  ReflectionPad1d pad(1);
  EXPECT_TRUE(pad.state_dict().empty());
  EXPECT_EQ(pad.mode, PadMode::Reflect);
}

TEST(PaddingLayers, Errors) {
  expect_error(
      [] {
        ReflectionPad2d(std::vector<int64_t>{1, 2});
      },
      "ReflectionPad2d: expected one padding for every side or 4 paddings (last dim first: left, right, top, "
      "bottom), got 2: [1, 2]");
  expect_error(
      [] {
        ConstantPad1d(std::vector<int64_t>{1, 2, 3}, 0.0);
      },
      "ConstantPad1d: expected one padding for every side or 2 paddings (last dim first: left, right), got 3");
  expect_error([] { ZeroPad2d(std::vector<int64_t>{}); }, "ZeroPad2d: expected one padding for every side or 4");
  // Input errors are F::pad's.
  ReflectionPad1d pad(3);
  expect_error(
      [&] {
        pad(uniform64({1, 2, 3}, 1));
      },
      "pad: reflect padding (3, 3) of dim 2 must be less than its size 3");
  ReplicationPad2d rep(1);
  expect_error([&] { rep(uniform64({2, 3}, 1)); }, "needs a 3-d or 4-d (batched) input, got input of shape [2, 3]");
}

}  // namespace
}  // namespace kiln::nn
