// The element-wise reductions Gloo's algorithms call, one per dtype and op.
//
// gloo::allreduce and gloo::reduce are untyped: they move bytes and call a
// function `reduce(c, a, b, n)` that must compute c[i] = a[i] op b[i] for n
// elements (c may alias a or b). Gloo ships such functions for the C++
// arithmetic types and its own float16; Kiln's dtypes include bfloat16 and
// bool, so all of them are written here, over Kiln's C++ types.
//
// - Integer sums and products wrap around (two's complement), as PyTorch's.
// - float16 and bfloat16 compute in float and round back after every step,
//   so the result can depend on the order of the ranks in the ring by an
//   ulp, as with any reduced-precision all-reduce.
// - Max and min propagate NaN (torch.maximum's rule), so a NaN on any rank
//   is seen by all.
// - bool reduces with max (logical or) and min (logical and) only.
#pragma once

#include <cstddef>
#include <functional>

#include "distributed/process_group.h"
#include "tensor/dtype.h"

namespace kiln::distributed::gloo_backend {

// c[i] = a[i] op b[i] for i < n, on raw element buffers.
using ReduceFunction = std::function<void(void* c, const void* a, const void* b, size_t n)>;

// The function for `op` on `dtype`. Throws kiln::Error for ReduceOp::Avg (the
// front-end turns it into a sum) and for sum or product on bool.
ReduceFunction reduce_function(DType dtype, ReduceOp op);

}  // namespace kiln::distributed::gloo_backend
