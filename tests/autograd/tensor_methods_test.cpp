// The math methods of Tensor (Note [Tensor methods] in tensor/tensor.h): each
// equals its free kiln:: function in value, in the node it records (grad_fn
// name and gradients) and in its errors; then a few LibTorch-style
// expressions end to end.
#include <functional>
#include <string>
#include <vector>

#include "autograd_test_util.h"
#include "tensor/constants.h"

namespace kiln::gradtest {
namespace {

using Fn = std::function<Tensor(const TensorList&)>;

// Floating inputs become fresh leaves that require grad (so that both sides
// start from equal, separate leaves); the others (indices, masks) are shared.
TensorList leaves_of(const TensorList& inputs) {
  TensorList out;
  for (const Tensor& t : inputs) out.push_back(t.is_floating_point() ? t.clone().requires_grad_() : t);
  return out;
}

// Expects method(inputs) and free_fn(inputs) to give equal results (bitwise),
// the same grad_fn name and, after a backward with the same upstream
// gradient, the same gradient in every leaf.
void expect_same_as_free(const std::string& name, const TensorList& inputs, const Fn& method, const Fn& free_fn) {
  SCOPED_TRACE(name);
  TensorList a = leaves_of(inputs), b = leaves_of(inputs);
  Tensor out_a = method(a), out_b = free_fn(b);
  expect_same(out_a, out_b);
  EXPECT_EQ(out_a.grad_fn_name(), out_b.grad_fn_name());
  if (!out_b.requires_grad()) return;
  EXPECT_FALSE(out_a.grad_fn_name().empty());
  Tensor upstream = uniform64(out_b.shape(), 99).to(out_b.dtype());
  out_a.backward(upstream);
  out_b.backward(upstream);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].requires_grad()) continue;
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    ASSERT_TRUE(a[i].grad().defined());
    expect_same(a[i].grad(), b[i].grad());
  }
}

Tensor positive(const Shape& shape, uint64_t seed) { return uniform64(shape, seed, 0.5, 2.0); }

TEST(TensorMethods, UnaryEqualTheirFreeFunctions) {
  const Tensor x = uniform64({3, 4}, 1), p = positive({3, 4}, 2);
  struct Case {
    const char* name;
    Tensor input;
    Fn method, free_fn;
  };
  const std::vector<Case> cases = {
      {"neg", x, [](auto& in) { return in[0].neg(); }, [](auto& in) { return neg(in[0]); }},
      {"abs", x, [](auto& in) { return in[0].abs(); }, [](auto& in) { return abs(in[0]); }},
      {"exp", x, [](auto& in) { return in[0].exp(); }, [](auto& in) { return exp(in[0]); }},
      {"log", p, [](auto& in) { return in[0].log(); }, [](auto& in) { return log(in[0]); }},
      {"sqrt", p, [](auto& in) { return in[0].sqrt(); }, [](auto& in) { return sqrt(in[0]); }},
      {"rsqrt", p, [](auto& in) { return in[0].rsqrt(); }, [](auto& in) { return rsqrt(in[0]); }},
      {"relu", x, [](auto& in) { return in[0].relu(); }, [](auto& in) { return relu(in[0]); }},
      {"sigmoid", x, [](auto& in) { return in[0].sigmoid(); }, [](auto& in) { return sigmoid(in[0]); }},
      {"tanh", x, [](auto& in) { return in[0].tanh(); }, [](auto& in) { return tanh(in[0]); }},
      {"clamp", x, [](auto& in) { return in[0].clamp(-0.5, 0.25); },
       [](auto& in) { return clamp(in[0], -0.5, 0.25); }},
      {"clamp min only", x, [](auto& in) { return in[0].clamp(0); },
       [](auto& in) { return clamp(in[0], 0, std::nullopt); }},
      {"clamp max only", x, [](auto& in) { return in[0].clamp({}, 0.1); },
       [](auto& in) { return clamp(in[0], std::nullopt, 0.1); }},
  };
  for (const Case& c : cases) expect_same_as_free(c.name, {c.input}, c.method, c.free_fn);
  // A non-contiguous input takes the same path.
  const Tensor t = uniform64({4, 3}, 3).t();
  expect_same_as_free("relu of a transpose", {t}, [](auto& in) { return in[0].relu(); },
                      [](auto& in) { return relu(in[0]); });
}

