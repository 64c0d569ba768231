// The Amx path of the int8 GEMM (Note [Int8 GEMM paths] in
// tensor/cpu/qgemm.h): tdpbusd on AMX tiles. A block of up to 32 rows x 32
// columns lives in four int32 tiles C; per 64 values of k, two tiles of A
// (16 rows x 64 bytes, loaded straight from A with its row stride) and two
// of W (16 groups of 4 k x 16 columns: one 1 KiB stretch of a 16-lane panel,
// Note [Int8 GEMM packing]) give four tile multiplies, on tiles that start
// at the column offsets. The finished tiles go to memory, where the AVX-512
// output stage writes the outputs (the tile blocks are amx_tiles.h's). Compiled with
// AMX-TILE, AMX-INT8 and AVX-512; reached only after Linux granted the tile
// state (qgemm.cpp).
// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined"
// register and so warn (GCC bug 105593, fixed in 12.3); the warning is about
// the compiler's header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/amx_tiles.h"
#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu::qgemm_detail {

bool amx_pays(int64_t m, int64_t n, int64_t k) {
  // The tiles take 16 rows at a time: with fewer than two tiles of rows the
  // padding, the tile loads and the trip through memory cost more than the
  // VNNI kernels take (1 row: half their speed; 64 rows: even at k = 27 and
  // n = 16 the tiles are 3x faster, docs/BENCHMARKS.md).
  (void)n;
  (void)k;
  return m >= 32;
}

void qgemm_amx(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e) {
  const int64_t k = w.k();
  const int64_t kblocks = w.kgroups() / 16;
  const int64_t kpad = kblocks * 64;
  const char* wd = static_cast<const char*>(w.data());
  const int64_t panels = w.panels();
  // A tile reads 64 bytes of each of 16 rows per k block: past k on the last
  // block, and past the last row at the bottom edge. Where that could leave
  // A, the rows are copied into a zero-padded 16 x kpad block first.
  thread_local std::vector<uint8_t> edge;
  edge.resize(2 * 16 * std::max<int64_t>(kpad, 64));
  const int64_t a_end = (m - 1) * lda + k;  // bytes of A from a
  thread_local std::vector<int64_t> koff;
  koff.resize(static_cast<size_t>(kblocks));
  for (int64_t kb = 0; kb < kblocks; ++kb) koff[static_cast<size_t>(kb)] = kb * 64;
  alignas(64) int32_t c[32 * 32];
  configure_tiles();
  for (int64_t i = 0; i < m; i += 32) {
    const int mm = m - i > 16 ? 2 : 1;
    const uint8_t* asrc[2];
    int64_t astride[2];
    int arows[2] = {0, 0};
    for (int t = 0; t < mm; ++t) {
      const int64_t r0 = i + 16 * t;
      arows[t] = static_cast<int>(std::min<int64_t>(16, m - r0));
      if (arows[t] == 16 && (r0 + 15) * lda + kpad <= a_end) {
        asrc[t] = a + r0 * lda;
        astride[t] = lda;
      } else {
        uint8_t* dst = edge.data() + t * 16 * kpad;
        std::memset(dst, 0, 16 * kpad);
        for (int r = 0; r < arows[t]; ++r) std::memcpy(dst + r * kpad, a + (r0 + r) * lda, k);
        asrc[t] = dst;
        astride[t] = kpad;
      }
    }
    for (int64_t p = 0; p < panels; p += 2) {
      const int nn = panels - p > 1 ? 2 : 1;
      const char* wp = wd + p * w.panel_bytes();
      // The accumulators start at the columns' offsets, as on the other paths.
      tile_block_any(mm, nn, asrc, astride, koff.data(), wp, w.panel_bytes(), kblocks, e.offset + p * 16, c);
      const int cols = nn * 16;
      for (int t = 0; t < mm; ++t) finish_zmm(c + t * 16 * cols, arows[t], nn, i + 16 * t, p * 16, e);
    }
  }
  _tile_release();
}

}  // namespace kiln::cpu::qgemm_detail
