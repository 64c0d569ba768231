// Every tensor-level op in one include: the raw, gradient-free functions in
// namespace kiln::ops (Note [Two levels of ops] in autograd/function.h).
// Code inside tensor/ and the tensor tests include this; everything above
// includes kiln.h and calls the differentiable kiln:: functions instead.
#pragma once

#include "tensor/activation.h"
#include "tensor/backend.h"
#include "tensor/conv.h"
#include "tensor/einsum.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"
#include "tensor/fused_optim.h"
#include "tensor/index.h"
#include "tensor/linalg.h"
#include "tensor/norm.h"
#include "tensor/parallel.h"
#include "tensor/pool.h"
#include "tensor/random.h"
#include "tensor/reduce.h"
#include "tensor/reorder.h"
#include "tensor/scan.h"
#include "tensor/select.h"
#include "tensor/shape_ops.h"
#include "tensor/tensor.h"