TEST(TensorMethods, BinaryEqualTheirFreeFunctions) {
  const Tensor x = uniform64({2, 3}, 4), y = uniform64({3}, 5), p = positive({2, 3}, 6);
  const Tensor cond = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  struct Case {
    const char* name;
    TensorList inputs;
    Fn method, free_fn;
  };
  const std::vector<Case> cases = {
      {"add", {x, y}, [](auto& in) { return in[0].add(in[1]); }, [](auto& in) { return add(in[0], in[1]); }},
      {"add alpha", {x, y}, [](auto& in) { return in[0].add(in[1], 2.5); },
       [](auto& in) { return add(in[0], in[1], 2.5); }},
      {"add scalar", {x}, [](auto& in) { return in[0].add(3); }, [](auto& in) { return add(in[0], 3); }},
      {"sub", {x, y}, [](auto& in) { return in[0].sub(in[1]); }, [](auto& in) { return sub(in[0], in[1]); }},
      {"sub alpha", {x, y}, [](auto& in) { return in[0].sub(in[1], -2); },
       [](auto& in) { return sub(in[0], in[1], -2); }},
      {"sub scalar", {x}, [](auto& in) { return in[0].sub(0.5); }, [](auto& in) { return sub(in[0], 0.5); }},
      {"mul", {x, y}, [](auto& in) { return in[0].mul(in[1]); }, [](auto& in) { return mul(in[0], in[1]); }},
      {"mul scalar", {x}, [](auto& in) { return in[0].mul(2); }, [](auto& in) { return mul(in[0], 2); }},
      {"div", {x, p}, [](auto& in) { return in[0].div(in[1]); }, [](auto& in) { return div(in[0], in[1]); }},
      {"div scalar", {x}, [](auto& in) { return in[0].div(4); }, [](auto& in) { return div(in[0], 4); }},
      {"pow", {p, y}, [](auto& in) { return in[0].pow(in[1]); }, [](auto& in) { return pow(in[0], in[1]); }},
      {"pow scalar", {x}, [](auto& in) { return in[0].pow(2); }, [](auto& in) { return pow(in[0], 2); }},
      {"maximum", {x, y}, [](auto& in) { return in[0].maximum(in[1]); },
       [](auto& in) { return maximum(in[0], in[1]); }},
      {"minimum", {x, y}, [](auto& in) { return in[0].minimum(in[1]); },
       [](auto& in) { return minimum(in[0], in[1]); }},
      {"max other", {x, y}, [](auto& in) { return in[0].max(in[1]); },
       [](auto& in) { return maximum(in[0], in[1]); }},
      {"min other", {x, y}, [](auto& in) { return in[0].min(in[1]); },
       [](auto& in) { return minimum(in[0], in[1]); }},
      {"clamp_min", {x}, [](auto& in) { return in[0].clamp_min(-0.1); },
       [](auto& in) { return clamp(in[0], -0.1, std::nullopt); }},
      {"clamp_max", {x}, [](auto& in) { return in[0].clamp_max(0.2); },
       [](auto& in) { return clamp(in[0], std::nullopt, 0.2); }},
      {"where", {x, y, cond}, [](auto& in) { return in[0].where(in[2], in[1]); },
       [](auto& in) { return where(in[2], in[0], in[1]); }},
      {"where scalar", {x, cond}, [](auto& in) { return in[0].where(in[1], -1); },
       [](auto& in) { return where(in[1], in[0], -1); }},
  };
  for (const Case& c : cases) expect_same_as_free(c.name, c.inputs, c.method, c.free_fn);
}

