// flip, roll, repeat, tile, sort, argsort, sign, where with numbers and
// einsum against PyTorch (/usr/bin/python3, Debian's python3-torch) on the
// same float64 inputs: outputs (sort's indices too) and the gradients of the
// inputs under the same upstream gradients, all cases in one Python process
// (tests/nn/torch_oracle.h). Skipped where torch cannot be imported.
#include <limits>
#include <string>
#include <vector>

#include "autograd_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::gradtest {
namespace {

using nn::testing::expect_matches_torch;
using nn::testing::OracleCase;

// A one-output case: Kiln's `op` on the inputs, torch's `expression` of in0, in1, ...
OracleCase unary_case(const std::string& name, TensorList inputs, const std::string& expression,
                      std::function<Tensor(const TensorList&)> op) {
  return {.name = name,
          .inputs = std::move(inputs),
          .python = "outs = [" + expression + "]",
          .kiln = [op = std::move(op)](const TensorList& in) { return TensorList{op(in)}; }};
}

TEST(TensorOpsTorch, ReorderingMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back(unary_case("flip dims (0, 2)", {leaf({2, 3, 4}, 1)}, "torch.flip(in0, (0, 2))",
                             [](const TensorList& in) { return flip(in[0], {0, 2}); }));
  cases.push_back(unary_case("flip transposed", {transposed_leaf({3, 4}, 2)}, "torch.flip(in0, (-1,))",
                             [](const TensorList& in) { return flip(in[0], {-1}); }));
  cases.push_back(unary_case("roll two dims", {leaf({2, 3, 4}, 3)}, "torch.roll(in0, (1, -5), (0, 2))",
                             [](const TensorList& in) { return roll(in[0], {1, -5}, {0, 2}); }));
  cases.push_back(unary_case("roll flattened", {strided_leaf({3, 4}, 4)}, "torch.roll(in0, 7)",
                             [](const TensorList& in) { return roll(in[0], {7}); }));
  cases.push_back(unary_case("roll repeated dim", {leaf({5}, 5)}, "torch.roll(in0, (2, 2), (0, 0))",
                             [](const TensorList& in) { return roll(in[0], {2, 2}, {0, 0}); }));
  cases.push_back(unary_case("repeat", {leaf({2, 3}, 6)}, "in0.repeat(2, 1, 3)",
                             [](const TensorList& in) { return repeat(in[0], {2, 1, 3}); }));
  cases.push_back(unary_case("repeat transposed", {transposed_leaf({2, 3}, 7)}, "in0.repeat(3, 2)",
                             [](const TensorList& in) { return repeat(in[0], {3, 2}); }));
  cases.push_back(unary_case("tile short reps", {leaf({2, 3}, 8)}, "torch.tile(in0, (2,))",
                             [](const TensorList& in) { return tile(in[0], {2}); }));
  cases.push_back(unary_case("tile long reps", {leaf({3}, 9)}, "torch.tile(in0, (2, 1, 2))",
                             [](const TensorList& in) { return tile(in[0], {2, 1, 2}); }));
  expect_matches_torch(cases);
}

TEST(TensorOpsTorch, SortMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  auto sorted = [](int64_t dim, bool descending) {
    return [=](const TensorList& in) {
      ValuesIndices s = sort(in[0], dim, descending, /*stable=*/true);
      return TensorList{s.values, s.indices, argsort(in[0], dim, descending, true)};
    };
  };
  cases.push_back({.name = "sort last dim",
                   .inputs = {leaf({3, 5}, 10)},
                   .python = "v, i = torch.sort(in0, stable=True)\nouts = [v, i, torch.argsort(in0, stable=True)]",
                   .kiln = sorted(-1, false)});
  cases.push_back({.name = "sort dim 0 descending",
                   .inputs = {transposed_leaf({4, 3}, 11)},
                   .python = "v, i = torch.sort(in0, dim=0, descending=True, stable=True)\n"
                             "outs = [v, i, torch.argsort(in0, dim=0, descending=True, stable=True)]",
                   .kiln = sorted(0, true)});
  // Ties and NaN: the stable order and the gradient of each tied entry. The
  // NaNs come from where(mask, nan, x) on both sides (the script's numbers
  // cannot spell NaN), which also tries where with a number on the way.
  Tensor nan_at = from_vector<bool>({false, false, false, true, false, false, false, false, true, false}, {2, 5});
  for (bool descending : {false, true}) {
    // A leaf per case: the gradients are compared after every case has run.
    Tensor ties = leaf_of({2, 1, 2, 7, 1, 2, -1, 1, 7, 1}, {2, 5});
    const std::string flag = descending ? "True" : "False";
    cases.push_back({.name = "sort ties and NaN" + std::string(descending ? " descending" : ""),
                     .inputs = {ties, nan_at},
                     .python = "x = torch.where(in1.bool(), float('nan'), in0)\nv, i = torch.sort(x, dim=1, descending=" +
                               flag + ", stable=True)\nouts = [v, i, torch.argsort(x, dim=1, descending=" + flag +
                               ", stable=True)]",
                     .kiln =
                         [descending](const TensorList& in) {
                           Tensor x = where(in[1], std::numeric_limits<double>::quiet_NaN(), in[0]);
                           ValuesIndices s = sort(x, 1, descending, /*stable=*/true);
                           return TensorList{s.values, s.indices, argsort(x, 1, descending, true)};
                         },
                     .rtol = 0,
                     .atol = 0});
  }
  expect_matches_torch(cases);
}

TEST(TensorOpsTorch, SignAndWhereMatchTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  Tensor x = leaf_of({-2, -0.0, 0, 3, 0.25, -1e-300}, {2, 3});
  cases.push_back(unary_case("sign", {x}, "torch.sign(in0)", [](const TensorList& in) { return sign(in[0]); }));
  Tensor cond = from_vector<bool>({true, false, false, true, false, true}, {2, 3});
  cases.push_back(unary_case("where(cond, 2.5, b)", {cond, leaf({2, 3}, 12)}, "torch.where(in0.bool(), 2.5, in1)",
                             [](const TensorList& in) { return where(in[0], 2.5, in[1]); }));
  cases.push_back(unary_case("where(cond, -1, b) broadcasting b", {cond, leaf({3}, 13)},
                             "torch.where(in0.bool(), -1, in1)",
                             [](const TensorList& in) { return where(in[0], -1, in[1]); }));
  cases.push_back(unary_case("where(cond, a, 4.0)", {cond, leaf({2, 1}, 14)}, "torch.where(in0.bool(), in1, 4.0)",
                             [](const TensorList& in) { return where(in[0], in[1], 4.0); }));
  cases.push_back(unary_case("where(cond, 1.5, -0.5)", {cond}, "torch.where(in0.bool(), 1.5, -0.5)",
                             [](const TensorList& in) { return where(in[0], 1.5, -0.5); }));
  expect_matches_torch(cases);
}

TEST(TensorOpsTorch, EinsumMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  struct Case {
    std::string equation;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> einsums = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}},
      {"ij,jk", {{2, 3}, {3, 4}}},
      {"bij,bjk->bik", {{3, 2, 4}, {3, 4, 2}}},
      {"i,j->ij", {{3}, {4}}},
      {"i,i", {{5}, {5}}},
      {"ij->ji", {{2, 3}}},
      {"ba", {{2, 3}}},
      {"ii->i", {{3, 3}}},
      {"ii", {{4, 4}}},
      {"iij->ji", {{3, 3, 2}}},
      {"aab,bcc->ac", {{2, 2, 3}, {3, 4, 4}}},
      {"...ij,...jk->...ik", {{2, 3, 2, 3}, {3, 3, 2}}},
      {"...ij,jk", {{5, 2, 3}, {3, 4}}},
      {"i...j,j...", {{2, 5, 3}, {3, 5}}},
      {"...ij->...", {{4, 2, 3}}},
      {"...ij->ij", {{4, 2, 3}}},
      {"...,...->...", {{2, 1}, {3}}},
      {"ij,jk", {{2, 3}, {1, 4}}},
      {"ij,ij->ij", {{2, 3}, {1, 3}}},
      {"ab,bc,cd->ad", {{2, 3}, {3, 4}, {4, 5}}},
      {"ab,cd,bc->da", {{2, 3}, {4, 5}, {3, 4}}},
      {"Ab,bA->A", {{2, 3}, {3, 2}}},
      {"bxik,bkjy->byij", {{2, 3, 4, 5}, {2, 5, 3, 2}}},
      {" i j , j k ", {{2, 3}, {3, 4}}},
  };
  std::vector<OracleCase> cases;
  for (size_t k = 0; k < einsums.size(); ++k) {
    const Case& c = einsums[k];
    TensorList inputs;
    std::string args;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      inputs.push_back(leaf(c.shapes[i], 20 + 3 * k + i));
      args += ", in" + std::to_string(i);
    }
    cases.push_back({.name = "einsum " + c.equation,
                     .inputs = inputs,
                     .python = "outs = [torch.einsum('" + c.equation + "'" + args + ")]",
                     .kiln = [equation = c.equation](const TensorList& in) { return TensorList{einsum(equation, in)}; }});
  }
  expect_matches_torch(cases);
}

}  // namespace
}  // namespace kiln::gradtest
