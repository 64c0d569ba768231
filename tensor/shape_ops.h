// Joining and splitting tensors.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace kiln::ops {

// Concatenates along an existing dim; all other sizes must match; dtypes
// promote; all on one device.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Joins along a new dim; all shapes must be equal.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of `split_size` along dim (the last may be smaller), as torch.split.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Views with the given sizes, which must sum to x.size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// `chunks` views of ceil(size / chunks) (fewer if the size runs out), as torch.chunk.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

}  // namespace kiln::ops
