// Module: registration, traversal, modes, to(), zero_grad, hooks, printing.
// The state dict is tested in state_dict_test.cpp, containers in container_test.cpp.
#include <gtest/gtest.h>

#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/container.h"
#include "nn/module.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

using testing::expect_error;
using testing::expect_error_parts;
using testing::values_of;

// y = x * weight (+ bias), elementwise: a layer whose gradients are easy to
// write down by hand.
struct Scale : Module {
  Scale(int64_t n, bool with_bias) {
    weight = register_parameter("weight", kiln::full({n}, 2.0));
    bias = register_parameter("bias", with_bias ? kiln::full({n}, 0.5) : Tensor());
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = kiln::mul(x, weight);
    return bias.defined() ? kiln::add(y, bias) : y;
  }
  std::string extra_repr() const override {
    return "n=" + std::to_string(weight.size(0)) + ", bias=" + (bias.defined() ? "true" : "false");
  }
  Tensor weight;
  Tensor bias;
};

// Buffers of three kinds, as BatchNorm has: floating, integer, non-persistent.
struct Stats : Module {
  explicit Stats(int64_t n) {
    running_mean = register_buffer("running_mean", kiln::zeros({n}));
    count = register_buffer("count", kiln::zeros({}, DType::Int64));
    scratch = register_buffer("scratch", kiln::zeros({n}), /*persistent=*/false);
  }
  Tensor forward(const Tensor& x) override { return kiln::sub(x, running_mean); }
  Tensor running_mean;
  Tensor count;
  Tensor scratch;
};

struct Net : Module {
  Net() {
    features = register_module("features", std::make_shared<Sequential>(std::make_shared<Scale>(3, true),
                                                                        std::make_shared<Stats>(3)));
    head = register_module("head", std::make_shared<Scale>(3, false));
    temperature = register_parameter("temperature", kiln::ones({1}));
  }
  Tensor forward(const Tensor& x) override { return kiln::mul((*head)((*features)(x)), temperature); }
  std::shared_ptr<Sequential> features;
  std::shared_ptr<Scale> head;
  Tensor temperature;
};

struct Bare : Module {};

std::vector<std::string> keys_of(const TensorDict& d) { return d.keys(); }

TEST(Module, NamedParametersUseDottedNamesOwnFirstThenChildrenInOrder) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(keys_of(net->named_parameters()),
            (std::vector<std::string>{"temperature", "features.0.weight", "features.0.bias", "head.weight"}));
  EXPECT_EQ(keys_of(net->named_parameters(/*recurse=*/false)), std::vector<std::string>{"temperature"});
  std::vector<Tensor> params = net->parameters();
  ASSERT_EQ(params.size(), 4u);
  // The registered tensors themselves, not copies: the members are the parameters.
  EXPECT_TRUE(params[0].is_same(net->temperature));
  EXPECT_TRUE(params[3].is_same(net->head->weight));
  for (const Tensor& p : params) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, UndefinedParameterIsAbsent) {
  auto head = std::make_shared<Scale>(3, false);
  EXPECT_EQ(keys_of(head->named_parameters()), std::vector<std::string>{"weight"});
  EXPECT_EQ(keys_of(head->state_dict()), std::vector<std::string>{"weight"});
  EXPECT_FALSE(head->get_parameter("bias").defined());
}

TEST(Module, RegisterParameterHonoursRequiresGrad) {
  Bare m;
  Tensor frozen = m.register_parameter("frozen", kiln::ones({2}), /*requires_grad=*/false);
  Tensor trained = m.register_parameter("trained", kiln::ones({2}));
  EXPECT_FALSE(frozen.requires_grad());
  EXPECT_TRUE(trained.requires_grad());
  EXPECT_EQ(m.parameters().size(), 2u);
  // A tensor that already requires grad is switched off when asked.
  Tensor w = kiln::ones({2});
  w.requires_grad_();
  m.register_parameter("was_trained", w, false);
  EXPECT_FALSE(w.requires_grad());
}

