// The math methods of Tensor (Note [Tensor methods] in tensor/tensor.h):
// each is one call of the differentiable kiln:: function of the same name,
// so that x.relu() records exactly what kiln::relu(x) records.
#include "autograd/ops.h"

namespace kiln {

// ---- unary ----
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return kiln::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(Scalar min) const { return kiln::clamp(*this, min, std::nullopt); }
Tensor Tensor::clamp_max(Scalar max) const { return kiln::clamp(*this, std::nullopt, max); }
Tensor Tensor::logical_not() const { return kiln::logical_not(*this); }

// ---- binary ----
Tensor Tensor::add(const Tensor& other, Scalar alpha) const { return kiln::add(*this, other, alpha); }
Tensor Tensor::add(Scalar other) const { return kiln::add(*this, other); }
Tensor Tensor::sub(const Tensor& other, Scalar alpha) const { return kiln::sub(*this, other, alpha); }
Tensor Tensor::sub(Scalar other) const { return kiln::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return kiln::mul(*this, other); }
Tensor Tensor::mul(Scalar other) const { return kiln::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return kiln::div(*this, other); }
Tensor Tensor::div(Scalar other) const { return kiln::div(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return kiln::pow(*this, exponent); }
Tensor Tensor::pow(Scalar exponent) const { return kiln::pow(*this, exponent); }
Tensor Tensor::maximum(const Tensor& other) const { return kiln::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return kiln::minimum(*this, other); }
Tensor Tensor::max(const Tensor& other) const { return kiln::maximum(*this, other); }
Tensor Tensor::min(const Tensor& other) const { return kiln::minimum(*this, other); }
Tensor Tensor::where(const Tensor& condition, const Tensor& other) const {
  return kiln::where(condition, *this, other);
}
Tensor Tensor::where(const Tensor& condition, Scalar other) const { return kiln::where(condition, *this, other); }

// ---- comparisons and logic ----
Tensor Tensor::eq(const Tensor& other) const { return kiln::eq(*this, other); }
Tensor Tensor::eq(Scalar other) const { return kiln::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return kiln::ne(*this, other); }
Tensor Tensor::ne(Scalar other) const { return kiln::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return kiln::lt(*this, other); }
Tensor Tensor::lt(Scalar other) const { return kiln::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return kiln::le(*this, other); }
Tensor Tensor::le(Scalar other) const { return kiln::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return kiln::gt(*this, other); }
Tensor Tensor::gt(Scalar other) const { return kiln::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return kiln::ge(*this, other); }
Tensor Tensor::ge(Scalar other) const { return kiln::ge(*this, other); }
Tensor Tensor::logical_and(const Tensor& other) const { return kiln::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor& other) const { return kiln::logical_or(*this, other); }
Tensor Tensor::logical_xor(const Tensor& other) const { return kiln::logical_xor(*this, other); }

// ---- reductions ----
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::sum(const Shape& dims, bool keepdim, DType dtype) const {
  return kiln::sum(*this, dims, keepdim, dtype);
}
Tensor Tensor::sum(DType dtype) const { return kiln::sum(*this, {}, false, dtype); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::prod(const Shape& dims, bool keepdim) const { return kiln::prod(*this, dims, keepdim); }
Tensor Tensor::amax(const Shape& dims, bool keepdim) const { return kiln::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const Shape& dims, bool keepdim) const { return kiln::amin(*this, dims, keepdim); }
Tensor Tensor::var(const Shape& dims, int64_t correction, bool keepdim) const {
  return kiln::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const Shape& dims, int64_t correction, bool keepdim) const {
  return kiln::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const { return kiln::logsumexp(*this, dims, keepdim); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const { return kiln::max(*this, dim, keepdim); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const { return kiln::min(*this, dim, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const { return kiln::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const { return kiln::argmin(*this, dim, keepdim); }
Tensor Tensor::softmax(int64_t dim) const { return kiln::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return kiln::log_softmax(*this, dim); }

// ---- matrix products ----
Tensor Tensor::matmul(const Tensor& other) const { return kiln::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return kiln::mm(*this, other); }
Tensor Tensor::bmm(const Tensor& other) const { return kiln::bmm(*this, other); }

// ---- splitting, indexing, selecting ----
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const { return kiln::split(*this, split_size, dim); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  return kiln::split(*this, sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return kiln::chunk(*this, chunks, dim); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return kiln::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return kiln::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return kiln::scatter_add(*this, dim, index, src);
}
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const { return kiln::masked_fill(*this, mask, value); }
Tensor Tensor::tril(int64_t diagonal) const { return kiln::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return kiln::triu(*this, diagonal); }
TopK Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return kiln::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Generator* gen) const {
  return kiln::multinomial(*this, num_samples, replacement, gen);
}

// ---- reordering, sorting, scans ----
Tensor Tensor::flip(const Shape& dims) const { return kiln::flip(*this, dims); }
Tensor Tensor::roll(const Shape& shifts, const Shape& dims) const { return kiln::roll(*this, shifts, dims); }
Tensor Tensor::repeat(const Shape& repeats) const { return kiln::repeat(*this, repeats); }
Tensor Tensor::tile(const Shape& reps) const { return kiln::tile(*this, reps); }
ValuesIndices Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return kiln::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return kiln::argsort(*this, dim, descending, stable);
}
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const { return kiln::cumsum(*this, dim, dtype); }
Tensor Tensor::cumprod(int64_t dim, std::optional<DType> dtype) const { return kiln::cumprod(*this, dim, dtype); }
Tensor Tensor::sign() const { return kiln::sign(*this); }

// ---- in place ----
Tensor& Tensor::add_(const Tensor& other, Scalar alpha) { return kiln::add_(*this, other, alpha); }
Tensor& Tensor::add_(Scalar other) { return kiln::add_(*this, other); }
Tensor& Tensor::sub_(const Tensor& other, Scalar alpha) { return kiln::sub_(*this, other, alpha); }
Tensor& Tensor::sub_(Scalar other) { return kiln::sub_(*this, other); }
Tensor& Tensor::mul_(const Tensor& other) { return kiln::mul_(*this, other); }
Tensor& Tensor::mul_(Scalar other) { return kiln::mul_(*this, other); }
Tensor& Tensor::div_(const Tensor& other) { return kiln::div_(*this, other); }
Tensor& Tensor::div_(Scalar other) { return kiln::div_(*this, other); }
Tensor& Tensor::pow_(Scalar exponent) { return kiln::pow_(*this, exponent); }
Tensor& Tensor::neg_() { return kiln::neg_(*this); }
Tensor& Tensor::abs_() { return kiln::abs_(*this); }
Tensor& Tensor::exp_() { return kiln::exp_(*this); }
Tensor& Tensor::log_() { return kiln::log_(*this); }
Tensor& Tensor::sqrt_() { return kiln::sqrt_(*this); }
Tensor& Tensor::relu_() { return kiln::relu_(*this); }
Tensor& Tensor::sigmoid_() { return kiln::sigmoid_(*this); }
Tensor& Tensor::tanh_() { return kiln::tanh_(*this); }
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) { return kiln::clamp_(*this, min, max); }
Tensor& Tensor::clamp_min_(Scalar min) { return kiln::clamp_(*this, min, std::nullopt); }
Tensor& Tensor::clamp_max_(Scalar max) { return kiln::clamp_(*this, std::nullopt, max); }
Tensor& Tensor::fill_(Scalar value) { return kiln::fill_(*this, value); }
Tensor& Tensor::zero_() { return kiln::zero_(*this); }
Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) { return kiln::masked_fill_(*this, mask, value); }
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  return kiln::scatter_add_(*this, dim, index, src);
}

}  // namespace kiln
