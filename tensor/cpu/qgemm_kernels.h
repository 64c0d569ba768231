// The pieces of the int8 GEMM (tensor/cpu/qgemm.h) that its files share:
// the packed weight layout, the output stage resolved for one call, and each
// path's entry point. Only qgemm*.cpp and the tests include this.
//
// Note [Int8 GEMM packing]
// Every SIMD path keeps the accumulators of one output row in vector lanes,
// one lane per column n, and multiplies a few k at once per lane:
//   AvxVnni     8 lanes x 4 k: 4 int8 (w[n][k..k+3]) for vpdpbusd
//   Avx2        the AvxVnni layout, for vpmaddubsw, and a second copy of W
//               in 8 lanes x 2 k of int16 pairs (w[n][k], w[n][k+1]) for
//               vpmaddwd (the Note below)
//   Avx512Vnni 16 lanes x 4 k
//   Amx        16 lanes x 4 k, as Avx512Vnni, with k padded to a multiple of 64
// so W is cut into panels of `lanes` columns, and a panel stores for each
// k-group g (group = 2 or 4 values of k) the lanes side by side:
//   panel p, group g, lane l, element e  =  w[p * lanes + l][g * group + e]
// (zero past N and past K). One vector load then gives every lane its
// group, and the kernel broadcasts the matching group of one row of A to all
// lanes. A 16-lane panel is exactly the B operand of an AMX tile multiply: 16
// groups (64 values of k) of 16 columns are one 16 x 64-byte tile, rows 64
// bytes apart, so the AMX path and its small-problem fallback to the
// Avx512Vnni kernels (Note [Int8 GEMM paths]) read the same packed weight.
// Scalar keeps W as it came, N rows of K.
//
// Note [Int8 GEMM on AVX2 without VNNI]
// Without vpdpbusd, the way to multiply bytes as they are is vpmaddubsw:
// per int16, a0*w0 + a1*w1 of two adjacent k (a unsigned, w signed),
// saturated to [-32768, 32767]. Then vpmaddwd by a vector of ones sums each
// int32 lane's two int16 into the lane, 4 values of k per lane as vpdpbusd.
// The saturation is the catch: 255 * 127 * 2 = 64770 does not fit, and a
// result that depends on the data is no GEMM. But |a0*w0 + a1*w1| <=
// a_max * (|w0| + |w1|), so with
//   pair_sum_max = the largest |w[n][k]| + |w[n][k+1]| over the packed
//                  pairs (k even: the pairs vpmaddubsw forms)
// no pair saturates whenever a_max * pair_sum_max <= 32767, a_max being the
// largest byte of A the call reads. That holds for every weight when A is
// 7-bit (127 * 256 = 32512): activations observed with reduce_range, as
// PyTorch's fbgemm and x86 qconfigs and ONNX Runtime advise for CPUs without
// VNNI; and for full-range A when the weights are 7-bit. So the Avx2 path
// packs W twice, as AvxVnni's bytes and as int16 pairs, and each call
// checks a_max: the bytes with vpmaddubsw where the bound holds, else A
// widened to int16 and vpmaddwd, exact for any bytes (16 products per
// instruction against vpmaddubsw's 32, plus the widening, and no reading A
// in place). Both give Scalar's bytes, whatever the data.
//
// The accumulator starts at offset[n] = bias[n] - a_zero_point * colsum[n]
// rather than 0: integer addition in int32 wraps the same whatever the order,
// so every path gets the same int32 (the exact sum whenever it fits, which it
// does for K up to 2^31 / (255 * 128), about 65,000).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "tensor/cpu/qgemm.h"

namespace kiln::cpu::qgemm_detail {

// The packed W of Note [Int8 GEMM packing].
class PackedPanels final : public PackedQWeight {
 public:
  // w: (N, K) int8 with rows ldw apart; lanes and group as in the Note;
  // kgroup_multiple: the group count is rounded up to a multiple of it (16
  // for Amx, 1 otherwise).
  // The Avx2 path's bytes (group 4) make the int16 copy too; group 2 on
  // Avx2 is that copy.
  PackedPanels(const int8_t* w, int64_t n, int64_t k, int64_t ldw, QGemmPath path, int lanes, int group,
               int kgroup_multiple);
  ~PackedPanels() override;