TEST(Module, RegistrationErrorsNameTheProblem) {
  Bare m;
  m.register_parameter("w", kiln::ones({2}));
  expect_error([&] { m.register_parameter("", kiln::ones({2})); }, "register_parameter: the name must not be empty");
  expect_error([&] { m.register_buffer("a.b", kiln::ones({2})); },
               "register_buffer: the name 'a.b' contains '.'");
  expect_error([&] { m.register_buffer("w", kiln::ones({2})); }, "register_buffer: Bare already has a parameter named 'w'");
  m.register_buffer("b", kiln::ones({2}));
  expect_error([&] { m.register_module("b", std::make_shared<Bare>()); },
               "register_module: Bare already has a buffer named 'b'");
  m.register_module("child", std::make_shared<Bare>());
  expect_error([&] { m.register_parameter("child", kiln::ones({2})); },
               "register_parameter: Bare already has a submodule named 'child'");
  expect_error([&] { m.register_module("none", std::shared_ptr<Bare>()); }, "register_module: submodule 'none' of Bare is null");
  auto self = std::make_shared<Bare>();
  expect_error([&] { self->register_module("me", self); }, "register_module: Bare cannot be its own submodule 'me'");
  expect_error([&] { m.register_parameter("steps", kiln::zeros({2}, DType::Int64)); },
               "only floating point tensors can require gradients, got int64");

  Tensor leaf = kiln::ones({2});
  leaf.requires_grad_();
  Tensor computed = kiln::mul(leaf, 2.0);
  expect_error_parts([&] { m.register_parameter("computed", computed); },
               {"register_parameter: 'computed' of Bare was computed by an op (MulBackward)", "detach()"});
  // A failed registration registers nothing.
  EXPECT_EQ(keys_of(m.named_parameters(false)), std::vector<std::string>{"w"});
}

TEST(Module, ReplaceModuleKeepsTheNameAndItsPlace) {
  Net net;
  auto wider = std::make_shared<Scale>(3, true);
  net.head = net.replace_module("head", wider);
  // Same key order as before: features.*, head.*, temperature.
  EXPECT_EQ(keys_of(net.named_parameters()),
            (std::vector<std::string>{"temperature", "features.0.weight", "features.0.bias", "head.weight",
                                      "head.bias"}));
  EXPECT_EQ(net.named_parameters().at("head.bias").data_ptr(), wider->bias.data_ptr());
  EXPECT_EQ(net.named_children()[1].second.get(), wider.get());
  expect_error([&] { net.replace_module("tail", std::make_shared<Bare>()); },
               "replace_module: Net has no submodule named 'tail' to replace");
  expect_error([&] { net.replace_module("head", std::shared_ptr<Bare>()); },
               "replace_module: the replacement for submodule 'head' of Net is null");
}

TEST(Module, BuffersIncludeNonPersistentButStateDictDoesNot) {
  auto stats = std::make_shared<Stats>(3);
  EXPECT_EQ(keys_of(stats->named_buffers()), (std::vector<std::string>{"running_mean", "count", "scratch"}));
  EXPECT_EQ(keys_of(stats->state_dict()), (std::vector<std::string>{"running_mean", "count"}));
  EXPECT_TRUE(stats->parameters().empty());
  for (const Tensor& b : stats->buffers()) EXPECT_FALSE(b.requires_grad());
  EXPECT_TRUE(stats->get_buffer("scratch").is_same(stats->scratch));

  auto net = std::make_shared<Net>();
  EXPECT_EQ(keys_of(net->named_buffers()),
            (std::vector<std::string>{"features.1.running_mean", "features.1.count", "features.1.scratch"}));
  EXPECT_TRUE(net->named_buffers(/*recurse=*/false).empty());
}

TEST(Module, ChildrenAndModulesInRegistrationOrder) {
  auto net = std::make_shared<Net>();
  std::vector<std::string> child_names;
  for (const auto& [name, child] : net->named_children()) child_names.push_back(name);
  EXPECT_EQ(child_names, (std::vector<std::string>{"features", "head"}));
  EXPECT_EQ(net->children()[1], net->head);

  std::vector<std::string> paths;
  for (const auto& [path, module] : net->named_modules()) paths.push_back(path + ":" + module->name());
  EXPECT_EQ(paths, (std::vector<std::string>{":Net", "features:Sequential", "features.0:Scale", "features.1:Stats",
                                             "head:Scale"}));
  std::vector<std::string> prefixed;
  for (const auto& [path, module] : net->named_modules("net", /*include_self=*/false)) prefixed.push_back(path);
  EXPECT_EQ(prefixed, (std::vector<std::string>{"net.features", "net.features.0", "net.features.1", "net.head"}));
  EXPECT_EQ(net->modules().size(), 5u);
  EXPECT_EQ(net->modules().front(), net);
  EXPECT_EQ(net->modules(/*include_self=*/false).size(), 4u);
}

