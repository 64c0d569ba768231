// Kiln: a from-scratch deep-learning framework. Include this one header to
// get everything; docs/ARCHITECTURE.md is the tour of what lies behind it.
#pragma once

#include "tensor/tensor.h"
#include "tensor/backend.h"
#include "tensor/parallel.h"
