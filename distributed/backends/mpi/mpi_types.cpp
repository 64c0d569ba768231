#include "distributed/backends/mpi/mpi_types.h"

#include <algorithm>
#include <climits>

#include "distributed/backends/mpi/mpi_runtime.h"
#include "tensor/error.h"

namespace kiln::distributed::mpi {

static_assert(sizeof(bool) == 1, "bool tensors move as MPI_C_BOOL, one byte per element");

namespace {

struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Multiply {
  float operator()(float a, float b) const { return a * b; }
};
struct Larger {
  float operator()(float a, float b) const { return std::max(a, b); }
};
struct Smaller {
  float operator()(float a, float b) const { return std::min(a, b); }
};

// An MPI_User_function: inout[i] = combine(in[i], inout[i]) on 16-bit
// floats T, computed in float and rounded back.
template <class T, class Combine>
void reduce_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  // in, inout: (*length) elements of T
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  const Combine combine;
  for (int i = 0; i < *length; ++i) b[i] = T(combine(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

// The user-defined ops for one 16-bit type: sum, max, min, product.
struct Ops16 {
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL, product = MPI_OP_NULL;
};

template <class T>
Ops16 create_ops16() {
  Ops16 ops;
  constexpr int kCommutative = 1;
  check(MPI_Op_create(&reduce_16bit<T, Add>, kCommutative, &ops.sum), "MPI_Op_create");
  check(MPI_Op_create(&reduce_16bit<T, Larger>, kCommutative, &ops.max), "MPI_Op_create");
  check(MPI_Op_create(&reduce_16bit<T, Smaller>, kCommutative, &ops.min), "MPI_Op_create");
  check(MPI_Op_create(&reduce_16bit<T, Multiply>, kCommutative, &ops.product), "MPI_Op_create");
  return ops;
}

// Created once, after MPI_Init, and never freed: MPI_Finalize releases them.
const Ops16& ops16(DType dtype) {
  if (dtype == DType::Float16) {
    static const Ops16 half_ops = create_ops16<Half>();
    return half_ops;
  }
  static const Ops16 bfloat16_ops = create_ops16<BFloat16>();
  return bfloat16_ops;
}

}  // namespace

MPI_Datatype datatype(DType dtype) {
  switch (dtype) {
    case DType::Bool: return MPI_C_BOOL;
    case DType::UInt8: return MPI_UINT8_T;
    case DType::Int8: return MPI_INT8_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::Float16:
    case DType::BFloat16: return MPI_UINT16_T;
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
  }
  KILN_FAIL("mpi: no MPI datatype for dtype code ", static_cast<int>(dtype));
}

MPI_Op reduce_op(DType dtype, ReduceOp op, const char* what) {
  KILN_CHECK(op != ReduceOp::Avg, "mpi: ", what, ": the MPI backend has no native avg; the front-end "
                                  "should have turned it into a sum");
  if (dtype == DType::Bool) {
    KILN_CHECK(op == ReduceOp::Max || op == ReduceOp::Min, "mpi: ", what, ": bool tensors reduce only "
               "with max (logical or) or min (logical and), not ", reduce_op_name(op));
    return op == ReduceOp::Max ? MPI_LOR : MPI_LAND;
  }
  if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    const Ops16& ops = ops16(dtype);
    switch (op) {
      case ReduceOp::Sum: return ops.sum;
      case ReduceOp::Max: return ops.max;
      case ReduceOp::Min: return ops.min;
      case ReduceOp::Product: return ops.product;
      case ReduceOp::Avg: break;
    }
  }
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Product: return MPI_PROD;
    case ReduceOp::Avg: break;
  }
  KILN_FAIL("mpi: ", what, ": unknown reduce op code ", static_cast<int>(op));
}

int count(int64_t numel, const char* what) {
  KILN_CHECK(numel <= INT_MAX, "mpi: ", what, " of ", numel, " elements: MPI counts elements in an int, "
             "so a tensor may hold at most ", INT_MAX, "; split it into chunks");
  return static_cast<int>(numel);
}

}  // namespace kiln::distributed::mpi
