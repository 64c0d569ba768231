// Note [Module holders]: model(x) on a holder is (*model)(x), hooks
// included, and a holder goes wherever a std::shared_ptr<M> goes.
#include "nn/module_holder.h"

#include <gtest/gtest.h>

#include "kiln.h"
#include "nn/container.h"
#include "nn/linear.h"

namespace kiln::nn {
namespace {

// A module of its own, named LibTorch's way: NetImpl, held by Net.
struct NetImpl : Module {
  explicit NetImpl(int64_t width = 3) {
    fc = register_module("fc", make<Linear>(width, 2));
  }
  Tensor forward(const Tensor& x) override { return relu(fc(x)); }
  ModuleHolder<Linear> fc;
};
KILN_MODULE(Net);

// Two inputs, one output (Note [Modules of several tensors]).
struct AddImpl : Module {
  TensorList forward_many(const TensorList& inputs) override { return {inputs.at(0) + inputs.at(1)}; }
};
KILN_MODULE(Add);

// A module that needs an argument: a default holder of it is empty.
struct ScaleImpl : Module {
  explicit ScaleImpl(double factor) : factor(factor) {}
  Tensor forward(const Tensor& x) override { return x * factor; }
  double factor;
};
KILN_MODULE(Scale);

Tensor input() { return from_vector<double>({1.0, -2.0, 0.5, 3.0, 0.25, -1.0}).reshape({2, 3}); }

TEST(ModuleHolder, CallingTheHolderIsCallingTheModule) {
  manual_seed(3);
  auto fc = make<Linear>(3, 2);
  fc->to(DType::Float64);
  const Tensor x = input();
  const Tensor expected = matmul(x, fc->weight.t()) + fc->bias;  // x W^T + b
  EXPECT_TRUE(allclose(fc(x), expected, 0, 0));
  EXPECT_TRUE(allclose(fc(x), (*fc)(x), 0, 0));
  EXPECT_EQ(fc->weight.shape(), Shape({2, 3}));
}

TEST(ModuleHolder, TheCallRunsTheModulesHooks) {
  Net net;
  net->to(DType::Float64);
  int calls = 0;
  net->register_forward_hook([&](Module&, const Tensor&, const Tensor& out) {
    ++calls;
    return out * 2.0;  // a hook that replaces the output
  });
  const Tensor x = input();
  const Tensor y = net(x);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(allclose(y, relu(net->fc(x)) * 2.0, 0, 0));
}

TEST(ModuleHolder, AHolderGoesWhereASharedPtrGoes) {
  Net net(4);
  // register_module deduced the holder's module type: the parameters have their names.
  std::vector<std::string> names;
  for (const auto& [name, p] : net->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(net->fc->weight.shape(), Shape({2, 4}));
  // Copies share the module, as shared_ptrs do.
  Net other = net;
  EXPECT_EQ(other.get(), net.get());
  std::shared_ptr<NetImpl> plain = net;
  EXPECT_EQ(plain.get(), net.get());
  // A Sequential takes holders as its modules.
  auto fc = make<Linear>(2, 5);
  Sequential seq(net, fc);
  EXPECT_EQ(seq.size(), 2u);
  EXPECT_EQ(seq(ones({1, 4})).shape(), Shape({1, 5}));
}

TEST(ModuleHolder, SeveralTensorsInAndOut) {
  Add add;
  const Tensor a = from_vector<double>({1.0, 2.0});
  const Tensor b = from_vector<double>({10.0, 20.0});
  const TensorList out = add({a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(allclose(out[0], from_vector<double>({11.0, 22.0}), 0, 0));
}

TEST(ModuleHolder, ArgumentsMakeTheModuleAndAnEmptyHolderSaysSo) {
  Scale twice(2.0);
  EXPECT_TRUE(allclose(twice(from_vector<double>({1.5})), from_vector<double>({3.0}), 0, 0));
  Scale none;  // ScaleImpl has no default constructor
  EXPECT_EQ(none.get(), nullptr);
  Net empty(nullptr);
  for (auto call : {std::function<void()>([&] { none(ones({1})); }), std::function<void()>([&] { empty(ones({3})); })}) {
    try {
      call();
      ADD_FAILURE() << "calling an empty holder did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Impl>: called while empty"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln::nn