TEST(Module, ModulesOfAModuleNotHeldBySharedPtrNeedIncludeSelfFalse) {
  Bare m;
  m.register_module("child", std::make_shared<Bare>());
  expect_error([&] { m.modules(); }, "named_modules: Bare is not held by a std::shared_ptr");
  EXPECT_EQ(m.modules(/*include_self=*/false).size(), 1u);
}

TEST(Module, SharedModulesAndTiedParametersAreListedOnce) {
  auto shared = std::make_shared<Scale>(2, true);
  auto m = std::make_shared<Bare>();
  m->register_module("encoder", shared);
  m->register_module("decoder", shared);
  m->register_parameter("tied", shared->weight);
  EXPECT_EQ(keys_of(m->named_parameters()), (std::vector<std::string>{"tied", "encoder.bias"}));
  EXPECT_EQ(m->children().size(), 1u);
  EXPECT_EQ(m->modules().size(), 2u);
  // The state dict keeps every name, so that each path loads, as torch.
  EXPECT_EQ(keys_of(m->state_dict()),
            (std::vector<std::string>{"tied", "encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"}));
}

TEST(Module, GetByPath) {
  auto net = std::make_shared<Net>();
  EXPECT_TRUE(net->get_parameter("features.0.weight").is_same(net->features->at<Scale>(0)->weight));
  EXPECT_TRUE(net->get_parameter("temperature").is_same(net->temperature));
  EXPECT_TRUE(net->get_buffer("features.1.running_mean").is_same(net->features->at<Stats>(1)->running_mean));
  EXPECT_EQ(net->get_submodule("features.1"), net->features->at<Stats>(1));
  expect_error([&] { net->get_parameter("features.2.weight"); },
               "get_submodule: Sequential has no submodule '2' (in path 'features.2' of Net)");
  expect_error([&] { net->get_parameter("head.bais"); },
               "get_parameter: Scale has no parameter 'bais' (in path 'head.bais' of Net)");
  expect_error([&] { net->get_buffer("head.weight"); }, "get_buffer: Scale has no buffer 'weight'");
}

