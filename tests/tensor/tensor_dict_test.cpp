// TensorDict: insertion order, lookup by name, and its refusals.
#include "tensor/tensor_dict.h"

#include "tensor/test_util.h"

namespace kiln {
namespace {

TEST(TensorDict, KeepsInsertionOrderAndFindsByName) {
  Tensor w = iota_tensor({2, 3});
  Tensor b = iota_tensor({3});
  TensorDict d;
  d.insert("fc.weight", w);
  d.insert("fc.bias", b);
  d.insert("a.first_alphabetically", iota_tensor({1}));
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"fc.weight", "fc.bias", "a.first_alphabetically"}));
  EXPECT_EQ(d.size(), 3u);
  EXPECT_FALSE(d.empty());
  EXPECT_TRUE(d.contains("fc.bias"));
  EXPECT_FALSE(d.contains("fc"));
  // Handles, not copies (Note [Tensor and TensorImpl]).
  EXPECT_TRUE(d.at("fc.weight").is_same(w));
  std::vector<std::string> iterated;
  for (const auto& [name, t] : d) iterated.push_back(name + ":" + std::to_string(t.numel()));
  EXPECT_EQ(iterated, (std::vector<std::string>{"fc.weight:6", "fc.bias:3", "a.first_alphabetically:1"}));
}

TEST(TensorDict, InsertOrAssignReplacesInPlace) {
  TensorDict d{{"a", iota_tensor({1})}, {"b", iota_tensor({2})}};
  Tensor replacement = iota_tensor({5});
  d.insert_or_assign("a", replacement);
  d.insert_or_assign("c", iota_tensor({3}));
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(d.at("a").is_same(replacement));
}

TEST(TensorDict, RejectsDuplicatesUndefinedTensorsAndMissingNames) {
  TensorDict d{{"a", iota_tensor({1})}};
  expect_error([&] { d.insert("a", iota_tensor({1})); },
               "TensorDict::insert: the name 'a' is already present (use insert_or_assign to replace it)");
  expect_error([&] { TensorDict twice{{"x", iota_tensor({1})}, {"x", iota_tensor({1})}}; },
               "the name 'x' is already present");
  expect_error([&] { d.insert("u", Tensor()); }, "TensorDict::insert: the tensor for 'u' is undefined");
  expect_error([&] { d.insert_or_assign("a", Tensor()); }, "the tensor for 'a' is undefined");
  expect_error([&] { d.at("fc.weight"); }, "TensorDict::at: no tensor named 'fc.weight' (the dict holds 1 names: 'a')");
  EXPECT_EQ(d.size(), 1u);
}

TEST(TensorDict, MissingNameMessageListsOnlyTheFirstNames) {
  TensorDict d;
  for (int i = 0; i < 10; ++i) d.insert("p" + std::to_string(i), iota_tensor({1}));
  expect_error([&] { d.at("q"); },
               "(the dict holds 10 names: 'p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', ...)");
}

}  // namespace
}  // namespace kiln
