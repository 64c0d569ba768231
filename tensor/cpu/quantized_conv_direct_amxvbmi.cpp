// The direct int8 convolution on AMX tiles (Note [Direct int8 convolution
// with positions in the lanes] in quantized_conv_direct.h, its last part):
// each quad's 16 lanes of 4 input bytes, built as in the VNNI kernel (two
// window loads and a vpermt2b), are one 64-byte row of a B tile, so 16 quads
// of a block of 16 positions make a tile, and tdpbsud (signed weights in A,
// unsigned activations in B) multiplies it by 16 quads of up to 16 channels'
// weights at once. C holds a channel per row and a position per column: a
// row is what the VNNI kernel's accumulator held, and leaves through the same
// store_column_zmm. Compiled with AMX-TILE, AMX-INT8, AVX-512 VNNI and VBMI;
// reached only on the Amx path of a CPU with VBMI.
// GCC 12's AVX-512 intrinsics warn about their own "undefined" registers
// (GCC bug 105593), as in qgemm_amx.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/amx_tiles.h"
#include "tensor/cpu/qgemm_simd.h"
#include "tensor/cpu/quantized_conv_direct.h"

namespace kiln::cpu {
namespace {

using qgemm_detail::Epilogue;
using qgemm_detail::TileConfig;

// Tiles 0, 1: C of two blocks (`channels` rows); 2: A, the weights
// (`channels` rows); 3, 4: B of the two blocks (16 quads). Every row 64 bytes.
void configure(int channels) {
  TileConfig cfg;
  for (int t = 0; t < 5; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(t == 3 || t == 4 ? 16 : channels);
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// Block b's B tiles, one per 16 quads: row q % 16 of tile q / 16 holds the
// quad's 16 lanes of 4 bytes (rows past the last quad stay zero; their
// weights are zero too).
void build_b(const DirectQConvPlan& plan, const uint8_t* in, uint8_t* b) {
  const int64_t nq = static_cast<int64_t>(plan.quads.size());
  for (int64_t q = 0; q < nq; ++q) {
    const DirectQConvQuadCall& quad = plan.quads[q];
    const __m512i lo = _mm512_loadu_si512(in + quad.window[0]);
    const __m512i hi = _mm512_loadu_si512(in + quad.window[1]);
    _mm512_store_si512(b + q * 64, _mm512_permutex2var_epi8(lo, _mm512_load_si512(quad.index), hi));
  }
}

}  // namespace

void qconv_direct_amx(const DirectQConvPlan& plan, const DirectQConvWeight& w, int64_t group, const uint8_t* image,
                      int64_t b0, int64_t b1, const Epilogue& e) {
  const int64_t nq = static_cast<int64_t>(w.quads.size());
  const int64_t kblocks = (nq + 15) / 16;
  const int64_t tiles = (w.group_out + 15) / 16;
  // The weights as A tiles: (tile, k block) -> 16 channels x 16 quads of int32.
  const int32_t* a_tiles = w.amx_weight.data() + group * tiles * kblocks * 256;
  thread_local std::vector<uint8_t> b_buffer;  // two blocks' B tiles
  b_buffer.resize(static_cast<size_t>(2 * kblocks * 1024 + 64));
  uint8_t* b_tiles = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b_buffer.data()) + 63) & ~uintptr_t{63});
  std::memset(b_tiles, 0, static_cast<size_t>(2 * kblocks * 1024));
  alignas(64) int32_t init[16 * 16];
  alignas(64) int32_t c[2][16 * 16];
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t o0 = t * 16;
    const int channels = static_cast<int>(std::min<int64_t>(16, w.group_out - o0));
    // The accumulators start at the channels' offsets: row o is offset[o0 + o].
    for (int o = 0; o < channels; ++o) _mm512_store_si512(init + o * 16, _mm512_set1_epi32(e.offset[o0 + o]));
    configure(channels);
    for (int64_t b = b0; b < b1; b += 2) {
      const int pb = b + 1 < b1 ? 2 : 1;
      for (int k = 0; k < pb; ++k) build_b(plan, image + plan.blocks[b + k].input, b_tiles + k * kblocks * 1024);
      _tile_loadd(0, init, 64);
      if (pb == 2) _tile_loadd(1, init, 64);
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        _tile_loadd(2, a_tiles + (t * kblocks + kb) * 256, 64);
        _tile_loadd(3, b_tiles + kb * 1024, 64);
        _tile_dpbsud(0, 2, 3);
        if (pb == 2) {
          _tile_loadd(4, b_tiles + (kblocks + kb) * 1024, 64);
          _tile_dpbsud(1, 2, 4);
        }
      }
      _tile_stored(0, c[0], 64);
      if (pb == 2) _tile_stored(1, c[1], 64);
      for (int k = 0; k < pb; ++k) {
        const DirectQConvBlock& block = plan.blocks[b + k];
        const __mmask16 mask = static_cast<__mmask16>((1u << block.valid) - 1);
        for (int o = 0; o < channels; ++o) {
          qgemm_detail::store_column_zmm(e, o0 + o, block.output + (o0 + o) * e.stride_n, mask,
                                         _mm512_load_si512(c[k] + o * 16));
        }
      }
    }
  }
  _tile_release();
}

}  // namespace kiln::cpu