TEST(TensorMethods, ReductionsEqualTheirFreeFunctions) {
  const Tensor x = uniform64({3, 4, 2}, 7);
  struct Case {
    const char* name;
    Fn method, free_fn;
  };
  const std::vector<Case> cases = {
      {"sum", [](auto& in) { return in[0].sum(); }, [](auto& in) { return sum(in[0]); }},
      {"sum dims keepdim", [](auto& in) { return in[0].sum({1}, true); },
       [](auto& in) { return sum(in[0], {1}, true); }},
      {"sum of an int dim", [](auto& in) { return in[0].sum(-1); }, [](auto& in) { return sum(in[0], {-1}); }},
      {"sum two dims", [](auto& in) { return in[0].sum({0, 2}); }, [](auto& in) { return sum(in[0], {0, 2}); }},
      {"sum empty braces is all dims", [](auto& in) { return in[0].sum({}, true); },
       [](auto& in) { return sum(in[0], {}, true); }},
      {"sum dtype", [](auto& in) { return in[0].sum({1}, false, kFloat32); },
       [](auto& in) { return sum(in[0], {1}, false, kFloat32); }},
      {"sum all dtype", [](auto& in) { return in[0].sum(kFloat32); },
       [](auto& in) { return sum(in[0], {}, false, kFloat32); }},
      {"mean", [](auto& in) { return in[0].mean(); }, [](auto& in) { return mean(in[0]); }},
      {"mean dim", [](auto& in) { return in[0].mean(1, true); }, [](auto& in) { return mean(in[0], {1}, true); }},
      {"prod", [](auto& in) { return in[0].prod({2}); }, [](auto& in) { return prod(in[0], {2}); }},
      {"prod dim", [](auto& in) { return in[0].prod(0); }, [](auto& in) { return prod(in[0], {0}); }},
      {"amax", [](auto& in) { return in[0].amax({0, 1}); }, [](auto& in) { return amax(in[0], {0, 1}); }},
      {"amax dim", [](auto& in) { return in[0].amax(1, true); }, [](auto& in) { return amax(in[0], {1}, true); }},
      {"amin", [](auto& in) { return in[0].amin(); }, [](auto& in) { return amin(in[0]); }},
      {"amin dim", [](auto& in) { return in[0].amin(-1); }, [](auto& in) { return amin(in[0], {-1}); }},
      {"var", [](auto& in) { return in[0].var(); }, [](auto& in) { return var(in[0]); }},
      {"var dim", [](auto& in) { return in[0].var(1, 0, true); }, [](auto& in) { return var(in[0], {1}, 0, true); }},
      {"std", [](auto& in) { return in[0].std({0, 2}); }, [](auto& in) { return std(in[0], {0, 2}); }},
      {"std dim", [](auto& in) { return in[0].std(2); }, [](auto& in) { return std(in[0], {2}); }},
      {"logsumexp", [](auto& in) { return in[0].logsumexp({1}, true); },
       [](auto& in) { return logsumexp(in[0], {1}, true); }},
      {"logsumexp dim", [](auto& in) { return in[0].logsumexp(0); }, [](auto& in) { return logsumexp(in[0], {0}); }},
      {"max", [](auto& in) { return in[0].max(); }, [](auto& in) { return max(in[0]); }},
      {"min", [](auto& in) { return in[0].min(); }, [](auto& in) { return min(in[0]); }},
      {"max dim values", [](auto& in) { return in[0].max(1).values; },
       [](auto& in) { return max(in[0], 1).values; }},
      {"min dim keepdim values", [](auto& in) { return in[0].min(-1, true).values; },
       [](auto& in) { return min(in[0], -1, true).values; }},
      {"softmax", [](auto& in) { return in[0].softmax(-1); }, [](auto& in) { return softmax(in[0], -1); }},
      {"log_softmax", [](auto& in) { return in[0].log_softmax(1); },
       [](auto& in) { return log_softmax(in[0], 1); }},
  };
  for (const Case& c : cases) expect_same_as_free(c.name, {x}, c.method, c.free_fn);

  auto [values, indices] = x.max(1);
  ValuesIndices expected = max(x, 1);
  expect_same(values, expected.values);
  expect_same(indices, expected.indices);
  EXPECT_EQ(indices.dtype(), kInt64);
}

TEST(TensorMethods, MatrixProductsEqualTheirFreeFunctions) {
  const Tensor a = uniform64({3, 4}, 8), b = uniform64({4, 2}, 9);
  const Tensor ba = uniform64({2, 3, 4}, 10), bb = uniform64({2, 4, 5}, 11), v = uniform64({4}, 12);
  expect_same_as_free("matmul", {a, b}, [](auto& in) { return in[0].matmul(in[1]); },
                      [](auto& in) { return matmul(in[0], in[1]); });
  expect_same_as_free("matmul broadcast", {ba, v}, [](auto& in) { return in[0].matmul(in[1]); },
                      [](auto& in) { return matmul(in[0], in[1]); });
  expect_same_as_free("mm", {a, b}, [](auto& in) { return in[0].mm(in[1]); },
                      [](auto& in) { return mm(in[0], in[1]); });
  expect_same_as_free("bmm", {ba, bb}, [](auto& in) { return in[0].bmm(in[1]); },
                      [](auto& in) { return bmm(in[0], in[1]); });
}

