// Kiln dtypes and reduce ops as NCCL's (Note [NCCL dtypes] in nccl_types.h).
#include "distributed/backends/nccl/nccl_types.h"

#include "tensor/error.h"

namespace kiln::distributed::nccl {

static_assert(sizeof(bool) == 1, "bool tensors move as ncclUint8, one byte per element");

ncclDataType_t datatype(DType dtype) {
  switch (dtype) {
    case DType::Bool: return ncclUint8;
    case DType::UInt8: return ncclUint8;
    case DType::Int8: return ncclInt8;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
  }
  KILN_FAIL("nccl: no NCCL datatype for dtype code ", static_cast<int>(dtype));
}

ncclRedOp_t reduce_op(DType dtype, ReduceOp op, const char* what) {
  KILN_CHECK(dtype != DType::Bool || op == ReduceOp::Max || op == ReduceOp::Min, "nccl: ", what,
             ": bool tensors can only be reduced with max (logical or) or min (logical and), not ",
             reduce_op_name(op));
  KILN_CHECK(op != ReduceOp::Avg || is_floating(dtype), "nccl: ", what,
             ": ReduceOp avg needs a floating-point tensor, got ", dtype_name(dtype));
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Product: return ncclProd;
  }
  KILN_FAIL("nccl: ", what, ": unknown reduce op code ", static_cast<int>(op), " on ", dtype_name(dtype));
}

}  // namespace kiln::distributed::nccl
