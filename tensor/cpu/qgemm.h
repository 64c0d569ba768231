// The int8 GEMM: u8 x s8 -> s32, with the output stage of a quantized conv
// or linear fused into the store.
//
//   acc[m][n] = sum_k A[m][k] * W[n][k] - a_zero_point * colsum[n] + bias[n]
//
// A (M x K, uint8, row-major with leading dimension lda) is the activations,
// W (N x K, int8) the weights, packed once (pack_qweight) into the layout of
// one kernel path together with colsum[n] = sum_k W[n][k]. Each output then
// goes through one of QGemmOutput's stages (Note [Quantization arithmetic] in
// tensor/quant_math.h) and is written at out + m * stride_m + n * stride_n,
// so that a conv writes its (O, oh*ow) NCHW plane and a linear its (M, N) rows
// from the same kernel.
//
// Note [Int8 GEMM paths]
// Which instructions multiply is chosen at run time, per CPU:
//   Scalar      the reference, plain C++; every other path equals it bit for bit
//   Avx2        vpmaddubsw then vpmaddwd by ones where the call's bytes of A
//               are small enough for vpmaddubsw's int16 sums not to saturate
//               (7-bit activations: reduce_range), else A widened to int16
//               and vpmaddwd (Note [Int8 GEMM on AVX2 without VNNI] in
//               qgemm_kernels.h)
//   AvxVnni     vpdpbusd on 256-bit registers (VEX-encoded AVX-VNNI)
//   Avx512Vnni  vpdpbusd on 512-bit registers
//   Amx         AMX-INT8 tiles (tdpbusd), after asking the kernel for the tile
//               state with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
// qgemm_path() is the best path the CPU has and the caps allow: KILN_SIMD
// (scalar|avx2|avx512, as for every kernel) and KILN_QGEMM
// (scalar|avx2|avxvnni|avx512vnni|amx), which picks one path for comparisons;
// a path the CPU lacks is never chosen. On the Amx path, qgemm uses the tiles
// only from 32 rows of A on and hands smaller products to the Avx512Vnni
// kernels, which read the same packed panels (amx_pays in qgemm_amx.cpp: one
// row would fill one sixteenth of a tile). qgemm_paths_available() lists every
// path this CPU can run, which the tests compare with Scalar.
//
// Note [Residual add in the output stage]
// A residual block ends in add(conv(h), shortcut), and run apart, the conv
// writes its uint8 output and the add reads it back. The UInt8 stage can
// instead finish the add itself (oneDNN's "sum post-op"): with `residual`
// set, each output's uint8 value q is computed exactly as without it, with
// the conv's own scale, zero point and clamp, and what is stored is
//   quant_math::add_value(q, residual[at]) on residual_add's grids
// (zero_point_a and scale_a are the conv output's, b the residual's, the
// rest the add's output, its ReLU folded into lo), read at the same offset
// `at` as the output. So the bytes are those of the conv followed by the
// add, to the bit: the same q, then the same add, whose vector form
// (add_lanes in quantized_binary_simd.h) both the add's loops and these
// stages use. The add's first step is float(q - zero_point); the SIMD
// stages take that float straight from the conv's clamp, its bounds shifted:
//   clamp(nearbyint(x), lo - zp, hi - zp) == clamp(nearbyint(x) + zp, lo, hi) - zp
// exactly, for every x: below 2^24 every term is an integer that float32
// holds exactly, beyond it both sides are the same bound, and NaN gives
// lo - zp on both. That spares three instructions of a chain which, on
// activations that stay in cache, costs what the add's pass over memory
// would have saved. Only outputs whose channels are adjacent (stride_n ==
// 1: rows of a linear, a channels-last conv) take a residual; every path stores
// those a vector of columns at a time, and reads the residual's vector
// beside it. A conv that writes NCHW planes (the direct form) runs the add
// on its own (ops::quantized_conv2d_add falls back).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tensor/cpu/quantized_binary_simd.h"

