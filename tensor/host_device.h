// KILN_HOST_DEVICE: marks a function that the CPU kernels and the CUDA
// kernels share (nvcc compiles it for both; a plain C++ compiler sees an
// ordinary inline function), so that both devices compute the same bits.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
