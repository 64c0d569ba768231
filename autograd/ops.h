// The differentiable tensor functions users call: the same names and
// semantics as the kiln::ops:: functions of the tensor layer (see those
// headers for shapes, broadcasting and type promotion), plus recording for
// autograd (Note [Two levels of ops] in autograd/function.h).
//
// Functions whose results carry no gradient (comparisons, argmax, one_hot,
// in-place ops) are the tensor layer's own, brought in by using-declarations;
// the in-place ones refuse to run on a tensor that requires grad while grad
// mode is on (wrap parameter updates in NoGradGuard).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "tensor/ops.h"

namespace kiln {

// ---- unary (autograd/ops/unary.cpp) ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- binary (autograd/ops/binary.cpp) ----
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);

// ---- reductions (autograd/ops/reduce.cpp) ----
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, DType dtype);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- matrix products (autograd/ops/linalg.cpp) ----
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- joining, splitting, indexing (autograd/ops/shape.cpp, index.cpp) ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---- selecting and sampling (autograd/ops/select.cpp; tensor/select.h) ----
// tril/triu pass the gradient through their triangle; masked_fill passes it
// where the mask is false; topk's values send theirs back to the indices.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
TopK topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

// ---- cumulative sums and products (autograd/ops/scan.cpp; tensor/scan.h) ----
// cumsum's gradient is the sum of the gradients at and after each entry;
// cumprod's is right where the input has zeros too.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// ---- reordering, sorting, sign, where with numbers, einsum
// (autograd/ops/reorder.cpp and einsum.cpp; sort in select.cpp, sign in
// unary.cpp, where in binary.cpp; tensor/reorder.h, select.h, einsum.h) ----
// flip's gradient is flipped back, roll's rolled back, repeat's summed over
// the tiles, and sort's values send theirs back to their indices; sign's is
// zero. tile is repeat, and einsum a composition of views, mul, sum and bmm
// (Note [Einsum by composition]), recording nothing of their own. argsort's
// indices carry no gradient.
Tensor flip(const Tensor& x, const Shape& dims);
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});
Tensor repeat(const Tensor& x, const Shape& repeats);
Tensor tile(const Tensor& x, const Shape& reps);
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
using ops::argsort;
Tensor sign(const Tensor& x);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor where(const Tensor& cond, Scalar a, Scalar b);
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

// ---- no gradient: the tensor layer's functions ----
using ops::argmax;
using ops::argmin;
using ops::eq;
using ops::ge;
using ops::gt;
using ops::le;
using ops::logical_and;
using ops::logical_not;
using ops::logical_or;
using ops::logical_xor;
using ops::lt;
using ops::multinomial;
using ops::ne;
using ops::one_hot;

// ---- in place: no gradient, and refused on tensors that require grad
// while grad mode is on (autograd/ops/inplace.cpp); relu_ alone is recorded
// (Note [Recorded in-place ops] in autograd/function.h) ----
Tensor& add_(Tensor& x, const Tensor& b, Scalar alpha = 1);
Tensor& add_(Tensor& x, Scalar b);
Tensor& sub_(Tensor& x, const Tensor& b, Scalar alpha = 1);
Tensor& sub_(Tensor& x, Scalar b);
Tensor& mul_(Tensor& x, const Tensor& b);
Tensor& mul_(Tensor& x, Scalar b);
Tensor& div_(Tensor& x, const Tensor& b);
Tensor& div_(Tensor& x, Scalar b);
Tensor& pow_(Tensor& x, Scalar exponent);
Tensor& neg_(Tensor& x);
Tensor& abs_(Tensor& x);
Tensor& exp_(Tensor& x);
Tensor& log_(Tensor& x);
Tensor& sqrt_(Tensor& x);
Tensor& relu_(Tensor& x);
Tensor& sigmoid_(Tensor& x);
Tensor& tanh_(Tensor& x);
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& fill_(Tensor& x, Scalar value);
Tensor& zero_(Tensor& x);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, Scalar value);
Tensor& scatter_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, Scalar b);

}  // namespace kiln