namespace kiln::cpu {

enum class QGemmPath { Scalar, Avx2, AvxVnni, Avx512Vnni, Amx };

std::string_view qgemm_path_name(QGemmPath path);  // "scalar", "avx2", "avxvnni", "avx512vnni", "amx"
QGemmPath qgemm_path();                            // the best allowed; computed once
std::vector<QGemmPath> qgemm_paths_available();    // every path this CPU runs, Scalar first

// W packed for one path. Immutable once built; shared by threads.
class PackedQWeight {
 public:
  virtual ~PackedQWeight() = default;
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  QGemmPath path() const { return path_; }
  const std::vector<int32_t>& colsum() const { return colsum_; }  // sum_k W[n][k], N values

 protected:
  PackedQWeight(int64_t n, int64_t k, QGemmPath path, std::vector<int32_t> colsum)
      : n_(n), k_(k), path_(path), colsum_(std::move(colsum)) {}

 private:
  int64_t n_, k_;
  QGemmPath path_;
  std::vector<int32_t> colsum_;
};

// w: N x K int8, row-major with leading dimension ldw (>= K).
std::shared_ptr<const PackedQWeight> pack_qweight(const int8_t* w, int64_t n, int64_t k, int64_t ldw,
                                                  QGemmPath path = qgemm_path());

// What happens to acc[m][n] on its way out.
struct QGemmOutput {
  enum class Kind { Int32, Float, UInt8 };
  Kind kind = Kind::Int32;
  int32_t a_zero_point = 0;      // subtracts a_zero_point * colsum[n]
  const int32_t* bias = nullptr;  // N values added to acc, or none
  // Float:  out = float(acc) * scale[n] + float_bias[n]   (a multiply, then an add)
  // UInt8:  out = quant_math::requantize_value(acc, scale[n], zero_point, lo, hi)
  // scale: N values, or one when scale_per_channel is false; float_bias: N values or none.
  const float* scale = nullptr;
  bool scale_per_channel = false;
  const float* float_bias = nullptr;
  int32_t zero_point = 0, lo = 0, hi = 255;
  // Where acc[m][n] goes: (T*)out + m * stride_m + n * stride_n, T = int32_t, float or uint8_t.
  void* out = nullptr;
  int64_t stride_m = 0, stride_n = 1;
  // UInt8 with stride_n == 1 only: the residual add of Note [Residual add in
  // the output stage], residual[m * stride_m + n * stride_n] its other
  // operand; none when null.
  const uint8_t* residual = nullptr;
  QuantizedAddGrids residual_add{};
};

// Runs on the calling thread only (the callers parallelise over images or
// row blocks): M rows of A against every column of the packed W.
void qgemm(int64_t m, const uint8_t* a, int64_t lda, const PackedQWeight& w, const QGemmOutput& out);

// The runs a row of A leaves out (ARuns): the first `first` and the last
// `last` are not read, and their weights are passed over. What they would
// have added to column n's sum is sum[n] (read as whole vectors: N values
// rounded up to a multiple of kQGemmMaxLanes), or zero where sum is null.
// An output row whose top or bottom kernel rows lie in the padding skips
// them, with the zero point times their weights' sum (Note [Kernel rows in
// the padding] in quantized_conv_implicit.h).
struct ARunsSkip {
  int first = 0, last = 0;
  const int32_t* sum = nullptr;
};
constexpr int64_t kQGemmMaxLanes = 16;

// Where one row of A keeps its K values when they are not one contiguous
// row: `count` runs of `groups` * 4 values each, run r starting offset[r]
// elements after the row's start, K = count * groups * 4 in that order,
// less those `skip` leaves out. An implicit convolution reads its patch
// rows this way straight from the padded image, one run per kernel row
// (Note [Implicit int8 convolution on the VNNI paths] in
// quantized_conv_implicit.h).
struct ARuns {
  const int64_t* offset = nullptr;
  int count = 0;
  int64_t groups = 0;
  ARunsSkip skip{};
};

// qgemm with row i of A read as `runs` from a + i * lda. Only the paths that
// read A's bytes as they are: w packed for Avx2, AvxVnni, Avx512Vnni or Amx
// (whose panels the Avx512Vnni kernels read); throws for others or when the
// runs do not add up to w.k().
bool qgemm_runs_supported(QGemmPath path);
void qgemm_runs(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedQWeight& w,
                const QGemmOutput& out);

namespace qgemm_detail {
// An output stage's per-column arrays, each padded with zeros to whole
// vectors (Epilogue).
struct EpilogueArrays {
  std::vector<int32_t> offset;
  std::vector<float> scale, float_bias;
};

// One call's output stage (QGemmOutput) with the per-column values laid out
// for whole vectors: every array has padded_n() entries, zero past n.
struct Epilogue {
  QGemmOutput::Kind kind = QGemmOutput::Kind::Int32;
  int64_t n = 0;                      // valid columns
  const int32_t* offset = nullptr;    // (padded N,) bias[n] - a_zero_point * colsum[n]
  const float* scale = nullptr;       // (padded N,) scale[n], a per-tensor scale repeated; Float/UInt8
  const float* float_bias = nullptr;  // (padded N,) or null; Float only
  float zero_point = 0, lo = 0, hi = 255;  // UInt8 only
  void* out = nullptr;
  int64_t stride_m = 0, stride_n = 1;
  const uint8_t* residual = nullptr;  // UInt8 only: as QGemmOutput's, at out's offsets
  QuantizedAddGrids residual_add{};
};

}  // namespace qgemm_detail

// qgemm_runs for many calls that share the runs, the weight and the output
// stage, as an implicit convolution's output rows do: the stage is checked
// and its per-column arrays built once, where qgemm_runs does both every
// call (LeNet's second layer makes 10 calls an image). `runs.offset` and w
// must outlive it.
class QGemmRunsCalls {
 public:
  // out: the stage of every call; its `out` and `residual` are only checked
  // (non-null where the calls will give one), each call gives its own.
  // span: where every call's runs lie, if known (a convolution's padded
  // plane). The Avx2 path needs the largest byte a call reads (Note [Int8
  // GEMM on AVX2 without VNNI] in qgemm_kernels.h): it scans the span once
  // here, and without one, the rows of each call; a call reading outside
  // the span throws.
  QGemmRunsCalls(const ARuns& runs, const PackedQWeight& w, const QGemmOutput& out, const uint8_t* span = nullptr,
                 int64_t span_bytes = 0);
  QGemmRunsCalls(const QGemmRunsCalls&) = delete;  // its Epilogue points into its own arrays
  QGemmRunsCalls& operator=(const QGemmRunsCalls&) = delete;

  // qgemm_runs(m, a, lda, runs, w, stage) with the stage's out and residual
  // replaced by these (residual null exactly when the stage's is).
  void operator()(int64_t m, const uint8_t* a, int64_t lda, void* out, const uint8_t* residual) const;
  // The same with `skip` in place of the runs' own.
  void operator()(int64_t m, const uint8_t* a, int64_t lda, void* out, const uint8_t* residual,
                  const ARunsSkip& skip) const;

 private:
  ARuns runs_;
  const PackedQWeight& w_;
  QGemmOutput stage_;
  qgemm_detail::EpilogueArrays arrays_;
  qgemm_detail::Epilogue epilogue_;  // the stage, on arrays_; each call sets out and residual
  const uint8_t *span_, *span_end_;
  uint8_t span_max_ = 255;            // the largest byte in the span
  int64_t first_read_ = 0, last_read_ = 0;  // a row's reads from its start: [first_read_, last_read_)
};

}  // namespace kiln::cpu