TEST(Module, ApplyVisitsChildrenBeforeParents) {
  auto net = std::make_shared<Net>();
  std::vector<std::string> order;
  net->apply([&](Module& m) { order.push_back(m.name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Scale", "Stats", "Sequential", "Scale", "Net"}));
  // The usual use: initialise every layer of one type.
  net->apply([](Module& m) {
    if (auto* scale = dynamic_cast<Scale*>(&m)) {
      NoGradGuard no_grad;
      kiln::fill_(scale->weight, 7.0);
    }
  });
  EXPECT_EQ(values_of(net->head->weight), (std::vector<double>{7, 7, 7}));
  EXPECT_EQ(values_of(net->get_parameter("features.0.weight")), (std::vector<double>{7, 7, 7}));
}

TEST(Module, TrainAndEvalReachEverySubmodule) {
  auto net = std::make_shared<Net>();
  for (const auto& m : net->modules()) EXPECT_TRUE(m->is_training());
  net->eval();
  for (const auto& m : net->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  net->features->train();
  EXPECT_FALSE(net->is_training());
  EXPECT_TRUE(net->features->at<Scale>(0)->is_training());
  net->train(true);
  for (const auto& m : net->modules()) EXPECT_TRUE(m->is_training());
}

TEST(Module, ForwardRunsThroughCallAndDefaultForwardThrows) {
  auto net = std::make_shared<Net>();
  Tensor y = (*net)(kiln::full({3}, 1.0));
  // ((1 * 2 + 0.5) - 0) * 2 * 1
  EXPECT_EQ(values_of(y), (std::vector<double>{5, 5, 5}));
  Bare bare;
  expect_error([&] { bare(kiln::ones({1})); }, "Bare: forward(const Tensor&) is not implemented");
}

TEST(Module, ToDTypeConvertsInPlaceKeepingIdentity) {
  auto net = std::make_shared<Net>();
  auto stats = net->features->at<Stats>(1);
  TensorImpl* weight_impl = net->head->weight.impl();
  net->head->weight.set_grad(kiln::full({3}, 0.25));

  net->to(DType::Float64);

  // Members, parameters() and the TensorImpl an optimizer would hold are one object.
  EXPECT_EQ(net->head->weight.impl(), weight_impl);
  EXPECT_TRUE(net->get_parameter("head.weight").is_same(net->head->weight));
  for (const Tensor& p : net->parameters()) {
    EXPECT_EQ(p.dtype(), DType::Float64);
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(values_of(net->head->weight), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(values_of(net->features->at<Scale>(0)->bias), (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(net->head->weight.grad().dtype(), DType::Float64);
  EXPECT_EQ(values_of(net->head->weight.grad()), (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_EQ(stats->running_mean.dtype(), DType::Float64);
  EXPECT_EQ(stats->scratch.dtype(), DType::Float64);
  EXPECT_EQ(stats->count.dtype(), DType::Int64);  // integer buffers keep their dtype

  // Gradients reach the converted parameters: y = ((x*w0 + b0) - 0) * wh * t.
  net->zero_grad();
  Tensor x = kiln::full({3}, 3.0, DType::Float64);
  kiln::sum((*net)(x)).backward();
  EXPECT_EQ(values_of(net->head->weight.grad()), (std::vector<double>{6.5, 6.5, 6.5}));  // x*w0 + b0
  EXPECT_EQ(values_of(net->temperature.grad()), (std::vector<double>{39}));            // 3 * 6.5 * 2
  EXPECT_EQ(net->temperature.grad().dtype(), DType::Float64);

  expect_error([&] { net->to(DType::Int32); }, "Module::to: only floating dtypes are accepted, got int32");
}

// The version counter is the tensor's, not its memory's (Note [Version
// counter]): an alias taken before the conversion still shares it after.
TEST(Module, ToDTypeKeepsTheVersionCounter) {
  auto net = std::make_shared<Net>();
  Tensor weight = net->head->weight;
  Tensor alias = weight.detach();
  uint64_t version = weight.version();
  net->to(DType::Float64);
  EXPECT_EQ(weight.version(), version);
  kiln::ops::add_(alias, 1.0);  // writes the old float32 memory, but counts for the parameter
  EXPECT_EQ(weight.version(), version + 1);
}

TEST(Module, ToDeviceOnTheSameDeviceChangesNothing) {
  auto net = std::make_shared<Net>();
  void* data = net->head->weight.data_ptr();
  net->to(kCPU);
  EXPECT_EQ(net->head->weight.data_ptr(), data);
  net->to(kCPU, DType::Float32);
  EXPECT_EQ(net->head->weight.data_ptr(), data);
}

#ifndef KILN_WITH_CUDA

TEST(Module, ToCudaWithoutCudaThrowsAndLeavesTheModuleAlone) {
  auto net = std::make_shared<Net>();
  void* data = net->head->weight.data_ptr();
  expect_error([&] { net->to(cuda_device(0)); }, "cuda:0: this Kiln was built without its cuda backend (KILN_CUDA=OFF)");
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.device().is_cpu());
  EXPECT_EQ(net->head->weight.data_ptr(), data);
}

#else  // KILN_WITH_CUDA

TEST(Module, ToCudaAndBackKeepsIdentityAndValues) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  auto net = std::make_shared<Net>();
  TensorImpl* weight_impl = net->head->weight.impl();
  net->to(cuda_device(0), DType::Float64);
  EXPECT_EQ(net->head->weight.impl(), weight_impl);
  for (const Tensor& t : net->parameters()) {
    EXPECT_TRUE(t.device().is_cuda());
    EXPECT_EQ(t.dtype(), DType::Float64);
  }
  EXPECT_EQ(net->features->at<Stats>(1)->count.device(), cuda_device(0));
  EXPECT_EQ(net->features->at<Stats>(1)->count.dtype(), DType::Int64);
  net->to(kCPU, DType::Float32);
  EXPECT_EQ(net->head->weight.impl(), weight_impl);
  EXPECT_EQ(values_of(net->head->weight), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(values_of(net->features->at<Scale>(0)->bias), (std::vector<double>{0.5, 0.5, 0.5}));
}

#endif  // KILN_WITH_CUDA

TEST(Module, ZeroGradSetsToNoneOrFillsZeros) {
  auto net = std::make_shared<Net>();
  kiln::sum((*net)(kiln::ones({3}))).backward();
  for (const Tensor& p : net->parameters()) ASSERT_TRUE(p.grad().defined());
  Tensor old_grad = net->head->weight.grad();

  net->zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : net->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    for (double v : values_of(p.grad())) EXPECT_EQ(v, 0.0);
  }
  // Zeroed in place: the earlier handle sees the zeros.
  EXPECT_EQ(values_of(old_grad), (std::vector<double>{0, 0, 0}));

  net->zero_grad();
  for (const Tensor& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, HooksRunInOrderAroundForward) {
  auto scale = std::make_shared<Scale>(1, false);
  std::vector<std::string> events;
  scale->register_forward_pre_hook([&](Module& m, const Tensor&) { events.push_back("pre1 " + m.name()); });
  scale->register_forward_pre_hook([&](Module&, const Tensor&) { events.push_back("pre2"); });
  scale->register_forward_hook([&](Module&, const Tensor&, const Tensor&) { events.push_back("post1"); });
  scale->register_forward_hook([&](Module&, const Tensor&, const Tensor&) { events.push_back("post2"); });
  (*scale)(kiln::ones({1}));
  EXPECT_EQ(events, (std::vector<std::string>{"pre1 Scale", "pre2", "post1", "post2"}));
}

TEST(Module, HooksCanReplaceInputAndOutput) {
  auto scale = std::make_shared<Scale>(1, false);  // y = 2x
  Tensor seen_input;
  scale->register_forward_pre_hook([](Module&, const Tensor& x) { return kiln::mul(x, 10.0); });
  scale->register_forward_hook([&](Module&, const Tensor& in, const Tensor& out) {
    seen_input = in;
    return kiln::add(out, 1.0);
  });
  // A hook returning an undefined tensor leaves the output alone.
  scale->register_forward_hook([](Module&, const Tensor&, const Tensor&) { return Tensor(); });
  Tensor y = (*scale)(kiln::full({1}, 3.0));
  EXPECT_EQ(values_of(seen_input), std::vector<double>{30});  // the input forward() saw
  EXPECT_EQ(values_of(y), std::vector<double>{61});           // 2 * 30 + 1
  // forward() itself is not hooked.
  EXPECT_EQ(values_of(scale->forward(kiln::full({1}, 3.0))), std::vector<double>{6});
}

TEST(Module, HookHandlesRemoveTheirHook) {
  auto scale = std::make_shared<Scale>(1, false);
  int pre = 0, post = 0;
  HookHandle h1 = scale->register_forward_pre_hook([&](Module&, const Tensor&) { ++pre; });
  HookHandle h2 = scale->register_forward_hook([&](Module&, const Tensor&, const Tensor&) { ++post; });
  (*scale)(kiln::ones({1}));
  h1.remove();
  (*scale)(kiln::ones({1}));
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 2);
  h1.remove();  // twice is fine
  h2.remove();
  (*scale)(kiln::ones({1}));
  EXPECT_EQ(post, 2);

  // A hook may remove itself while running; the others still run.
  HookHandle self_removing;
  int runs = 0, later = 0;
  self_removing = scale->register_forward_hook([&](Module&, const Tensor&, const Tensor&) {
    ++runs;
    self_removing.remove();
  });
  scale->register_forward_hook([&](Module&, const Tensor&, const Tensor&) { ++later; });
  (*scale)(kiln::ones({1}));
  (*scale)(kiln::ones({1}));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(later, 2);

  // Removing after the module is gone does nothing.
  HookHandle orphan = std::make_shared<Scale>(1, false)->register_forward_hook(
      [](Module&, const Tensor&, const Tensor&) {});
  orphan.remove();
}

TEST(Module, PrettyPrintMatchesTorch) {
  auto net = std::make_shared<Net>();
  std::ostringstream os;
  os << *net;
  EXPECT_EQ(os.str(),
            "Net(\n"
            "  (features): Sequential(\n"
            "    (0): Scale(n=3, bias=true)\n"
            "    (1): Stats()\n"
            "  )\n"
            "  (head): Scale(n=3, bias=false)\n"
            ")");
  std::ostringstream leaf;
  leaf << *net->head;
  EXPECT_EQ(leaf.str(), "Scale(n=3, bias=false)");
}

TEST(Module, NameComesFromTheTypeOrTheConstructor) {
  EXPECT_EQ(Bare().name(), "Bare");
  EXPECT_EQ(Module("Custom").name(), "Custom");
  EXPECT_EQ(Sequential().name(), "Sequential");
  EXPECT_EQ(type_name(typeid(std::vector<int>)), "vector<int, std::allocator<int> >");
}

// Two-line extra_repr with children: torch puts each line on its own.
struct Multi : Module {
  Multi() { register_module("inner", std::make_shared<Bare>()); }
  std::string extra_repr() const override { return "a=1,\nb=2"; }
};

TEST(Module, PrettyPrintMultiLineExtraRepr) {
  std::ostringstream os;
  Multi().pretty_print(os);
  EXPECT_EQ(os.str(), "Multi(\n  a=1,\n  b=2\n  (inner): Bare()\n)");
}

}  // namespace
}  // namespace kiln::nn
