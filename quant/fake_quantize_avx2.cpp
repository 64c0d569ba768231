// fake_quantize_rows compiled with AVX2 (CMake gives *_avx2.cpp those
// flags); fake_quantize.cpp calls it where the CPU has AVX2. The arithmetic
// is the same float32 sequence, so the results are the same bits.
#include "quant/fake_quantize_kernel.h"

namespace kiln::quant::detail {

void fake_quantize_rows_avx2(const FakeQuantizeArgs& a, int64_t row_begin, int64_t row_end) {
  fake_quantize_rows(a, row_begin, row_end);
}

}  // namespace kiln::quant::detail
