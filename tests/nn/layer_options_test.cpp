// The layers' option builders (Note [Option builders] in tensor/arg.h), as
// LibTorch's: the required arguments are constructor arguments, the rest
// chained setters; each builder sets every field, and the layer built from
// it is the layer built from the same positional arguments (the same
// parameters and buffers under the same names, the same printing, the same
// forward), with the same errors.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using testing::expect_error;
using testing::values_of;

// `a` and `b` have the same state dict (keys, shapes, values) and print the
// same; `inputs` give the same outputs through both.
void expect_same_layer(Module& a, Module& b, const TensorList& inputs) {
  const TensorDict da = a.state_dict(), db = b.state_dict();
  ASSERT_EQ(da.keys(), db.keys());
  for (const std::string& key : da.keys()) {
    SCOPED_TRACE(key);
    EXPECT_EQ(da.at(key).shape(), db.at(key).shape());
    EXPECT_EQ(values_of(da.at(key)), values_of(db.at(key)));
  }
  EXPECT_EQ(a.extra_repr(), b.extra_repr());
  const TensorList ya = a(inputs), yb = b(inputs);
  ASSERT_EQ(ya.size(), yb.size());
  for (size_t i = 0; i < ya.size(); ++i) {
    EXPECT_EQ(ya[i].shape(), yb[i].shape()) << "output " << i;
    EXPECT_EQ(values_of(ya[i]), values_of(yb[i])) << "output " << i;
  }
}

// Builds both layers from the same seed, so that their draws agree.
template <class M, class A, class B>
void check_same(const A& make_a, const B& make_b, const TensorList& inputs) {
  manual_seed(3);
  std::shared_ptr<M> a = make_a();
  manual_seed(3);
  std::shared_ptr<M> b = make_b();
  expect_same_layer(*a, *b, inputs);
}

TEST(LayerOptions, Linear) {
  const LinearOptions o = LinearOptions(4, 3).bias(false);
  EXPECT_EQ(o.in_features(), 4);
  EXPECT_EQ(o.out_features(), 3);
  EXPECT_FALSE(o.bias());
  EXPECT_TRUE(LinearOptions(4, 3).bias());
  const Tensor x = randn({2, 4});
  check_same<Linear>([&] { return std::make_shared<Linear>(o); }, [] { return std::make_shared<Linear>(4, 3, false); },
                     {x});
  check_same<Linear>([] { return std::make_shared<Linear>(LinearOptions(4, 3)); },
                     [] { return std::make_shared<Linear>(4, 3); }, {x});
  expect_error([] { Linear(LinearOptions(-1, 3)); }, "Linear: in_features and out_features must be >= 0");
}

TEST(LayerOptions, Conv2d) {
  const Conv2dOptions o = Conv2dOptions(4, 6, {3, 2}).stride(2).padding({1, 0}).dilation({1, 2}).groups(2).bias(false);
  EXPECT_EQ(o.in_channels(), 4);
  EXPECT_EQ(o.out_channels(), 6);
  EXPECT_EQ(o.kernel_size().h, 3);
  EXPECT_EQ(o.kernel_size().w, 2);
  EXPECT_EQ(o.stride().h, 2);
  EXPECT_EQ(o.stride().w, 2);
  EXPECT_EQ(o.padding().size().h, 1);
  EXPECT_EQ(o.padding().size().w, 0);
  EXPECT_EQ(o.dilation().w, 2);
  EXPECT_EQ(o.groups(), 2);
  EXPECT_FALSE(o.bias());
  const Conv2dOptions d(3, 6, 5);
  EXPECT_EQ(d.stride().h, 1);
  EXPECT_EQ(d.padding().size().w, 0);
  EXPECT_EQ(d.dilation().h, 1);
  EXPECT_EQ(d.groups(), 1);
  EXPECT_TRUE(d.bias());
  const Tensor x = randn({2, 4, 9, 8});
  check_same<Conv2d>(
      [&] { return std::make_shared<Conv2d>(o); },
      [] { return std::make_shared<Conv2d>(4, 6, Size2d(3, 2), 2, Size2d(1, 0), Size2d(1, 2), 2, false); }, {x});
  check_same<Conv2d>([] { return std::make_shared<Conv2d>(Conv2dOptions(4, 6, 3)); },
                     [] { return std::make_shared<Conv2d>(4, 6, 3); }, {x});
  expect_error([] { Conv2d(Conv2dOptions(3, 6, 5).groups(2)); },
               "Conv2d: in_channels (3) must be divisible by groups (2)");
}

