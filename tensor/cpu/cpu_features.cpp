#include "tensor/cpu/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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

#if defined(__x86_64__) || defined(__i386__)
// XCR0: which register states the OS saves and restores (and so lets
// programs use); 0 when the OS does not expose it (no OSXSAVE).
static uint64_t xcr0() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

static Int8Features detect_int8() {
  Int8Features f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx512vnni = f.avx512 && (ecx & (1u << 11));
    f.avx512vbmi = f.avx512vnni && (ecx & (1u << 1));
    // AMX-TILE (edx bit 24) and AMX-INT8 (bit 25), with XTILECFG and
    // XTILEDATA (XCR0 bits 17 and 18) enabled by the OS.
    bool amx_state = (xcr0() & (3ull << 17)) == (3ull << 17);
    f.amx_int8 = f.avx512vnni && (edx & (1u << 24)) && (edx & (1u << 25)) && amx_state;
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avxvnni = f.avx2 && (eax & (1u << 4));
#endif
  return f;
}

const Int8Features& int8_features() {
  static const Int8Features features = detect_int8();
  return features;
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
