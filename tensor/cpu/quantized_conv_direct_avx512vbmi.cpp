// The direct int8 convolution's kernel (Note [Direct int8 convolution with
// positions in the lanes] in quantized_conv_direct.h): per quad of taps, two
// window loads and a vpermt2b make each block's 16 lanes of 4 input bytes,
// and vpdpbusd adds them times every channel's 4 weights. Compiled with
// AVX-512 VNNI and VBMI; reached only when the CPU has both.
// GCC 12's AVX-512 intrinsics warn about their own "undefined" registers
// (GCC bug 105593), as in qgemm_avx512vnni.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <array>
#include <utility>

#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu {
namespace {

using qgemm_detail::Epilogue;

// Blocks per tile for ot channels: at most 20 accumulators, 4 blocks. With
// 24 (LeNet's conv1: 6 channels x 4 blocks), the accumulators, the blocks'
// permuted inputs and the index left GCC 12 moving registers and spilling
// one accumulator to the stack every quad; 3 blocks ran LeNet int8 at
// batch 64 in 0.45 ms against 0.53-0.74 (docs/BENCHMARKS.md, AMD EPYC).
// With dpbusd below, 24 measured no better than 20.
constexpr int blocks_for(int ot) { return ot >= 20 ? 1 : std::min(4, std::max(1, 20 / ot)); }
constexpr int kMaxChannels = 16;  // per tile; more are cut into even chunks

// acc += the lane-wise 4-term dot products of a (u8) and w (s8): vpdpbusd,
// written as inline assembly with acc tied in place. With the intrinsic,
// GCC 12 renamed the accumulators from one quad to the next here, copying
// registers and spilling some to the stack every quad (the GEMM's tiles in
// qgemm_simd.h compile clean with it). Same instruction, same bytes.
inline void dpbusd(__m512i& acc, __m512i a, __m512i w) { asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(w)); }

// OT channels [o0, o0 + OT) x PB blocks, the whole K.
template <int OT, int PB>
void tile(const DirectQConvPlan& plan, const int32_t* weight, int64_t group_out, int64_t o0, const uint8_t* image,
          const DirectQConvBlock* blocks, const Epilogue& e) {
  __m512i acc[OT][PB];
#pragma GCC unroll 16
  for (int o = 0; o < OT; ++o) {
    const __m512i start = _mm512_set1_epi32(e.offset[o0 + o]);
#pragma GCC unroll 4
    for (int b = 0; b < PB; ++b) acc[o][b] = start;
  }
  const uint8_t* in[PB];
#pragma GCC unroll 4
  for (int b = 0; b < PB; ++b) in[b] = image + blocks[b].input;
  const int64_t nq = static_cast<int64_t>(plan.quads.size());
  const int32_t* wq = weight + o0;
  for (int64_t q = 0; q < nq; ++q, wq += group_out) {
    const DirectQConvQuadCall& quad = plan.quads[q];
    const __m512i index = _mm512_load_si512(quad.index);
    __m512i a[PB];
#pragma GCC unroll 4
    for (int b = 0; b < PB; ++b) {
      const __m512i lo = _mm512_loadu_si512(in[b] + quad.window[0]);
      const __m512i hi = _mm512_loadu_si512(in[b] + quad.window[1]);
      a[b] = _mm512_permutex2var_epi8(lo, index, hi);
    }
#pragma GCC unroll 16
    for (int o = 0; o < OT; ++o) {
      const __m512i w = _mm512_set1_epi32(wq[o]);
#pragma GCC unroll 4
      for (int b = 0; b < PB; ++b) dpbusd(acc[o][b], a[b], w);
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < PB; ++b) {
    const __mmask16 mask = static_cast<__mmask16>((1u << blocks[b].valid) - 1);
#pragma GCC unroll 16
    for (int o = 0; o < OT; ++o)
      qgemm_detail::store_column_zmm(e, o0 + o, blocks[b].output + (o0 + o) * e.stride_n, mask, acc[o][b]);
  }
}

using TileFn = void (*)(const DirectQConvPlan&, const int32_t*, int64_t, int64_t, const uint8_t*,
                        const DirectQConvBlock*, const Epilogue&);

// kTiles[(ot - 1) * 4 + (pb - 1)]: ot channels, pb blocks, pb <= blocks_for(ot).
template <int OT, int PB>
constexpr TileFn entry() {
  if constexpr (PB <= blocks_for(OT)) return &tile<OT, PB>;
  else return nullptr;
}
template <size_t... I>
constexpr std::array<TileFn, sizeof...(I)> table(std::index_sequence<I...>) {
  return {entry<static_cast<int>(I / 4) + 1, static_cast<int>(I % 4) + 1>()...};
}
constexpr auto kTiles = table(std::make_index_sequence<kMaxChannels * 4>{});

}  // namespace

void qconv_direct_avx512vbmi(const DirectQConvPlan& plan, const DirectQConvWeight& w, int64_t group,
                             const uint8_t* image, int64_t b0, int64_t b1, const Epilogue& e) {
  const int64_t nq = static_cast<int64_t>(w.quads.size());
  const int32_t* weight = w.weight.data() + group * nq * w.group_out;
  const int64_t chunks = (w.group_out + kMaxChannels - 1) / kMaxChannels;
  const int64_t per_chunk = (w.group_out + chunks - 1) / chunks;
  for (int64_t o0 = 0; o0 < w.group_out; o0 += per_chunk) {
    const int ot = static_cast<int>(std::min<int64_t>(per_chunk, w.group_out - o0));
    const int pb = blocks_for(ot);
    for (int64_t b = b0; b < b1; b += pb) {
      const int count = static_cast<int>(std::min<int64_t>(pb, b1 - b));
      kTiles[(ot - 1) * 4 + (count - 1)](plan, weight, w.group_out, o0, image, plan.blocks.data() + b, e);
    }
  }
}

}  // namespace kiln::cpu
