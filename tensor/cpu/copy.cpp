// CPU copy (with dtype conversion) and fill.
#include <cstring>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace kiln::cpu {

CpuBackend& backend() {
  static CpuBackend instance;
  return instance;
}

// Below this many elements a copy stays on one thread.
static constexpr int64_t kCopyGrain = 1 << 15;

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy: the CPU backend cannot copy from ",
             src.device(), " to ", dst.device());
  StridedLoop<2> loop({&dst, &src});
  if (dst.dtype() == src.dtype()) {
    // Same dtype: move bits, typed by width so that strided runs compile to
    // plain loads and stores rather than a memcpy call per element.
    auto copy_bits = [&]<class Bits>() {
      loop.run(kCopyGrain, [](char** p, const int64_t* s, int64_t n) {
        constexpr int64_t size = sizeof(Bits);
        if (s[0] == size && s[1] == size) {
          std::memcpy(p[0], p[1], n * size);
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          *reinterpret_cast<Bits*>(p[0] + i * s[0]) = *reinterpret_cast<const Bits*>(p[1] + i * s[1]);
        }
      });
    };
    switch (dst.element_size()) {
      case 1: copy_bits.operator()<uint8_t>(); return;
      case 2: copy_bits.operator()<uint16_t>(); return;
      case 4: copy_bits.operator()<uint32_t>(); return;
      default: copy_bits.operator()<uint64_t>(); return;
    }
  }
  visit_dtype(dst.dtype(), [&]<class D>() {
    visit_dtype(src.dtype(), [&]<class S>() {
      loop.run(kCopyGrain, [](char** p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          S value = *reinterpret_cast<const S*>(p[1] + i * s[1]);
          // Through the compute type so that 16-bit floats convert via float.
          *reinterpret_cast<D*>(p[0] + i * s[0]) = static_cast<D>(static_cast<ComputeType<S>>(value));
        }
      });
    });
  });
}

void CpuBackend::fill(const Tensor& out, Scalar value) {
  StridedLoop<1> loop({&out});
  visit_dtype(out.dtype(), [&]<class T>() {
    T v = value.to<T>();
    loop.run(kCopyGrain, [v](char** p, const int64_t* s, int64_t n) {
      if (s[0] == static_cast<int64_t>(sizeof(T))) {
        T* dst = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) dst[i] = v;
        return;
      }
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

}  // namespace kiln::cpu
