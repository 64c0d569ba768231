// Einstein summation, as torch.einsum.
//
// Note [Einsum by composition]
// einsum has no kernel. As torch's, it parses the equation, lines every
// operand up on one list of dims (the output's first, then the summed
// ones), and then only calls other ops: views (a diagonal for a subscript
// repeated within an operand, permute, unsqueeze, reshape), sums over the
// dims no later operand needs, products of operands where nothing is
// contracted, and bmm for the dims two operands contract. The three
// arithmetic calls come from the caller (EinsumArithmetic): ops::einsum
// passes the tensor layer's functions, autograd's kiln::einsum the
// differentiable ones, so the same plan is the differentiable op, with no
// backward of its own, and runs on every device the parts run on. The
// operands are contracted left to right, as torch does without opt_einsum.
#pragma once

#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace kiln::ops {

// The sums of products that `equation` describes over `operands`, as
// torch.einsum:
// - "ij,jk->ik": one comma-separated term of subscripts (letters a-z, A-Z)
//   per operand, one per dim; spaces are ignored. A subscript shared by
//   terms is one dim (sizes equal, or 1 to broadcast); a subscript repeated
//   within a term takes that operand's diagonal (sizes equal).
// - "..." stands for the dims no subscript names, at most once per term;
//   those of all operands broadcast against each other, aligned from the
//   right.
// - After "->" comes the output's subscripts in order, each at most once
//   and each from some input; every other subscript, and "..." when the
//   output does not have it, is summed. Without "->" the output is "..."
//   then the subscripts that appear exactly once, in ASCII order (capitals
//   first).
// The operands share one dtype and device. The result is summed in their
// dtype, except that integer and bool sums give Int64 as ops::sum does; it
// may be a view of the operand when nothing is summed or multiplied
// ("ij->ji"). Errors name einsum and the subscript, operand or size.
//   Tensor c = einsum("bij,bjk->bik", {a, b});       // bmm
//   Tensor tr = einsum("ii", {m});                   // trace
//   Tensor outer = einsum("i,j->ij", {u, v});
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

// The arithmetic einsum is composed of (Note [Einsum by composition]).
struct EinsumArithmetic {
  Tensor (*mul)(const Tensor& a, const Tensor& b);  // broadcasting product
  Tensor (*sum)(const Tensor& x, const Shape& dims);  // over dims (never empty), keepdim
  Tensor (*bmm)(const Tensor& a, const Tensor& b);  // (B, M, K) x (B, K, N)
};

// einsum computed with the given arithmetic.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands, const EinsumArithmetic& arithmetic);

}  // namespace kiln::ops
