// AVX2 kernel for 2x2 / stride-2 max pooling values (LeNet's pooling at
// inference), called by tensor/cpu/pool.cpp when the CPU has AVX2.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// out (oh, ow) = the maxima of the 2x2 windows of plane, whose rows are
// exactly 2*ow wide and of which the first 2*oh are read; hbuf: scratch of
// 2*oh*ow floats. Ties and NaN follow the general path (the first maximum
// in row-major window order; the last NaN).
void max_pool_2x2_values_avx2(const float* plane, float* out, float* hbuf, int64_t out_h, int64_t out_w);

}  // namespace kiln::cpu