TEST(TensorMethods, IndexingAndSelectionEqualTheirFreeFunctions) {
  const Tensor x = uniform64({3, 4}, 13), src = uniform64({2, 4}, 14);
  const Tensor rows = from_vector<int64_t>({2, 0}, {2});
  const Tensor cols = from_vector<int64_t>({1, 2, 0, 2, 2, 1, 0, 1}, {2, 4});  // rows of x
  const Tensor mask = from_vector<bool>({true, false, false, true}, {4});
  struct Case {
    const char* name;
    TensorList inputs;
    Fn method, free_fn;
  };
  const std::vector<Case> cases = {
      {"index_select", {x, rows}, [](auto& in) { return in[0].index_select(0, in[1]); },
       [](auto& in) { return index_select(in[0], 0, in[1]); }},
      {"gather", {x, cols}, [](auto& in) { return in[0].gather(0, in[1]); },
       [](auto& in) { return gather(in[0], 0, in[1]); }},
      {"scatter_add", {x, cols, src}, [](auto& in) { return in[0].scatter_add(0, in[1], in[2]); },
       [](auto& in) { return scatter_add(in[0], 0, in[1], in[2]); }},
      {"masked_fill", {x, mask}, [](auto& in) { return in[0].masked_fill(in[1], 0); },
       [](auto& in) { return masked_fill(in[0], in[1], 0); }},
      {"tril", {x}, [](auto& in) { return in[0].tril(); }, [](auto& in) { return tril(in[0]); }},
      {"triu", {x}, [](auto& in) { return in[0].triu(1); }, [](auto& in) { return triu(in[0], 1); }},
      {"topk values", {x}, [](auto& in) { return in[0].topk(2).values; },
       [](auto& in) { return topk(in[0], 2).values; }},
      {"topk smallest along 0", {x}, [](auto& in) { return in[0].topk(2, 0, false).values; },
       [](auto& in) { return topk(in[0], 2, 0, false).values; }},
      {"split", {x}, [](auto& in) { return in[0].split(3, 1)[1]; }, [](auto& in) { return split(in[0], 3, 1)[1]; }},
      {"split sizes", {x}, [](auto& in) { return in[0].split(std::vector<int64_t>{1, 2}, 0)[1]; },
       [](auto& in) { return split(in[0], std::vector<int64_t>{1, 2}, 0)[1]; }},
      {"chunk", {x}, [](auto& in) { return in[0].chunk(2, -1)[0]; }, [](auto& in) { return chunk(in[0], 2, -1)[0]; }},
      {"flip", {x}, [](auto& in) { return in[0].flip({0, 1}); }, [](auto& in) { return flip(in[0], {0, 1}); }},
      {"roll", {x}, [](auto& in) { return in[0].roll({1}, {1}); }, [](auto& in) { return roll(in[0], {1}, {1}); }},
      {"repeat", {x}, [](auto& in) { return in[0].repeat({2, 1, 3}); },
       [](auto& in) { return repeat(in[0], {2, 1, 3}); }},
      {"tile", {x}, [](auto& in) { return in[0].tile({2}); }, [](auto& in) { return tile(in[0], {2}); }},
      {"sort values", {x}, [](auto& in) { return in[0].sort(1, true).values; },
       [](auto& in) { return sort(in[0], 1, true).values; }},
      {"argsort", {x}, [](auto& in) { return in[0].argsort(0); }, [](auto& in) { return argsort(in[0], 0); }},
      {"cumsum", {x}, [](auto& in) { return in[0].cumsum(1); }, [](auto& in) { return cumsum(in[0], 1); }},
      {"cumprod", {x}, [](auto& in) { return in[0].cumprod(0); }, [](auto& in) { return cumprod(in[0], 0); }},
      {"sign", {x}, [](auto& in) { return in[0].sign(); }, [](auto& in) { return sign(in[0]); }},
  };
  for (const Case& c : cases) expect_same_as_free(c.name, c.inputs, c.method, c.free_fn);

  TopK best = x.topk(3, 1), expected = topk(x, 3, 1);
  expect_same(best.indices, expected.indices);
  EXPECT_EQ(x.split(3, 1).size(), split(x, 3, 1).size());
  EXPECT_EQ(x.chunk(3, 0).size(), 3u);
}

