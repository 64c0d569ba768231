// einsum (tensor/einsum.h) against a brute-force float64 reference that
// sums the product of the operands over every assignment of the
// subscripts; torch's output shapes and rules (implicit output, diagonals,
// ellipsis broadcasting, size-1 broadcasting, integer sums) as torch 1.13
// gives them; every error path; and CUDA against the CPU (skipped without a
// GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tensor/cuda_status.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64, kCPU).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

Tensor random_values(const Shape& shape, uint64_t seed) {
  return from_vector(pseudo_random(shape_numel(shape), -1, 1, seed), shape);
}

// The reference for an equation of letters with an explicit "->": for every
// assignment of values to the subscripts, the product of the operands'
// entries is added to the output's entry. A size-1 dim broadcasts.
std::vector<double> reference(const std::string& equation, const std::vector<Tensor>& operands) {
  const size_t arrow = equation.find("->");
  std::vector<std::string> terms(1);
  for (char c : equation.substr(0, arrow)) {
    if (c == ',') {
      terms.emplace_back();
    } else {
      terms.back() += c;
    }
  }
  const std::string output = equation.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], operands[i].size(d));
  std::vector<char> labels;
  int64_t combinations = 1;
  for (const auto& [label, n] : size) {
    labels.push_back(label);
    combinations *= n;
  }
  int64_t out_numel = 1;
  for (char c : output) out_numel *= size[c];
  std::vector<double> out(out_numel, 0.0);
  std::vector<std::vector<double>> values;
  for (const Tensor& t : operands) values.push_back(values_of(t));
  for (int64_t k = 0; k < combinations; ++k) {
    std::map<char, int64_t> at;
    int64_t rest = k;
    for (auto it = labels.rbegin(); it != labels.rend(); ++it) {
      at[*it] = rest % size[*it];
      rest /= size[*it];
    }
    double product = 1.0;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const int64_t n = operands[i].size(d);
        offset = offset * n + (n == 1 ? 0 : at[terms[i][d]]);
      }
      product *= values[i][offset];
    }
    int64_t o = 0;
    for (char c : output) o = o * size[c] + at[c];
    out[o] += product;
  }
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << what << " element " << i;
}

struct Case {
  std::string equation;         // given to einsum
  std::vector<Shape> shapes;    // of the operands
  Shape out_shape;              // torch's
  std::string letters = "";     // the same sum with letters only and "->", for the reference
};

TEST(Einsum, MatchesTheReferenceAndTorchsShapes) {
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}, {2, 4}},
      {"ij,jk", {{2, 3}, {3, 4}}, {2, 4}, "ij,jk->ik"},
      {"ij,jk->", {{2, 3}, {3, 4}}, {}},
      {"bij,bjk->bik", {{5, 2, 3}, {5, 3, 4}}, {5, 2, 4}},
      {"i,j->ij", {{3}, {4}}, {3, 4}},
      {"i,i->", {{6}, {6}}, {}},
      {"i,i", {{6}, {6}}, {}, "i,i->"},
      {"ij,ij->ij", {{2, 3}, {2, 3}}, {2, 3}},
      {"ij,ij,ij->j", {{2, 3}, {2, 3}, {2, 3}}, {3}},
      {"ab,bc,cd->ad", {{2, 3}, {3, 4}, {4, 5}}, {2, 5}},
      {"ab,cd,bc->da", {{2, 3}, {4, 5}, {3, 4}}, {5, 2}},
      {"ij->ji", {{2, 3}}, {3, 2}},
      {"ba", {{2, 3}}, {3, 2}, "ba->ab"},
      {"ij->", {{2, 3}}, {}},
      {"ijk->kji", {{2, 3, 4}}, {4, 3, 2}},
      {"ijk->j", {{2, 3, 4}}, {3}},
      {"Ab,bA->A", {{2, 3}, {3, 2}}, {2}},
      {"bA", {{2, 3}}, {3, 2}, "bA->Ab"},
      {" i j , j k ", {{2, 3}, {3, 4}}, {2, 4}, "ij,jk->ik"},
      // Size-1 dims broadcast.
      {"ij,jk", {{2, 3}, {1, 4}}, {2, 4}, "ij,jk->ik"},
      {"ij,ij->ij", {{2, 3}, {1, 3}}, {2, 3}},
      {"i,i->i", {{1}, {3}}, {3}},
      {"bij,bjk->bik", {{1, 2, 3}, {4, 3, 2}}, {4, 2, 2}},
      // Batch, row, column and contracted dims all in one product.
      {"bxik,bkjy->byij", {{2, 3, 4, 5}, {2, 5, 3, 2}}, {2, 2, 4, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.equation);
    std::vector<Tensor> operands;
    for (size_t i = 0; i < c.shapes.size(); ++i) operands.push_back(random_values(c.shapes[i], 1 + i));
    Tensor out = einsum(c.equation, operands);
    EXPECT_EQ(out.shape(), c.out_shape);
    EXPECT_EQ(out.dtype(), DType::Float64);
    expect_near(values_of(out), reference(c.letters.empty() ? c.equation : c.letters, operands), c.equation);
  }
}

