// Which SIMD instruction sets this CPU has, read once from CPUID.
//
// Note [SIMD dispatch]
// libkiln is compiled for baseline x86-64 so that it runs on any such CPU.
// Kernels that use AVX2/FMA or AVX-512 live in files named *_avx2.cpp and
// *_avx512.cpp, which CMake compiles with those instruction sets enabled.
// Callers pick an implementation at run time from simd_level(); nothing
// outside those files may call them directly. KILN_SIMD=scalar|avx2|avx512
// in the environment caps the level (to test the fallbacks or compare).
#pragma once

#include <string_view>

namespace kiln::cpu {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The best level both the CPU and KILN_SIMD allow; computed once.
SimdLevel simd_level();
std::string_view simd_level_name(SimdLevel level);

}  // namespace kiln::cpu