TEST(TensorMethods, ComparisonsAndIndicesEqualTheirFreeFunctionsAndRecordNothing) {
  const Tensor x = from_vector<double>({1, 2, 3, 2, 0, 5}, {2, 3}), y = from_vector<double>({2, 2, 1}, {3});
  const Tensor b = from_vector<bool>({true, false, true}, {3});
  struct Case {
    const char* name;
    Fn method, free_fn;
  };
  const std::vector<Case> cases = {
      {"eq", [](auto& in) { return in[0].eq(in[1]); }, [](auto& in) { return eq(in[0], in[1]); }},
      {"eq scalar", [](auto& in) { return in[0].eq(2); }, [](auto& in) { return eq(in[0], 2); }},
      {"ne", [](auto& in) { return in[0].ne(in[1]); }, [](auto& in) { return ne(in[0], in[1]); }},
      {"ne scalar", [](auto& in) { return in[0].ne(2); }, [](auto& in) { return ne(in[0], 2); }},
      {"lt", [](auto& in) { return in[0].lt(in[1]); }, [](auto& in) { return lt(in[0], in[1]); }},
      {"lt scalar", [](auto& in) { return in[0].lt(2); }, [](auto& in) { return lt(in[0], 2); }},
      {"le", [](auto& in) { return in[0].le(in[1]); }, [](auto& in) { return le(in[0], in[1]); }},
      {"le scalar", [](auto& in) { return in[0].le(2); }, [](auto& in) { return le(in[0], 2); }},
      {"gt", [](auto& in) { return in[0].gt(in[1]); }, [](auto& in) { return gt(in[0], in[1]); }},
      {"gt scalar", [](auto& in) { return in[0].gt(2); }, [](auto& in) { return gt(in[0], 2); }},
      {"ge", [](auto& in) { return in[0].ge(in[1]); }, [](auto& in) { return ge(in[0], in[1]); }},
      {"ge scalar", [](auto& in) { return in[0].ge(2); }, [](auto& in) { return ge(in[0], 2); }},
      {"argmax", [](auto& in) { return in[0].argmax(); }, [](auto& in) { return argmax(in[0]); }},
      {"argmax dim", [](auto& in) { return in[0].argmax(1, true); }, [](auto& in) { return argmax(in[0], 1, true); }},
      {"argmin dim", [](auto& in) { return in[0].argmin(0); }, [](auto& in) { return argmin(in[0], 0); }},
      {"max dim indices", [](auto& in) { return in[0].max(1).indices; },
       [](auto& in) { return max(in[0], 1).indices; }},
  };
  for (const Case& c : cases) {
    expect_same_as_free(c.name, {x, y}, c.method, c.free_fn);
    TensorList in = leaves_of({x, y});
    EXPECT_FALSE(c.method(in).requires_grad()) << c.name;
  }
  const Tensor bx = gt(x, 1.5);
  expect_same(bx.logical_not(), logical_not(bx));
  expect_same(bx.logical_and(b), logical_and(bx, b));
  expect_same(bx.logical_or(b), logical_or(bx, b));
  expect_same(bx.logical_xor(b), logical_xor(bx, b));

  const Tensor probs = from_vector<double>({0.1, 0.2, 0.7, 0.5, 0.5, 0.0}, {2, 3});
  Generator g1(5), g2(5);
  expect_same(probs.multinomial(4, true, &g1), multinomial(probs, 4, true, &g2));
}