TEST(Einsum, RepeatedSubscriptsTakeTheDiagonal) {
  Tensor m = random_values({3, 3}, 2);
  std::vector<double> v = values_of(m);
  expect_near(values_of(einsum("ii->i", {m})), {v[0], v[4], v[8]}, "diagonal");
  EXPECT_NEAR(einsum("ii", {m}).item<double>(), v[0] + v[4] + v[8], 1e-15);  // the trace
  EXPECT_EQ(einsum("ii", {m}).shape(), Shape{});
  Tensor t = random_values({3, 3, 2}, 3);
  Tensor d = einsum("iij->ji", {t});
  EXPECT_EQ(d.shape(), (Shape{2, 3}));
  std::vector<double> tv = values_of(t);
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(values_of(d)[j * 3 + i], tv[(i * 3 + i) * 2 + j]);
  // Diagonals of both operands, then contracted.
  Tensor a = random_values({2, 2, 3}, 4), b = random_values({3, 4, 4}, 5);
  Tensor a_diag = einsum("aab->ab", {a}), b_diag = einsum("bcc->bc", {b});
  expect_near(values_of(einsum("aab,bcc->ac", {a, b})), values_of(einsum("ab,bc->ac", {a_diag, b_diag})), "aab,bcc");
  // A non-contiguous operand, and a repeat across three dims.
  Tensor mt = m.t();
  expect_near(values_of(einsum("ii->i", {mt})), {v[0], v[4], v[8]}, "transposed");
  Tensor cube = random_values({2, 2, 2}, 6);
  std::vector<double> cv = values_of(cube);
  expect_near(values_of(einsum("iii->i", {cube})), {cv[0], cv[7]}, "iii");
}

TEST(Einsum, EllipsisBroadcastsFromTheRight) {
  Tensor a = random_values({5, 2, 3}, 7), b = random_values({5, 3, 4}, 8), w = random_values({3, 4}, 9);
  expect_near(values_of(einsum("...ij,...jk->...ik", {a, b})), reference("bij,bjk->bik", {a, b}), "batched");
  expect_near(values_of(einsum("...ij,jk", {a, w})), reference("bij,jk->bik", {a, w}), "implicit ellipsis first");
  EXPECT_EQ(einsum("...ij->...", {a}).shape(), Shape{5});
  expect_near(values_of(einsum("...ij->ij", {a})), reference("bij->ij", {a}), "ellipsis summed");
  EXPECT_EQ(einsum("...ij", {a}).shape(), (Shape{5, 2, 3}));
  // An ellipsis in the middle: torch.einsum('i...j,j...', (2, 5, 3), (3, 5)) is (5, 2).
  Tensor x = random_values({2, 5, 3}, 10), y = random_values({3, 5}, 11);
  Tensor xy = einsum("i...j,j...", {x, y});
  EXPECT_EQ(xy.shape(), (Shape{5, 2}));
  expect_near(values_of(xy), reference("iaj,ja->ai", {x, y}), "middle");
  // Ellipses of different lengths and size-1 dims: (2, 1) against (3,) is (2, 3).
  Tensor p = random_values({2, 1}, 12), q = random_values({3}, 13);
  Tensor pq = einsum("...,...->...", {p, q});
  EXPECT_EQ(pq.shape(), (Shape{2, 3}));
  expect_near(values_of(pq), values_of(mul(p, q)), "broadcast");
  // An ellipsis covering no dims.
  EXPECT_EQ(einsum("...i,i->...", {q, q}).shape(), Shape{});
}

TEST(Einsum, ScalarsEmptyDimsAndIntegers) {
  Tensor s = scalar_tensor(2.5, DType::Float64);
  EXPECT_EQ(einsum("", {s}).item<double>(), 2.5);
  EXPECT_EQ(einsum("->", {s}).item<double>(), 2.5);
  Tensor v = random_values({3}, 14);
  expect_near(values_of(einsum("i,->i", {v, s})), values_of(mul(v, 2.5)), "times a scalar");
  // Empty dims: an empty outer product, and a contraction over nothing is zeros.
  EXPECT_EQ(einsum("i,j->ij", {zeros({0}, DType::Float64), v}).shape(), (Shape{0, 3}));
  Tensor z = einsum("ij,jk->ik", {zeros({2, 0}, DType::Float64), zeros({0, 3}, DType::Float64)});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of(z), std::vector<double>(6, 0.0));
  EXPECT_EQ(values_of(einsum("ij->j", {zeros({0, 2}, DType::Float64)})), (std::vector<double>{0, 0}));
  // Integer sums give int64, as torch.sum; products keep the dtype.
  Tensor i8 = full({2, 3}, 3, DType::Int8);
  EXPECT_EQ(einsum("ij->", {i8}).dtype(), DType::Int64);
  EXPECT_EQ(einsum("ij->", {i8}).item<int64_t>(), 18);
  EXPECT_EQ(einsum("ij,ij->ij", {i8, i8}).dtype(), DType::Int8);
  EXPECT_EQ(einsum("ij->ji", {i8}).dtype(), DType::Int8);
  // float32 as well as float64.
  Tensor a = random_values({3, 4}, 15).to(DType::Float32), b = random_values({4, 2}, 16).to(DType::Float32);
  Tensor ab = einsum("ij,jk->ik", {a, b});
  EXPECT_EQ(ab.dtype(), DType::Float32);
  std::vector<double> want = reference("ij,jk->ik", {a, b}), got = values_of(ab);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}

