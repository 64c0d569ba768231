// The implicit int8 convolution's kernel (Note [Implicit int8 convolution on
// AMX tiles] in quantized_conv_implicit.h): per pair of 16-pixel blocks and
// pair of 16-channel panels, the tile loop of amx_tiles.h with the A tiles
// loaded from the padded image, then the GEMM's output stage for the pixels
// that are outputs. Compiled with AMX-TILE, AMX-INT8 and AVX-512; reached only
// on the Amx path, after Linux granted the tile state (qgemm.cpp).
// GCC 12's AVX-512 intrinsics warn about their own "undefined" registers
// (GCC bug 105593), as in qgemm_amx.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "tensor/cpu/amx_tiles.h"
#include "tensor/cpu/qgemm_simd.h"
#include "tensor/cpu/quantized_conv_implicit.h"

namespace kiln::cpu::qgemm_detail {
namespace {

// The output stage of one tile of rows (16 x nn*16 int32 at c, rows
// nn*16 apart, the offsets already in) for panel columns from n0: each run
// of rows whose positions follow one another goes through finish_zmm at
// once.
void finish_block(const int32_t* c, const ImplicitQConvBlock& block, int nn, int64_t n0, const Epilogue& e) {
  const int cols = nn * 16;
  for (int i = 0; i < 16;) {
    if (block.position[i] < 0) {
      ++i;
      continue;
    }
    int run = 1;
    while (i + run < 16 && block.position[i + run] == block.position[i] + run) ++run;
    finish_zmm(c + i * cols, run, nn, block.position[i], n0, e);
    i += run;
  }
}

// Note [Weight tile kept in place]
// A layer of at most 16 output channels whose kernel is one k block (a stem
// with stacked kernel rows, Note [Stacked kernel rows]: 27 bytes in 64) has
// a weight of one tile, which tile_block would load again for every two
// blocks of pixels: 3 tile loads for 2 multiplies. Here it stays in tile 6
// for the whole call, and each step loads only its two A tiles. (Layers of
// three k blocks, ResNet-20's 16-channel 3x3 ones, were tried the same way,
// the three weight tiles in place and the A loads run two multiplies ahead
// in three tiles, and were no faster: docs/BENCHMARKS.md.)
template <int MM>
void tile_block_resident(const uint8_t* const* a, const int64_t* lda, const int64_t* koff, const int32_t* init,
                         int32_t* c) {
  _tile_loadd(0, init, 0);
  if constexpr (MM > 1) _tile_loadd(2, init, 0);
  _tile_loadd(4, a[0] + koff[0], lda[0]);
  if constexpr (MM > 1) _tile_loadd(5, a[1] + koff[0], lda[1]);
  _tile_dpbusd(0, 4, 6);
  if constexpr (MM > 1) _tile_dpbusd(2, 5, 6);
  _tile_stored(0, c, 64);
  if constexpr (MM > 1) _tile_stored(2, c + 256, 64);
}

// Whether a layer runs with its weight kept in a tile (the Note above).
bool weight_stays_in_tile(const PackedPanels& panels, int64_t kblocks) {
  return panels.panels() == 1 && kblocks == 1;
}

// qconv_implicit_amx for such a layer: steps of two blocks of pixels, the
// output stage of one overlapping the tiles of the next, as below. It is
// kept apart from that loop, and the two loops share no step helper: with
// a branch per step the stem lost most of its gain, and with the step's
// blocks built by a shared function the main loop ran 3-4% slower on
// layer1 (docs/BENCHMARKS.md).
void qconv_implicit_amx_resident(const ImplicitQConvPlan& plan, const PackedPanels& panels, const uint8_t* padded,
                                 int64_t b0, int64_t b1, const Epilogue& e) {
  alignas(64) int32_t c[2][32 * 16];
  struct Step {
    const ImplicitQConvBlock* blocks[2];
    int mm = 0;
  } pending;
  auto finish = [&](const Step& step, const int32_t* acc) {
    for (int t = 0; t < step.mm; ++t) finish_block(acc + t * 256, *step.blocks[t], 1, 0, e);
  };
  _tile_loadd(6, panels.data(), 64);
  int buffer = 0;
  for (int64_t b = b0; b < b1; b += 2) {
    Step step;
    step.mm = b + 1 < b1 ? 2 : 1;
    step.blocks[0] = &plan.blocks[b];
    step.blocks[1] = &plan.blocks[step.mm == 2 ? b + 1 : b];
    const uint8_t* a[2] = {padded + step.blocks[0]->base, padded + step.blocks[1]->base};
    const int64_t lda[2] = {step.blocks[0]->lda, step.blocks[1]->lda};
    if (step.mm == 2) tile_block_resident<2>(a, lda, plan.koff.data(), e.offset, c[buffer]);
    else tile_block_resident<1>(a, lda, plan.koff.data(), e.offset, c[buffer]);
    if (pending.mm > 0) finish(pending, c[buffer ^ 1]);
    pending = step;
    buffer ^= 1;
  }
  if (pending.mm > 0) finish(pending, c[buffer ^ 1]);
}

}  // namespace

void begin_implicit_amx() { configure_tiles(); }
void end_implicit_amx() { _tile_release(); }

void qconv_implicit_amx(const ImplicitQConvPlan& plan, const ImplicitQConvWeight& w, const uint8_t* padded,
                        int64_t b0, int64_t b1, const Epilogue& e) {
  const auto& panels = static_cast<const PackedPanels&>(*w.packed);
  const char* wd = static_cast<const char*>(panels.data());
  const int64_t kblocks = static_cast<int64_t>(plan.koff.size());
  if (weight_stays_in_tile(panels, kblocks)) {
    qconv_implicit_amx_resident(plan, panels, padded, b0, b1, e);
    return;
  }
  // Two buffers of accumulators: the output stage of one step runs while
  // the tiles of the next compute (the vector unit and the tile unit work
  // at once), instead of waiting on the tile stores just made.
  alignas(64) int32_t c[2][32 * 32];
  struct Step {
    const ImplicitQConvBlock* blocks[2];
    int mm = 0, nn = 0;
    int64_t p = 0;
  } pending;
  auto finish = [&](const Step& step, const int32_t* acc) {
    for (int t = 0; t < step.mm; ++t)
      finish_block(acc + t * 16 * step.nn * 16, *step.blocks[t], step.nn, step.p * 16, e);
  };
  int buffer = 0;
  for (int64_t b = b0; b < b1; b += 2) {
    Step step;
    step.mm = b + 1 < b1 ? 2 : 1;
    step.blocks[0] = &plan.blocks[b];
    step.blocks[1] = &plan.blocks[step.mm == 2 ? b + 1 : b];
    const uint8_t* a[2] = {padded + step.blocks[0]->base, padded + step.blocks[1]->base};
    const int64_t lda[2] = {step.blocks[0]->lda, step.blocks[1]->lda};
    for (int64_t p = 0; p < panels.panels(); p += 2) {
      step.nn = panels.panels() - p > 1 ? 2 : 1;
      step.p = p;
      // The accumulators start at the columns' offsets (Note [Int8 GEMM packing]).
      tile_block_any(step.mm, step.nn, a, lda, plan.koff.data(), wd + p * panels.panel_bytes(),
                     panels.panel_bytes(), kblocks, e.offset + p * 16, c[buffer]);
      if (pending.mm > 0) finish(pending, c[buffer ^ 1]);
      pending = step;
      buffer ^= 1;
    }
  }
  if (pending.mm > 0) finish(pending, c[buffer ^ 1]);
}

}  // namespace kiln::cpu::qgemm_detail
