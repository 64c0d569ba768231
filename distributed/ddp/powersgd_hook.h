// The pieces of powersgd_hook() (comm_hook.h) that tests reach directly.
// Users create the hook with powersgd_hook(options) and need nothing here.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace kiln::distributed::powersgd {

// A column whose norm is below this is divided by it instead of by its norm
// (Note [Orthogonalizing P and Q] in powersgd_hook.cpp): a zero column stays
// zero instead of becoming NaN.
inline constexpr double kZeroColumnNorm = 1e-8;

// Makes the columns of `matrix` (n, r), r <= n, orthonormal in place, by
// Gram-Schmidt from the first column on, each column projected twice; a
// column whose norm falls below kZeroColumnNorm is left short, and zero
// stays zero. Works on any device; floating dtypes.
//   Tensor p = randn({100, 4});
//   orthogonalize_columns(p);  // p.t() @ p ~ eye(4)
void orthogonalize_columns(Tensor& matrix);

// Whether PowerSGD compresses an (n, m) matrix at approximation rank `rank`
// (already min(n, m, r)): sending (n + m) rank numbers instead of n m must
// divide the volume by at least min_compression_rate.
bool worth_compressing(int64_t n, int64_t m, int64_t rank, double min_compression_rate);

}  // namespace kiln::distributed::powersgd
