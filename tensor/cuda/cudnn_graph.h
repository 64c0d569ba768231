// Convolutions through cuDNN's graph API with execution plans built once per
// layer shape (Note [cuDNN graph API] in cudnn_graph.cpp), the alternative
// to the legacy calls of tensor/cuda/conv.cpp that cuda::set_cudnn_api
// (tensor/cuda/settings.h) chooses.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

// The three directions of a convolution: y = conv(x, w); the gradient of x
// (written into x) from y's and w; the gradient of w (written into w) from
// y's and x.
enum class ConvDirection : int64_t { Forward, BackwardData, BackwardFilter };

// Runs `direction` of the one-group convolution with params p and shape s on x (N, C,
// H, W), w (OC, C*kh*kw, contiguous) and y (N, OC, oh, ow), whose (H, W)
// planes are contiguous, through a graph-API execution plan cached under
// `key` (everything the plan depends on: conv.cpp's algorithm key, which
// holds `allow_tf32`, whether float32 may use tensor cores) for `handle`.
// Returns false, having written nothing, when cuDNN has no engine for it
// that Kiln accepts or declines it (the caller then runs the legacy API);
// throws kiln::Error when a cuDNN call fails otherwise.
bool run_with_graph_api(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                        const Conv2dParams& p, const Conv2dShape& s, cudnnHandle_t handle, bool allow_tf32,
                        const std::vector<int64_t>& key);

}  // namespace kiln::cuda
