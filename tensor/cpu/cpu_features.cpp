#include "tensor/cpu/cpu_features.h"

#include <cstdlib>
#include <string>

namespace kiln::cpu {

static SimdLevel detect() {
  SimdLevel level = SimdLevel::Scalar;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  level = avx512 ? SimdLevel::Avx512 : avx2 ? SimdLevel::Avx2 : SimdLevel::Scalar;
#endif
  if (const char* cap = std::getenv("KILN_SIMD")) {
    std::string want(cap);
    SimdLevel limit = want == "scalar" ? SimdLevel::Scalar : want == "avx2" ? SimdLevel::Avx2 : SimdLevel::Avx512;
    if (static_cast<int>(limit) < static_cast<int>(level)) level = limit;
  }
  return level;
}

SimdLevel simd_level() {
  static const SimdLevel level = detect();
  return level;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "unknown";
}

}  // namespace kiln::cpu