  const void* data() const { return data_; }  // 64-byte aligned
  int lanes() const { return lanes_; }
  int group() const { return group_; }
  int64_t panels() const { return panels_; }
  int64_t kgroups() const { return kgroups_; }        // groups per panel, padding included
  int64_t panel_bytes() const { return panel_bytes_; }  // distance between panels
  // The largest |w[n][k]| + |w[n][k+1]| over k even (Note [Int8 GEMM on
  // AVX2 without VNNI]).
  int32_t pair_sum_max() const { return pair_sum_max_; }
  // Avx2 only: the same W as int16 pairs (group 2).
  const PackedPanels& wide() const { return *wide_; }

 private:
  void* data_ = nullptr;
  int lanes_, group_;
  int64_t panels_, kgroups_, panel_bytes_;
  int32_t pair_sum_max_ = 0;
  std::unique_ptr<const PackedPanels> wide_;
};

// The largest of `count` bytes at p (0 for none).
uint8_t max_byte(const uint8_t* p, int64_t count);

// Whether vpmaddubsw multiplies A's bytes, none above a_max, by w exactly.
inline bool avx2_bytes_exact(uint8_t a_max, const PackedPanels& w) {
  return int32_t{a_max} * w.pair_sum_max() <= 32767;
}

// The Epilogue of one call with output stage `out` on n columns with these
// column sums (n values), its arrays `padded` (>= n) entries long. They live
// in `arrays`, or in the calling thread's storage until its next call.
Epilogue make_epilogue(const QGemmOutput& out, const int32_t* colsum, int64_t n, int64_t padded,
                       EpilogueArrays& arrays);
Epilogue make_epilogue(const QGemmOutput& out, const int32_t* colsum, int64_t n, int64_t padded);

// out[m][n] of the Epilogue for one accumulator (the scalar output stage,
// which every SIMD store repeats).
void store_scalar(const Epilogue& e, int64_t m, int64_t n, int32_t acc);

// Each path's whole GEMM: rows [0, m) of A against every panel of w. Defined
// in qgemm_<path>.cpp, compiled for that path's instruction set; call only
// when the CPU has it.
void qgemm_scalar(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e);
void qgemm_avx2(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e);
void qgemm_avxvnni(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e);
void qgemm_avx512vnni(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e);
void qgemm_amx(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e);
// The same with each row's K in runs (qgemm_runs).
void qgemm_runs_avxvnni(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedPanels& w,
                        const Epilogue& e);
void qgemm_runs_avx512vnni(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedPanels& w,
                           const Epilogue& e);
// a_max: no byte the runs read is larger; without it the rows are scanned.
void qgemm_runs_avx2(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedPanels& w,
                     const Epilogue& e, std::optional<uint8_t> a_max);

// Whether qgemm on an Amx-packed weight multiplies m rows with the tiles or
// hands them to the Avx512Vnni kernels, which read the same panels: the
// tiles only pay once a product fills several of them (the rule and its
// threshold are in qgemm_amx.cpp, the figures in docs/BENCHMARKS.md).
// qgemm_amx itself always uses the tiles, and the tests call it directly.
bool amx_pays(int64_t m, int64_t n, int64_t k);

// qgemm without the Amx small-problem rule: the packed path's own kernel runs
// whatever the size, so that tests reach the AMX tiles on small problems too.
void qgemm_own_kernel(int64_t m, const uint8_t* a, int64_t lda, const PackedQWeight& w, const QGemmOutput& out);

// The path qgemm_path() picks among `available` (Scalar first, in
// QGemmPath order) under the caps KILN_SIMD (simd_cap) and KILN_QGEMM
// (qgemm_cap), either null when unset. Throws naming a KILN_QGEMM value that
// is not a path name.
QGemmPath choose_path(const std::vector<QGemmPath>& available, const char* simd_cap, const char* qgemm_cap);

}  // namespace kiln::cpu::qgemm_detail