TEST(LayerOptions, Conv1d) {
  const Conv1dOptions o = Conv1dOptions(4, 8, 3).stride(2).padding(1).dilation(2).groups(4).bias(false);
  EXPECT_EQ(o.in_channels(), 4);
  EXPECT_EQ(o.out_channels(), 8);
  EXPECT_EQ(o.kernel_size(), 3);
  EXPECT_EQ(o.stride(), 2);
  EXPECT_EQ(o.padding(), 1);
  EXPECT_EQ(o.dilation(), 2);
  EXPECT_EQ(o.groups(), 4);
  EXPECT_FALSE(o.bias());
  const Tensor x = randn({2, 4, 11});
  check_same<Conv1d>([&] { return std::make_shared<Conv1d>(o); },
                     [] { return std::make_shared<Conv1d>(4, 8, 3, 2, 1, 2, 4, false); }, {x});
  expect_error([] { Conv1d(Conv1dOptions(4, 6, 3).groups(4)); },
               "Conv1d: out_channels (6) must be divisible by groups (4)");
}

TEST(LayerOptions, PaddingMode) {
  EXPECT_EQ(Conv2dOptions(3, 6, 5).padding_mode(), PaddingMode::Zeros);
  EXPECT_EQ(Conv1dOptions(3, 6, 5).padding_mode(), PaddingMode::Zeros);
  const Conv2dOptions o = Conv2dOptions(2, 4, 3).padding({1, 2}).padding_mode(PaddingMode::Circular);
  EXPECT_EQ(o.padding_mode(), PaddingMode::Circular);
  const Tensor x = randn({2, 2, 5, 6});
  check_same<Conv2d>(
      [&] { return std::make_shared<Conv2d>(o); },
      [] { return std::make_shared<Conv2d>(2, 4, 3, 1, Size2d(1, 2), 1, 1, true, PaddingMode::Circular); }, {x});
  const Tensor seq = randn({2, 2, 7});
  check_same<Conv1d>(
      [] { return std::make_shared<Conv1d>(Conv1dOptions(2, 4, 3).padding(2).padding_mode(PaddingMode::Reflect)); },
      [] { return std::make_shared<Conv1d>(2, 4, 3, 1, 2, 1, 1, true, PaddingMode::Reflect); }, {seq});
}

TEST(LayerOptions, ConvTranspose2d) {
  const ConvTranspose2dOptions o = ConvTranspose2dOptions(4, 6, {3, 2})
                                       .stride(2)
                                       .padding({1, 0})
                                       .output_padding({1, 0})
                                       .groups(2)
                                       .bias(false)
                                       .dilation({1, 2});
  EXPECT_EQ(o.in_channels(), 4);
  EXPECT_EQ(o.out_channels(), 6);
  EXPECT_EQ(o.kernel_size().h, 3);
  EXPECT_EQ(o.kernel_size().w, 2);
  EXPECT_EQ(o.stride().w, 2);
  EXPECT_EQ(o.padding().h, 1);
  EXPECT_EQ(o.output_padding().h, 1);
  EXPECT_EQ(o.output_padding().w, 0);
  EXPECT_EQ(o.groups(), 2);
  EXPECT_FALSE(o.bias());
  EXPECT_EQ(o.dilation().w, 2);
  const ConvTranspose2dOptions d(3, 6, 4);
  EXPECT_EQ(d.stride().h, 1);
  EXPECT_EQ(d.padding().w, 0);
  EXPECT_EQ(d.output_padding().h, 0);
  EXPECT_EQ(d.groups(), 1);
  EXPECT_TRUE(d.bias());
  EXPECT_EQ(d.dilation().h, 1);
  const Tensor x = randn({2, 4, 5, 4});
  check_same<ConvTranspose2d>([&] { return std::make_shared<ConvTranspose2d>(o); },
                              [] {
                                return std::make_shared<ConvTranspose2d>(4, 6, Size2d(3, 2), 2, Size2d(1, 0),
                                                                         Size2d(1, 0), 2, false, Size2d(1, 2));
                              },
                              {x});
  check_same<ConvTranspose2d>([] { return std::make_shared<ConvTranspose2d>(ConvTranspose2dOptions(4, 6, 3)); },
                              [] { return std::make_shared<ConvTranspose2d>(4, 6, 3); }, {x});
  expect_error([] { ConvTranspose2d(ConvTranspose2dOptions(4, 6, 3).stride(2).output_padding(2)); },
               "ConvTranspose2d: output_padding (2, 2) must be smaller than either stride (2, 2) or dilation (1, 1)");
}