TEST(TensorMethods, InPlaceEqualTheirFreeFunctionsAndReturnTheTensor) {
  const Tensor x = uniform64({2, 3}, 15), p = positive({2, 3}, 16), y = uniform64({3}, 17);
  const Tensor mask = from_vector<bool>({false, true, true}, {3});
  const Tensor index = from_vector<int64_t>({1, 0, 1}, {1, 3});
  struct Case {
    const char* name;
    Tensor start;
    std::function<Tensor&(Tensor&)> method, free_fn;
  };
  const std::vector<Case> cases = {
      {"add_", x, [&](Tensor& t) -> Tensor& { return t.add_(y, 2); }, [&](Tensor& t) -> Tensor& { return add_(t, y, 2); }},
      {"add_ scalar", x, [](Tensor& t) -> Tensor& { return t.add_(1); }, [](Tensor& t) -> Tensor& { return add_(t, 1); }},
      {"sub_", x, [&](Tensor& t) -> Tensor& { return t.sub_(y); }, [&](Tensor& t) -> Tensor& { return sub_(t, y); }},
      {"sub_ scalar", x, [](Tensor& t) -> Tensor& { return t.sub_(1); }, [](Tensor& t) -> Tensor& { return sub_(t, 1); }},
      {"mul_", x, [&](Tensor& t) -> Tensor& { return t.mul_(y); }, [&](Tensor& t) -> Tensor& { return mul_(t, y); }},
      {"mul_ scalar", x, [](Tensor& t) -> Tensor& { return t.mul_(2); }, [](Tensor& t) -> Tensor& { return mul_(t, 2); }},
      {"div_", x, [&](Tensor& t) -> Tensor& { return t.div_(p); }, [&](Tensor& t) -> Tensor& { return div_(t, p); }},
      {"div_ scalar", x, [](Tensor& t) -> Tensor& { return t.div_(3); }, [](Tensor& t) -> Tensor& { return div_(t, 3); }},
      {"pow_", p, [](Tensor& t) -> Tensor& { return t.pow_(1.5); }, [](Tensor& t) -> Tensor& { return pow_(t, 1.5); }},
      {"neg_", x, [](Tensor& t) -> Tensor& { return t.neg_(); }, [](Tensor& t) -> Tensor& { return neg_(t); }},
      {"abs_", x, [](Tensor& t) -> Tensor& { return t.abs_(); }, [](Tensor& t) -> Tensor& { return abs_(t); }},
      {"exp_", x, [](Tensor& t) -> Tensor& { return t.exp_(); }, [](Tensor& t) -> Tensor& { return exp_(t); }},
      {"log_", p, [](Tensor& t) -> Tensor& { return t.log_(); }, [](Tensor& t) -> Tensor& { return log_(t); }},
      {"sqrt_", p, [](Tensor& t) -> Tensor& { return t.sqrt_(); }, [](Tensor& t) -> Tensor& { return sqrt_(t); }},
      {"relu_", x, [](Tensor& t) -> Tensor& { return t.relu_(); }, [](Tensor& t) -> Tensor& { return relu_(t); }},
      {"sigmoid_", x, [](Tensor& t) -> Tensor& { return t.sigmoid_(); }, [](Tensor& t) -> Tensor& { return sigmoid_(t); }},
      {"tanh_", x, [](Tensor& t) -> Tensor& { return t.tanh_(); }, [](Tensor& t) -> Tensor& { return tanh_(t); }},
      {"clamp_", x, [](Tensor& t) -> Tensor& { return t.clamp_(-0.2, 0.3); },
       [](Tensor& t) -> Tensor& { return clamp_(t, -0.2, 0.3); }},
      {"clamp_min_", x, [](Tensor& t) -> Tensor& { return t.clamp_min_(-0.2); },
       [](Tensor& t) -> Tensor& { return clamp_(t, -0.2, std::nullopt); }},
      {"clamp_max_", x, [](Tensor& t) -> Tensor& { return t.clamp_max_(0.3); },
       [](Tensor& t) -> Tensor& { return clamp_(t, std::nullopt, 0.3); }},
      {"fill_", x, [](Tensor& t) -> Tensor& { return t.fill_(7); }, [](Tensor& t) -> Tensor& { return fill_(t, 7); }},
      {"zero_", x, [](Tensor& t) -> Tensor& { return t.zero_(); }, [](Tensor& t) -> Tensor& { return zero_(t); }},
      {"masked_fill_", x, [&](Tensor& t) -> Tensor& { return t.masked_fill_(mask, -1); },
       [&](Tensor& t) -> Tensor& { return masked_fill_(t, mask, -1); }},
      {"scatter_add_", x, [&](Tensor& t) -> Tensor& { return t.scatter_add_(0, index, y.unsqueeze(0)); },
       [&](Tensor& t) -> Tensor& { return scatter_add_(t, 0, index, y.unsqueeze(0)); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor a = c.start.clone(), b = c.start.clone();
    const uint64_t version = a.version();
    Tensor& result = c.method(a);
    c.free_fn(b);
    EXPECT_EQ(&result, &a);
    EXPECT_GT(a.version(), version);
    expect_same(a, b);
  }
  // A view written through a method writes its base, as the free function does.
  Tensor base = zeros({2, 3}, kFloat64);
  base.select(0, 1).fill_(2);
  expect_values(base, {0, 0, 0, 2, 2, 2});
}

TEST(TensorMethods, InPlaceRefusesWhatItsFreeFunctionRefuses) {
  Tensor w = leaf({3}, 18);
  expect_error([&] { w.mul_(2); }, "mul_");
  expect_error([&] { mul_(w, 2); }, "mul_");
  expect_error([&] { w.zero_(); }, "zero_");
  {
    NoGradGuard no_grad;
    w.mul_(0).add_(1);  // a parameter update, as an optimizer writes it
  }
  expect_values(w.detach(), {1, 1, 1});
}

TEST(TensorMethods, ErrorsAreTheFreeFunctionsErrors) {
  const Tensor a = uniform64({2, 3}, 19), b = uniform64({2, 3}, 20);
  expect_error([&] { a.matmul(b); }, "matmul");
  expect_error([&] { a.sum({2}); }, "sum");
  expect_error([&] { a.softmax(5); }, "softmax");
  expect_error([&] { a.topk(4); }, "topk");
  expect_error([&] { a.tril().index_select(0, from_vector<int64_t>({3}, {1})); }, "index_select");
}

// The expressions a LibTorch user writes, each checked against the same
// computation in free functions.
TEST(TensorMethods, LibTorchStyleExpressions) {
  // A linear layer, a nonlinearity and a loss, then the gradient of the weight.
  const Tensor xv = uniform64({4, 3}, 21), wv = uniform64({3, 2}, 22), bv = uniform64({2}, 23);
  Tensor w1 = wv.clone().requires_grad_(), w2 = wv.clone().requires_grad_();
  Tensor loss1 = xv.matmul(w1).add(bv).relu().pow(2).mean();
  Tensor loss2 = mean(pow(relu(add(matmul(xv, w2), bv)), 2));
  loss1.backward();
  loss2.backward();
  expect_same(loss1, loss2);
  expect_same(w1.grad(), w2.grad());
  EXPECT_EQ(loss1.grad_fn_name(), "MeanBackward");

  // Accuracy of a batch of logits.
  const Tensor logits = from_vector<double>({0.1, 2.0, -1.0, 3.0, 0.5, 0.2, 0.0, 0.0, 1.0}, {3, 3});
  const Tensor target = from_vector<int64_t>({1, 0, 0}, {3});
  EXPECT_EQ(logits.argmax(1).eq(target).sum().item<int64_t>(), 2);

  // Masked attention weights, as a causal mask is applied.
  const Tensor scores = uniform64({3, 3}, 24);
  const Tensor causal = ones({3, 3}, kBool).triu(1);
  Tensor attn = scores.masked_fill(causal, -INFINITY).softmax(-1);
  expect_same(attn, softmax(masked_fill(scores, triu(ones({3, 3}, kBool), 1), -INFINITY), -1));
  expect_values(attn.sum({1}, true), {1, 1, 1}, 1e-12);

  // A hand-written SGD step.
  Tensor w = wv.clone().requires_grad_();
  xv.matmul(w).tanh().sum().backward();
  const Tensor expected = sub(wv, mul(w.grad(), 0.1));
  {
    NoGradGuard no_grad;
    w.sub_(w.grad().mul(0.1));
    w.grad().zero_();
  }
  expect_same(w.detach(), expected);
  expect_values(w.grad(), std::vector<double>(6, 0.0));

  // The largest value and its index along a dim, as std::tie would give them.
  auto [top, where_top] = logits.max(1);
  expect_values(top, {2.0, 3.0, 1.0});
  expect_values(where_top, {1, 0, 2});
  // Normalising by the per-row norm.
  Tensor normed = xv.div(xv.pow(2).sum(1, true).sqrt());
  expect_same(normed, div(xv, sqrt(sum(pow(xv, 2), {1}, true))));
  expect_values(normed.pow(2).sum(1), {1, 1, 1, 1}, 1e-12);
}

}  // namespace
}  // namespace kiln::gradtest
