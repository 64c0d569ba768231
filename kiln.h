// Kiln: a from-scratch deep-learning framework. Include this one header to
// get everything; docs/ARCHITECTURE.md is the tour of what lies behind it.
#pragma once

// tensor/: tensors and the raw kiln::ops:: kernels' front-ends.
#include "tensor/ops.h"
#include "tensor/safetensors.h"
#include "tensor/tensor_dict.h"

// LibTorch's short names (kFloat32, kCUDA, ...), and what every build can ask
// of CUDA (kiln::cuda::is_available, memory_stats, synchronize): CUDA
// tensors need nothing more than kiln::kiln, which loads the CUDA backend's
// library when a tensor first goes to a GPU.
#include "tensor/constants.h"
#include "tensor/cuda_status.h"

// tensor/cuda/: devices, streams and events, CUDA graphs, settings and GPU
// monitoring (kiln::cuda::), for programs that link kiln::kiln_cuda (which
// defines KILN_WITH_CUDA and brings the CUDA toolkit's headers).
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/graph.h"
#include "tensor/cuda/nvml.h"
#include "tensor/cuda/settings.h"
#include "tensor/cuda/stream.h"
#endif

// autograd/: the differentiable kiln:: functions and the backward engine.
#include "autograd/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/custom_function.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"

// nn/: modules, layers, losses, initialisation and the functional ops.
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/constants.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/conv1d.h"
#include "nn/conv_padding.h"
#include "nn/conv_transpose.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/functional_composite.h"
#include "nn/functional_options.h"
#include "nn/group_norm.h"
#include "nn/init.h"
#include "nn/instance_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/models/gpt.h"
#include "nn/models/lenet.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/normalization.h"
#include "nn/padding.h"
#include "nn/pixel_shuffle.h"
#include "nn/pooling.h"
#include "nn/recurrent.h"
#include "nn/rnn_cell.h"
#include "nn/upsampling.h"
#include "nn/utils/rnn.h"

// optim/: optimizers, learning-rate schedules, gradient clipping, checkpoints.
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/one_cycle_lr.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
#include "optim/training_checkpoint.h"