TEST(LayerOptions, InstanceNorm) {
  const InstanceNorm2dOptions o =
      InstanceNorm2dOptions(3).eps(1e-3).momentum(0.2).affine(true).track_running_stats(true);
  EXPECT_EQ(o.num_features(), 3);
  EXPECT_EQ(o.eps(), 1e-3);
  EXPECT_EQ(o.momentum(), 0.2);
  EXPECT_TRUE(o.affine());
  EXPECT_TRUE(o.track_running_stats());
  const InstanceNormOptions d(3);
  EXPECT_EQ(d.eps(), 1e-5);
  EXPECT_EQ(d.momentum(), 0.1);
  EXPECT_FALSE(d.affine());
  EXPECT_FALSE(d.track_running_stats());
  check_same<InstanceNorm2d>([&] { return std::make_shared<InstanceNorm2d>(o); },
                             [] { return std::make_shared<InstanceNorm2d>(3, 1e-3, 0.2, true, true); },
                             {randn({2, 3, 4, 5})});
  check_same<InstanceNorm1d>([] { return std::make_shared<InstanceNorm1d>(InstanceNorm1dOptions(3)); },
                             [] { return std::make_shared<InstanceNorm1d>(3); }, {randn({2, 3, 6})});
  check_same<InstanceNorm3d>([] { return std::make_shared<InstanceNorm3d>(InstanceNorm3dOptions(3).affine(true)); },
                             [] { return std::make_shared<InstanceNorm3d>(3, 1e-5, 0.1, true); },
                             {randn({2, 3, 2, 3, 4})});
  expect_error([] { InstanceNorm3d(InstanceNorm3dOptions(0)); }, "InstanceNorm: num_features must be positive, got 0");
}

TEST(LayerOptions, BatchNorm) {
  const BatchNorm1dOptions o = BatchNorm1dOptions(5).eps(1e-3).momentum(0.3).affine(false).track_running_stats(true);
  EXPECT_EQ(o.num_features(), 5);
  EXPECT_EQ(o.eps(), 1e-3);
  EXPECT_EQ(o.momentum(), 0.3);
  EXPECT_FALSE(o.affine());
  EXPECT_TRUE(o.track_running_stats());
  const BatchNormOptions d(5);
  EXPECT_EQ(d.eps(), 1e-5);
  EXPECT_EQ(d.momentum(), 0.1);
  EXPECT_TRUE(d.affine());
  const Tensor x = randn({4, 5, 3});
  check_same<BatchNorm1d>([&] { return std::make_shared<BatchNorm1d>(o); },
                          [] { return std::make_shared<BatchNorm1d>(5, 1e-3, 0.3, false, true); }, {x});
  // The cumulative average (momentum nullopt), and no running statistics.
  BatchNorm2dOptions cumulative(3);
  cumulative.momentum(std::nullopt);
  EXPECT_FALSE(cumulative.momentum().has_value());
  const Tensor image = randn({2, 3, 4, 4});
  check_same<BatchNorm2d>([&] { return std::make_shared<BatchNorm2d>(cumulative); },
                          [] { return std::make_shared<BatchNorm2d>(3, 1e-5, std::nullopt); }, {image});
  check_same<BatchNorm2d>(
      [] { return std::make_shared<BatchNorm2d>(BatchNorm2dOptions(3).track_running_stats(false)); },
      [] { return std::make_shared<BatchNorm2d>(3, 1e-5, 0.1, true, false); }, {image});
  BatchNorm2d bn(BatchNorm2dOptions(3));
  expect_error([&] { bn(x); }, "BatchNorm2d: expected 4D input");
}

TEST(LayerOptions, LayerNorm) {
  const LayerNormOptions o = LayerNormOptions({3, 4}).eps(1e-6).elementwise_affine(true).bias(false);
  EXPECT_EQ(o.normalized_shape(), (Shape{3, 4}));
  EXPECT_EQ(o.eps(), 1e-6);
  EXPECT_TRUE(o.elementwise_affine());
  EXPECT_FALSE(o.bias());
  const Tensor x = randn({2, 3, 4});
  auto positional = [] { return std::make_shared<LayerNorm>(Shape{3, 4}, 1e-6, true, false); };
  check_same<LayerNorm>([&] { return std::make_shared<LayerNorm>(o); }, positional, {x});
  check_same<LayerNorm>([] { return std::make_shared<LayerNorm>(LayerNormOptions({4}).elementwise_affine(false)); },
                        [] { return std::make_shared<LayerNorm>(4, 1e-5, false); }, {x});
}

