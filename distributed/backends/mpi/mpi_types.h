// Kiln dtypes and reduce ops as MPI datatypes and MPI_Ops.
//
// Note [MPI dtypes]
// Every Kiln dtype moves as an MPI datatype of its size: bool as MPI_C_BOOL
// (one byte, as C++'s bool is here), the integers as MPI_INT8_T ...
// MPI_INT64_T and MPI_UINT8_T, float32 and float64 as MPI_FLOAT and
// MPI_DOUBLE. MPI has no 16-bit floats, so float16 and bfloat16 move as
// MPI_UINT16_T (the bits, which is all broadcast, gather and friends need),
// and their reductions are user-defined MPI_Ops that widen each pair of
// elements to float, combine them, and round back to 16 bits, as Kiln's CPU
// kernels do. A sum over N ranks therefore rounds N-1 times, like Gloo's.
//
// Reductions on bool are logical: max is MPI_LOR and min is MPI_LAND (the
// only ops MPI defines on MPI_C_BOOL); the front-end accepts no others.
// Avg never reaches the backend (supports_avg() is false: the front-end sums
// and divides).
#pragma once

#include <mpi.h>

#include <cstdint>

#include "distributed/process_group.h"
#include "tensor/dtype.h"

namespace kiln::distributed::mpi {

// The datatype `dtype` moves as (Note [MPI dtypes]).
MPI_Datatype datatype(DType dtype);

// The MPI_Op that reduces `dtype` with `op`; creates the 16-bit float ops on
// first use, so call it with lock() held. Throws for combinations the
// backend cannot reduce (avg, and bool with sum or product), naming `what`.
MPI_Op reduce_op(DType dtype, ReduceOp op, const char* what);

// `numel` as MPI's int element count; throws naming `what` when the tensor
// has more elements than an int can count.
int count(int64_t numel, const char* what);

}  // namespace kiln::distributed::mpi
