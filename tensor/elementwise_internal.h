// Steps shared by the elementwise front-ends (tensor/elementwise*.cpp,
// tensor/compare.cpp). Not part of the public API.
//
// Every front-end follows Note [Device dispatch]: check devices, work out the
// compute dtype (Note [Type promotion]), broadcast, convert the operands,
// allocate the output, and call the backend once.
#pragma once

#include <optional>
#include <string_view>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::elementwise {

// Accumulates operands into torch's three promotion levels (tensors with
// dims, 0-dim tensors, C++ numbers) and combines them by category; see
// Note [Type promotion].
class ResultType {
 public:
  void add(const Tensor& t);
  void add(Scalar s);
  DType result() const;

 private:
  std::optional<DType> dimensioned_, zero_dim_, wrapped_;
};

// The dtype a C++ number takes part in promotion with: float32 (the default
// float), int64 or bool.
DType wrapped_number_dtype(Scalar s);

// Throws naming `op` and both devices unless a and b are on the same device.
void check_same_device(std::string_view op, const Tensor& a, const Tensor& b);

// A 0-dim tensor holding `value` converted to `dtype`.
Tensor wrap_scalar(Scalar value, DType dtype, Device device);

// out = a `op` b, computing in `compute` and writing `out_dtype`
// (= compute, or Bool for comparisons and logical ops).
Tensor binary(BinaryOp op, std::string_view name, const Tensor& a, const Tensor& b, DType compute, DType out_dtype);

// b, or alpha * b when alpha is not 1, for add/sub(a, b, alpha); throws
// naming `name` for a float alpha with integer inputs or a bool alpha with
// non-bool inputs, as torch.
Tensor apply_alpha(std::string_view name, const Tensor& b, Scalar alpha, DType compute);

// Throws for sub on bool operands (torch points to logical_xor instead).
void check_not_bool_sub(std::string_view name, DType compute);

// True division: integer and bool operands divide in the default float type.
DType division_type(DType promoted);

// pow rejects bool operands, and negative integer exponents of integers.
void check_pow(std::string_view name, DType compute, std::optional<Scalar> exponent);

// Whether a value of dtype `from` may be written into a tensor of dtype `to`
// by an in-place op, as torch's canCast: no float into integer or bool, no
// integer into bool.
bool can_cast(DType from, DType to);

// The checks every in-place op makes on its destination: x is not a
// broadcast view (some element would be written twice), and `result` can be
// cast to x's dtype. Errors name `op`.
void check_in_place(std::string_view op, const Tensor& x, DType result);

// Writes `result` (same shape) into x, converting dtype if needed, and bumps
// x's version once.
void assign_in_place(Tensor& x, const Tensor& result);

}  // namespace kiln::elementwise