TEST(LayerOptions, Embedding) {
  const EmbeddingOptions o = EmbeddingOptions(10, 3).padding_idx(-1);
  EXPECT_EQ(o.num_embeddings(), 10);
  EXPECT_EQ(o.embedding_dim(), 3);
  EXPECT_EQ(o.padding_idx(), -1);
  EXPECT_FALSE(EmbeddingOptions(10, 3).padding_idx().has_value());
  const Tensor ids = from_vector<int64_t>({0, 9, 3, 9}, {2, 2});
  check_same<Embedding>([&] { return std::make_shared<Embedding>(o); },
                        [] { return std::make_shared<Embedding>(10, 3, -1); }, {ids});
  expect_error([] { Embedding(EmbeddingOptions(10, 3).padding_idx(10)); },
               "Embedding: padding_idx must be within [-10, 10), got 10");
}

TEST(LayerOptions, Dropout) {
  Generator ga(11), gb(11);
  const DropoutOptions o = DropoutOptions(0.3).generator(&ga);
  EXPECT_EQ(o.p(), 0.3);
  EXPECT_EQ(o.generator(), &ga);
  EXPECT_EQ(DropoutOptions().p(), 0.5);
  EXPECT_EQ(DropoutOptions().generator(), nullptr);
  const Tensor x = ones({4, 8});
  check_same<Dropout>([&] { return std::make_shared<Dropout>(o); }, [&] { return std::make_shared<Dropout>(0.3, &gb); },
                      {x});
  expect_error([] { Dropout(DropoutOptions(1.5)); }, "Dropout: the probability p must be in [0, 1], got 1.5");
}

TEST(LayerOptions, GroupNorm) {
  const GroupNormOptions o = GroupNormOptions(2, 6).eps(1e-3).affine(false);
  EXPECT_EQ(o.num_groups(), 2);
  EXPECT_EQ(o.num_channels(), 6);
  EXPECT_EQ(o.eps(), 1e-3);
  EXPECT_FALSE(o.affine());
  const Tensor x = randn({2, 6, 5});
  check_same<GroupNorm>([&] { return std::make_shared<GroupNorm>(o); },
                        [] { return std::make_shared<GroupNorm>(2, 6, 1e-3, false); }, {x});
  check_same<GroupNorm>([] { return std::make_shared<GroupNorm>(GroupNormOptions(3, 6)); },
                        [] { return std::make_shared<GroupNorm>(3, 6); }, {x});
  expect_error([] { GroupNorm(GroupNormOptions(4, 6)); }, "GroupNorm: num_channels (6)");
}

TEST(LayerOptions, RecurrentLayers) {
  Generator g(5);
  const RNNOptions o = RNNOptions(3, 4)
                           .num_layers(2)
                           .nonlinearity(RNNNonlinearity::ReLU)
                           .bias(false)
                           .batch_first(true)
                           .dropout(0.25)
                           .bidirectional(true)
                           .generator(&g);
  EXPECT_EQ(o.input_size(), 3);
  EXPECT_EQ(o.hidden_size(), 4);
  EXPECT_EQ(o.num_layers(), 2);
  EXPECT_EQ(o.nonlinearity(), RNNNonlinearity::ReLU);
  EXPECT_FALSE(o.bias());
  EXPECT_TRUE(o.batch_first());
  EXPECT_EQ(o.dropout(), 0.25);
  EXPECT_TRUE(o.bidirectional());
  EXPECT_EQ(o.generator(), &g);
  const RNNOptions d(3, 4);
  EXPECT_EQ(d.num_layers(), 1);
  EXPECT_EQ(d.nonlinearity(), RNNNonlinearity::Tanh);
  EXPECT_TRUE(d.bias());
  EXPECT_FALSE(d.batch_first());
  EXPECT_EQ(d.dropout(), 0.0);
  EXPECT_FALSE(d.bidirectional());
  EXPECT_EQ(d.generator(), nullptr);

  auto rnn = std::make_shared<RNN>(o);
  EXPECT_EQ(rnn->input_size, 3);
  EXPECT_EQ(rnn->hidden_size, 4);
  EXPECT_EQ(rnn->extra_repr(), "3, 4, num_layers=2, bias=False, batch_first=True, dropout=0.25, bidirectional=True");
  EXPECT_EQ(rnn->state_dict().size(), 8u);  // weight_ih and weight_hh per layer and direction, no biases
  const Tensor seq = randn({5, 2, 3});      // (L, N, input_size)
  check_same<LSTM>([] { return std::make_shared<LSTM>(LSTMOptions(3, 4).num_layers(2)); },
                   [] { return std::make_shared<LSTM>(RNNOptions(3, 4).num_layers(2)); }, {seq});
  check_same<GRU>([] { return std::make_shared<GRU>(3, 4); }, [] { return std::make_shared<GRU>(GRUOptions(3, 4)); },
                  {seq});
  check_same<RNN>([] { return std::make_shared<RNN>(3, 4); }, [] { return std::make_shared<RNN>(RNNOptions(3, 4)); },
                  {seq});
  expect_error([] { LSTM(LSTMOptions(3, 4).nonlinearity(RNNNonlinearity::ReLU)); },
               "LSTM: nonlinearity applies to RNN only");
  expect_error([] { GRU(GRUOptions(3, 0)); }, "GRU: input_size and hidden_size must be positive, got 3 and 0");
}