TEST(Einsum, RejectsBadEquationsAndOperands) {
  Tensor a = zeros({2, 3}), b = zeros({3, 4});
  expect_error([&] { einsum("ij,jk", {a}); }, "einsum: the equation 'ij,jk' has 2 input terms but 1 operands were given");
  expect_error([&] { einsum("ij", {a, b}); }, "einsum: the equation 'ij' has 1 input terms but 2 operands were given");
  expect_error([&] { einsum("ijk", {a}); },
               "einsum: operand 0 of shape [2, 3] has 2 dims but its term in 'ijk' has 3 subscripts and no ellipsis");
  expect_error([&] { einsum("i", {a}); }, "has 2 dims but its term in 'i' has 1 subscripts");
  expect_error([&] { einsum("ijk...", {a}); },
               "einsum: operand 0 of shape [2, 3] has 2 dims, fewer than the 3 subscripts of its term");
  expect_error([&] { einsum("i1", {a}); },
               "einsum: invalid subscript '1' at index 1 of 'i1'; subscripts must be letters in [a-zA-Z]");
  expect_error([&] { einsum("ij->ij->", {a}); }, "einsum: invalid subscript '-' at index 6 of 'ij->ij->'");
  expect_error([&] { einsum("ij->i,j", {a}); }, "einsum: invalid subscript ',' at index 5");
  expect_error([&] { einsum("i->ii", {zeros({2})}); }, "einsum: output subscript i appears more than once in 'i->ii'");
  expect_error([&] { einsum("i->j", {zeros({2})}); },
               "einsum: output subscript j does not appear in any input term of 'i->j'");
  expect_error([&] { einsum("i.j", {a}); },
               "einsum: found '.' at index 1 of 'i.j' in the term of operand 0 that is not part of an ellipsis");
  expect_error([&] { einsum("i......", {a}); }, "in the term of operand 0, which already has an ellipsis (...)");
  expect_error([&] { einsum("ij->..i..", {a}); }, "in the term of the output that is not part of an ellipsis");
  expect_error([&] { einsum("ii->i", {a}); },
               "einsum: subscript i is repeated in the term of operand 0 of shape [2, 3] but its sizes differ (2 != 3)");
  expect_error([&] { einsum("ij,jk", {a, zeros({4, 4})}); },
               "einsum: subscript j has size 4 in operand 1, which does not broadcast with size 3 in an earlier operand");
  expect_error([&] { einsum("...,...", {zeros({2}), zeros({3})}); },
               "einsum: the ellipsis (...) of operand 1 of shape [3] does not broadcast with the earlier operands'");
  expect_error([&] { einsum("ij,jk", {a, zeros({3, 4}, DType::Float64)}); },
               "einsum: operand 1 is float64 but operand 0 is float32; the operands must share a dtype");
  expect_error([&] { einsum("ij", {}); }, "einsum: expected at least one operand for 'ij'");
  expect_error([&] { einsum("ij", {Tensor()}); }, "einsum: operand 0 is undefined");
}

// ---- CUDA against the CPU ----

TEST(EinsumCuda, MatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason();
  const Device gpu = cuda_device(0);
  const std::vector<Case> cases = {
      {"bij,bjk->bik", {{5, 2, 3}, {5, 3, 4}}, {}}, {"ii->i", {{4, 4}}, {}},
      {"...ij,jk", {{2, 5, 3}, {3, 4}}, {}},       {"ab,bc,cd->ad", {{2, 3}, {3, 4}, {4, 5}}, {}},
      {"i,j->ij", {{3}, {4}}, {}},                 {"bxik,bkjy->byij", {{2, 3, 4, 5}, {2, 5, 3, 2}}, {}},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> cpu, dev;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      cpu.push_back(random_values(c.shapes[i], 20 + i));
      dev.push_back(cpu.back().to(gpu));
    }
    Tensor out = einsum(c.equation, dev);
    EXPECT_EQ(out.device(), gpu) << c.equation;
    expect_near(values_of(out), values_of(einsum(c.equation, cpu)), c.equation);
  }
}

}  // namespace
}  // namespace kiln
