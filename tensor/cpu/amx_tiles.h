// The AMX tile blocks the int8 GEMM (qgemm_amx.cpp) and the implicit int8
// convolution (quantized_conv_implicit_amx.cpp) share, and the tile
// configuration the direct convolution's tiles use too
// (quantized_conv_direct_amxvbmi.cpp). Include only from *_amx.cpp and
// *_amxvbmi.cpp files: it uses AMX-TILE and AMX-INT8 intrinsics.
//
// Tiles 0-3 hold C (row block r, column block c at 2r + c), 4 and 5 the two
// blocks of 16 A rows (16 rows x 64 bytes of k each), 6 and 7 two 1 KiB
// stretches of W (16 groups of 4 k x 16 columns, Note [Int8 GEMM packing]).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kiln::cpu::qgemm_detail {
namespace {

// The 64-byte operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes.
inline void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  // GCC 12's _tile_loadconfig is an asm statement that takes the address
  // but does not say it reads the 64 bytes there, so where nothing else
  // reads cfg (this function on its own, as begin_implicit_amx calls it)
  // GCC drops the stores above as dead and loads a configuration of empty
  // tiles: a SIGILL at the first tile load. The empty asm says they are read.
  __asm__ __volatile__("" : : "m"(cfg));
  _tile_loadconfig(&cfg);
}

// MM row tiles x NN column tiles over kblocks blocks of 64 k; writes the dot
// products plus init (the 16 or 32 columns' starting values, every row
// alike: one row loaded with stride 0) to c (MM*16 rows of NN*16 int32,
// row-major). Block kb of row tile t is read at a[t] + koff[kb], its rows
// lda[t] bytes apart; block kb of column tile v at w + v * panel_bytes +
// kb * 1024.
template <int MM, int NN>
void tile_block(const uint8_t* const* a, const int64_t* lda, const int64_t* koff, const char* w, int64_t panel_bytes,
                int64_t kblocks, const int32_t* init, int32_t* c) {
  _tile_loadd(0, init, 0);
  if constexpr (NN > 1) _tile_loadd(1, init + 16, 0);
  if constexpr (MM > 1) _tile_loadd(2, init, 0);
  if constexpr (MM > 1 && NN > 1) _tile_loadd(3, init + 16, 0);
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    _tile_loadd(4, a[0] + koff[kb], lda[0]);
    if constexpr (MM > 1) _tile_loadd(5, a[1] + koff[kb], lda[1]);
    _tile_loadd(6, w + kb * 1024, 64);
    if constexpr (NN > 1) _tile_loadd(7, w + panel_bytes + kb * 1024, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (NN > 1) _tile_dpbusd(1, 4, 7);
    if constexpr (MM > 1) _tile_dpbusd(2, 5, 6);
    if constexpr (MM > 1 && NN > 1) _tile_dpbusd(3, 5, 7);
  }
  constexpr int ldc = NN * 16 * 4;
  _tile_stored(0, c, ldc);
  if constexpr (NN > 1) _tile_stored(1, c + 16, ldc);
  if constexpr (MM > 1) _tile_stored(2, c + 16 * NN * 16, ldc);
  if constexpr (MM > 1 && NN > 1) _tile_stored(3, c + 16 * NN * 16 + 16, ldc);
}

// Runs tile_block for mm (1 or 2) row tiles and nn (1 or 2) column tiles.
inline void tile_block_any(int mm, int nn, const uint8_t* const* a, const int64_t* lda, const int64_t* koff,
                           const char* w, int64_t panel_bytes, int64_t kblocks, const int32_t* init, int32_t* c) {
  if (mm == 2 && nn == 2) tile_block<2, 2>(a, lda, koff, w, panel_bytes, kblocks, init, c);
  else if (mm == 2) tile_block<2, 1>(a, lda, koff, w, panel_bytes, kblocks, init, c);
  else if (nn == 2) tile_block<1, 2>(a, lda, koff, w, panel_bytes, kblocks, init, c);
  else tile_block<1, 1>(a, lda, koff, w, panel_bytes, kblocks, init, c);
}

}  // namespace
}  // namespace kiln::cpu::qgemm_detail
