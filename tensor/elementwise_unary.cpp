// Unary elementwise ops, clamp, and their in-place forms.
#include "tensor/elementwise.h"
#include "tensor/elementwise_internal.h"
#include "tensor/quantized_grid.h"

namespace kiln::ops {

namespace {

// What each unary op returns for an input dtype.
enum class ResultKind {
  Floating,  // exp, log, ...: integers and bool give the default float type, as torch
  Numeric,   // neg, abs, relu: the input's dtype; bool is rejected
  Bool,      // logical_not
};

struct UnaryInfo {
  UnaryOp op;
  std::string_view name;
  ResultKind kind;
};

DType unary_result(const UnaryInfo& info, DType input) {
  switch (info.kind) {
    case ResultKind::Floating: return is_floating(input) ? input : kDefaultFloat;
    case ResultKind::Bool: return DType::Bool;
    case ResultKind::Numeric: break;
  }
  if (info.op == UnaryOp::Neg) {
    KILN_CHECK(input != DType::Bool, "neg: negating a bool tensor is not supported; use logical_not() instead");
  }
  KILN_CHECK(input != DType::Bool, info.name, ": not supported for bool tensors");
  return input;
}

Tensor run_unary(const UnaryInfo& info, const Tensor& x) {
  DType result = unary_result(info, x.dtype());
  // LogicalNot reads any dtype; the others read their result dtype.
  DType compute = info.kind == ResultKind::Bool ? x.dtype() : result;
  Tensor out = Tensor::empty(x.shape(), {result, x.device()});
  if (out.numel() > 0) backend_for(out.device()).unary(info.op, out, x.to(compute));
  return out;
}

Tensor& run_unary_(const UnaryInfo& info, Tensor& x) {
  std::string in_place_name = std::string(info.name) + "_";
  DType result = unary_result(info, x.dtype());
  elementwise::check_in_place(in_place_name, x, result);
  if (x.numel() == 0) return x;
  if (result == x.dtype()) {
    // Output aliases the input exactly, which every kernel allows.
    backend_for(x.device()).unary(info.op, x, x);
    x.bump_version();
    return x;
  }
  Tensor out = Tensor::empty(x.shape(), {result, x.device()});
  backend_for(out.device()).unary(info.op, out, x.to(result));
  elementwise::assign_in_place(x, out);
  return x;
}

constexpr UnaryInfo kNeg{UnaryOp::Neg, "neg", ResultKind::Numeric};
constexpr UnaryInfo kAbs{UnaryOp::Abs, "abs", ResultKind::Numeric};
constexpr UnaryInfo kRelu{UnaryOp::Relu, "relu", ResultKind::Numeric};
constexpr UnaryInfo kExp{UnaryOp::Exp, "exp", ResultKind::Floating};
constexpr UnaryInfo kLog{UnaryOp::Log, "log", ResultKind::Floating};
constexpr UnaryInfo kSqrt{UnaryOp::Sqrt, "sqrt", ResultKind::Floating};
constexpr UnaryInfo kRsqrt{UnaryOp::Rsqrt, "rsqrt", ResultKind::Floating};
constexpr UnaryInfo kSigmoid{UnaryOp::Sigmoid, "sigmoid", ResultKind::Floating};
constexpr UnaryInfo kTanh{UnaryOp::Tanh, "tanh", ResultKind::Floating};
constexpr UnaryInfo kGelu{UnaryOp::Gelu, "gelu", ResultKind::Floating};
constexpr UnaryInfo kGeluTanh{UnaryOp::GeluTanh, "gelu", ResultKind::Floating};
constexpr UnaryInfo kLogicalNot{UnaryOp::LogicalNot, "logical_not", ResultKind::Bool};

// The dtype clamp computes in: the bounds take part in promotion as numbers,
// so clamping an int tensor to 0.5 gives float32, as torch.
DType clamp_result(std::string_view name, const Tensor& x, const std::optional<Scalar>& min,
                   const std::optional<Scalar>& max) {
  KILN_CHECK(min.has_value() || max.has_value(), name, ": at least one of min and max must be given");
  elementwise::ResultType r;
  r.add(x);
  if (min) r.add(*min);
  if (max) r.add(*max);
  DType result = r.result();
  KILN_CHECK(result != DType::Bool, name, ": not supported for bool tensors");
  return result;
}

}  // namespace

Tensor neg(const Tensor& x) { return run_unary(kNeg, x); }
Tensor abs(const Tensor& x) { return run_unary(kAbs, x); }
Tensor exp(const Tensor& x) { return run_unary(kExp, x); }
Tensor log(const Tensor& x) { return run_unary(kLog, x); }
Tensor sqrt(const Tensor& x) { return run_unary(kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return run_unary(kRsqrt, x); }
// relu keeps a grid (tensor/quantized_grid.h): a quantized input is clamped
// at its zero point, a float one on a grid passes its params on.
Tensor relu(const Tensor& x) {
  if (x.defined() && x.is_quantized()) return quantized_relu(x);
  return keep_grid(x, run_unary(kRelu, x));
}
Tensor sigmoid(const Tensor& x) { return run_unary(kSigmoid, x); }
Tensor tanh(const Tensor& x) { return run_unary(kTanh, x); }
Tensor gelu(const Tensor& x, bool tanh_approximation) { return run_unary(tanh_approximation ? kGeluTanh : kGelu, x); }
Tensor logical_not(const Tensor& x) { return run_unary(kLogicalNot, x); }

// (x > 0) - (x < 0) from two comparisons, so every backend has it; NaN
// compares false both ways and -0 gives +0, as torch's kernel.
Tensor sign(const Tensor& x) {
  KILN_CHECK(x.defined(), "sign: got an undefined tensor");
  if (x.dtype() == DType::Bool) return x.clone();
  return sub(gt(x, 0).to(x.dtype()), lt(x, 0).to(x.dtype()));
}
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor& neg_(Tensor& x) { return run_unary_(kNeg, x); }
Tensor& abs_(Tensor& x) { return run_unary_(kAbs, x); }
Tensor& exp_(Tensor& x) { return run_unary_(kExp, x); }
Tensor& log_(Tensor& x) { return run_unary_(kLog, x); }
Tensor& sqrt_(Tensor& x) { return run_unary_(kSqrt, x); }
Tensor& relu_(Tensor& x) {
  if (x.defined() && x.is_quantized()) return quantized_relu_(x);
  return run_unary_(kRelu, x);
}
Tensor& sigmoid_(Tensor& x) { return run_unary_(kSigmoid, x); }
Tensor& tanh_(Tensor& x) { return run_unary_(kTanh, x); }

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  DType result = clamp_result("clamp", x, min, max);
  Tensor out = Tensor::empty(x.shape(), {result, x.device()});
  if (out.numel() > 0) backend_for(out.device()).clamp(out, x.to(result), min, max);
  return out;
}

Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  DType result = clamp_result("clamp_", x, min, max);
  elementwise::check_in_place("clamp_", x, result);
  if (x.numel() == 0) return x;
  if (result == x.dtype()) {
    backend_for(x.device()).clamp(x, x, min, max);
    x.bump_version();
    return x;
  }
  Tensor out = Tensor::empty(x.shape(), {result, x.device()});
  backend_for(out.device()).clamp(out, x.to(result), min, max);
  elementwise::assign_in_place(x, out);
  return x;
}

}  // namespace kiln::ops
