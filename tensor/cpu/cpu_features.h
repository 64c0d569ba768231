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

// The integer dot-product extensions the int8 GEMM uses (Note [Int8 GEMM
// paths] in tensor/cpu/qgemm.h), as CPUID reports them and the OS enables
// their register state (XCR0); KILN_SIMD does not cap these, the GEMM's
// dispatch does. amx_int8 means AMX-TILE and AMX-INT8 with the tile state
// enabled in XCR0: a process must still ask Linux for permission to use it
// (qgemm.cpp does, once).
struct Int8Features {
  bool avx2 = false;        // AVX2 and FMA, as SimdLevel::Avx2
  bool avx512 = false;      // F, BW, DQ and VL, as SimdLevel::Avx512
  bool avx512vnni = false;  // AVX-512 VNNI (with avx512)
  bool avx512vbmi = false;  // AVX-512 VBMI, byte permutes (with avx512vnni here: the direct int8 conv)
  bool avxvnni = false;     // AVX-VNNI, the VEX encoding on 256-bit registers (with avx2)
  bool amx_int8 = false;    // AMX-TILE and AMX-INT8 (with avx512vnni)
};
const Int8Features& int8_features();

}  // namespace kiln::cpu
