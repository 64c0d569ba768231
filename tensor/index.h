// Indexing with index tensors (Int64). Out-of-range indices throw
// kiln::Error naming the op, the index and the valid range.
#pragma once

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::ops {

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // index: 1-d
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);        // torch.gather
// A copy of x with src added at index along dim, as torch.scatter_add.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// (*) Int64 labels -> (*, num_classes) Int64, as torch.nn.functional.one_hot;
// num_classes < 0 means max(labels) + 1.
Tensor one_hot(const Tensor& labels, int64_t num_classes = -1);
// Rejects a value v of the Int64 `index` outside [0, limit) with
// kiln::Error(message(v)), as an op that is about to use `index` does for
// its own message (cross_entropy's targets, embedding's indices). On the CPU
// it throws here; on a CUDA device a kernel checks and the error comes when
// the host next waits for the device, so the check costs no wait (Note [CUDA
// kernel errors] in tensor/cuda/kernel_errors.h). Nothing is checked while
// the device is capturing a CUDA graph.
void check_index_range(const Tensor& index, int64_t limit, const IndexErrorMessage& message);

}  // namespace kiln::ops
