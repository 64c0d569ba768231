// Kiln dtypes and reduce ops as NCCL's ncclDataType_t and ncclRedOp_t.
//
// Note [NCCL dtypes]
// Every Kiln dtype has an NCCL type of the same size and meaning: float32,
// float64, float16 and bfloat16 as ncclFloat32 ... ncclBfloat16, int8, uint8,
// int32 and int64 as ncclInt8 ... ncclInt64. NCCL reduces all of them on the
// GPU itself, 16-bit floats included (Gloo and MPI need Kiln's own reduction
// functions for those).
//
// bool has no NCCL type and moves as ncclUint8: Kiln stores it as one byte
// holding 0 or 1, so broadcast, gathers and sends move it unchanged, max over
// 0/1 bytes is a logical or and min a logical and, which are the only
// reductions the front-end allows on bool. Sum and product on bool, and avg
// on anything but floating point, are refused with a kiln::Error naming the
// dtype and the collective (the front-end refuses them first; these checks
// keep the backend safe on its own).
//
// ReduceOp::Avg reaches this backend (supports_avg() is true) and becomes
// ncclAvg. For floating types NCCL scales each rank's value by 1/size before
// summing, so an average may differ in the last bit from the sum divided
// afterwards that Gloo and MPI compute.
#pragma once

#include <nccl.h>

#include "distributed/process_group.h"
#include "tensor/dtype.h"

namespace kiln::distributed::nccl {

// The NCCL type `dtype` moves as (Note [NCCL dtypes]).
ncclDataType_t datatype(DType dtype);

// The NCCL reduction for `op` on `dtype`; throws kiln::Error naming `what`
// (the collective) for the combinations NCCL cannot reduce.
ncclRedOp_t reduce_op(DType dtype, ReduceOp op, const char* what);

}  // namespace kiln::distributed::nccl
