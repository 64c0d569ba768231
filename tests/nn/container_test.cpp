// Sequential, ModuleList and ModuleDict.
#include <gtest/gtest.h>

#include <sstream>

#include "autograd/ops.h"
#include "nn/container.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

using testing::expect_error;
using testing::values_of;

// y = x * factor, with the factor as a parameter.
struct Mul : Module {
  explicit Mul(int factor) : factor(factor) { weight = register_parameter("weight", kiln::full({1}, factor)); }
  Tensor forward(const Tensor& x) override { return kiln::mul(x, weight); }
  std::string extra_repr() const override { return "factor=" + std::to_string(factor); }
  int factor;
  Tensor weight;
};

// y = x + 1, no parameters.
struct AddOne : Module {
  Tensor forward(const Tensor& x) override { return kiln::add(x, 1.0); }
};

TEST(Sequential, ChainsForwardInOrder) {
  auto seq = std::make_shared<Sequential>(std::make_shared<Mul>(2), std::make_shared<AddOne>(),
                                          std::make_shared<Mul>(3));
  // ((5 * 2) + 1) * 3
  EXPECT_EQ(values_of((*seq)(kiln::full({1}, 5.0))), std::vector<double>{33});
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ(seq->named_parameters().keys(), (std::vector<std::string>{"0.weight", "2.weight"}));
}

TEST(Sequential, ConstructorsAndPushBack) {
  Sequential from_list{std::make_shared<AddOne>(), std::make_shared<Mul>(2)};
  EXPECT_EQ(values_of(from_list(kiln::full({1}, 1.0))), std::vector<double>{4});

  Sequential from_vector(std::vector<std::shared_ptr<Module>>{std::make_shared<AddOne>()});
  from_vector.push_back(std::make_shared<AddOne>());
  from_vector.push_back("scale", std::make_shared<Mul>(10));
  EXPECT_EQ(from_vector.named_parameters().keys(), std::vector<std::string>{"scale.weight"});
  EXPECT_EQ(values_of(from_vector(kiln::full({1}, 0.0))), std::vector<double>{20});

  Sequential named(std::vector<NamedModule>{{"first", std::make_shared<Mul>(4)}, {"second", std::make_shared<AddOne>()}});
  EXPECT_EQ(named.named_parameters().keys(), std::vector<std::string>{"first.weight"});
  expect_error([&] { named.push_back("first", std::make_shared<AddOne>()); },
               "register_module: Sequential already has a submodule named 'first'");
  EXPECT_EQ(named.size(), 2u);
}

TEST(Sequential, EmptyReturnsItsInput) {
  Sequential empty;
  Tensor x = kiln::ones({2});
  EXPECT_TRUE(empty(x).is_same(x));
  EXPECT_TRUE(empty.empty());
}

TEST(Sequential, IndexingAndTypedAccess) {
  auto first = std::make_shared<Mul>(2);
  auto last = std::make_shared<AddOne>();
  Sequential seq{first, last};
  EXPECT_EQ(seq[0], first);
  EXPECT_EQ(seq[-1], last);
  EXPECT_EQ(seq.at<Mul>(0), first);
  expect_error([&] { seq[2]; }, "Sequential: index 2 is out of range for 2 modules");
  expect_error([&] { seq[-3]; }, "Sequential: index -3 is out of range for 2 modules");
  expect_error([&] { seq.at<Mul>(1); }, "Sequential: module 1 is a AddOne, not a Mul");
  std::vector<std::shared_ptr<Module>> iterated(seq.begin(), seq.end());
  EXPECT_EQ(iterated, (std::vector<std::shared_ptr<Module>>{first, last}));
}

TEST(Sequential, InnerHooksRun) {
  auto inner = std::make_shared<Mul>(2);
  Sequential seq{inner, std::make_shared<AddOne>()};
  inner->register_forward_hook([](Module&, const Tensor&, const Tensor& out) { return kiln::mul(out, 100.0); });
  EXPECT_EQ(values_of(seq(kiln::full({1}, 1.0))), std::vector<double>{201});
}

TEST(Sequential, PrettyPrint) {
  Sequential seq{std::make_shared<Mul>(2), std::make_shared<AddOne>()};
  std::ostringstream os;
  os << seq;
  EXPECT_EQ(os.str(), "Sequential(\n  (0): Mul(factor=2)\n  (1): AddOne()\n)");
  std::ostringstream empty;
  empty << Sequential();
  EXPECT_EQ(empty.str(), "Sequential()");
}

TEST(ModuleList, HoldsModulesWithoutForward) {
  ModuleList list{std::make_shared<Mul>(2), std::make_shared<Mul>(3)};
  list.push_back(std::make_shared<AddOne>());
  list.extend({std::make_shared<Mul>(5)});
  EXPECT_EQ(list.size(), 4u);
  EXPECT_EQ(list.named_parameters().keys(), (std::vector<std::string>{"0.weight", "1.weight", "3.weight"}));
  Tensor x = kiln::full({1}, 1.0);
  for (const auto& m : list) x = (*m)(x);
  EXPECT_EQ(values_of(x), std::vector<double>{35});  // (1 * 2 * 3 + 1) * 5
  EXPECT_EQ(list.at<Mul>(-1)->weight.item<double>(), 5.0);
  expect_error([&] { list(kiln::ones({1})); }, "ModuleList has no forward: iterate over it");
  expect_error([&] { list[4]; }, "ModuleList: index 4 is out of range for 4 modules");
}

TEST(ModuleDict, LooksUpByNameInInsertionOrder) {
  ModuleDict dict(std::vector<NamedModule>{{"b", std::make_shared<Mul>(2)}, {"a", std::make_shared<AddOne>()}});
  dict.insert("c", std::make_shared<Mul>(3));
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_TRUE(dict.contains("a"));
  EXPECT_FALSE(dict.contains("d"));
  EXPECT_EQ(dict.at<Mul>("c")->weight.item<double>(), 3.0);
  EXPECT_EQ(dict.named_parameters().keys(), (std::vector<std::string>{"b.weight", "c.weight"}));
  expect_error([&] { dict["d"]; }, "ModuleDict: no module named 'd' (keys: [b, a, c])");
  expect_error([&] { dict.at<Mul>("a"); }, "ModuleDict: module 'a' is a AddOne, not a Mul");
  expect_error([&] { dict.insert("a", std::make_shared<AddOne>()); },
               "register_module: ModuleDict already has a submodule named 'a'");
  expect_error([&] { dict(kiln::ones({1})); }, "ModuleDict has no forward");
  std::vector<std::string> iterated;
  for (const auto& [name, module] : dict) iterated.push_back(name + "=" + module->name());
  EXPECT_EQ(iterated, (std::vector<std::string>{"b=Mul", "a=AddOne", "c=Mul"}));
}

}  // namespace
}  // namespace kiln::nn