TEST(LayerOptions, Pooling) {
  const MaxPool2dOptions o = MaxPool2dOptions(3).stride({2, 1}).padding(1).dilation(2).ceil_mode(true);
  EXPECT_EQ(o.kernel_size().h, 3);
  EXPECT_EQ(o.stride()->h, 2);
  EXPECT_EQ(o.stride()->w, 1);
  EXPECT_EQ(o.padding().w, 1);
  EXPECT_EQ(o.dilation().h, 2);
  EXPECT_TRUE(o.ceil_mode());
  EXPECT_FALSE(MaxPool2dOptions(2).stride().has_value());  // the kernel size, as torch
  const Tensor x = randn({2, 3, 9, 8});
  check_same<MaxPool2d>([&] { return std::make_shared<MaxPool2d>(o); },
                        [] { return std::make_shared<MaxPool2d>(3, Size2d(2, 1), 1, 2, true); }, {x});
  check_same<MaxPool2d>([] { return std::make_shared<MaxPool2d>(MaxPool2dOptions(2)); },
                        [] { return std::make_shared<MaxPool2d>(2); }, {x});

  const AvgPool2dOptions a =
      AvgPool2dOptions({3, 2}).stride(2).padding({1, 0}).ceil_mode(true).count_include_pad(false).divisor_override(5);
  EXPECT_EQ(a.kernel_size().w, 2);
  EXPECT_EQ(a.stride()->h, 2);
  EXPECT_EQ(a.padding().h, 1);
  EXPECT_TRUE(a.ceil_mode());
  EXPECT_FALSE(a.count_include_pad());
  EXPECT_EQ(a.divisor_override(), 5);
  check_same<AvgPool2d>(
      [&] { return std::make_shared<AvgPool2d>(a); },
      [] { return std::make_shared<AvgPool2d>(Size2d(3, 2), Size2d(2), Size2d(1, 0), true, false, 5); }, {x});
  // The builders convert to the kernels' settings, so the functional form takes them too.
  EXPECT_EQ(values_of(F::max_pool2d(x, MaxPool2dOptions(2).stride(1))),
            values_of(F::max_pool2d(x, {.kernel = 2, .stride = Size2d(1)})));
  EXPECT_EQ(values_of(F::avg_pool2d(x, AvgPool2dOptions(2).padding(1))),
            values_of(F::avg_pool2d(x, {.kernel = 2, .padding = 1})));
  MaxPool2d too_much_padding(MaxPool2dOptions(2).padding(2));
  expect_error([&] { too_much_padding(x); }, "max_pool2d: padding must be at most half the kernel size");
}

// The LibTorch forms of a small network, end to end.
TEST(LayerOptions, ALibTorchStyleNetwork) {
  auto net = std::make_shared<Sequential>(
      std::make_shared<Conv2d>(Conv2dOptions(3, 8, 3).stride(2).padding(1).bias(false)),
      std::make_shared<BatchNorm2d>(BatchNorm2dOptions(8).momentum(0.01)), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(MaxPool2dOptions(2)), std::make_shared<Flatten>(),
      std::make_shared<Dropout>(DropoutOptions(0.1)), std::make_shared<Linear>(LinearOptions(8 * 4 * 4, 10)));
  const Tensor y = (*net)(randn({2, 3, 16, 16}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  EXPECT_EQ(net->state_dict().keys(),
            (std::vector<std::string>{"0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                      "1.num_batches_tracked", "6.weight", "6.bias"}));
}

}  // namespace
}  // namespace kiln::nn
