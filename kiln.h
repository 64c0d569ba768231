// Kiln: a from-scratch deep-learning framework. Include this one header to
// get everything; docs/ARCHITECTURE.md is the tour of what lies behind it.
#pragma once

#include "tensor/backend.h"
#include "tensor/conv.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"
#include "tensor/index.h"
#include "tensor/linalg.h"
#include "tensor/parallel.h"
#include "tensor/random.h"
#include "tensor/reduce.h"
#include "tensor/shape_ops.h"
#include "tensor/tensor.h"
