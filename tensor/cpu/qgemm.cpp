// The int8 GEMM's front door (tensor/cpu/qgemm.h): which paths this CPU
// runs, packing W for one of them (Note [Int8 GEMM packing] in
// qgemm_kernels.h), the output stage laid out for whole vectors, and the
// Scalar path, the reference every other path equals bit for bit.
#include "tensor/cpu/qgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/qgemm_kernels.h"
#include "tensor/error.h"
#include "tensor/quant_math.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::cpu {

std::string_view qgemm_path_name(QGemmPath path) {
  switch (path) {
    case QGemmPath::Scalar: return "scalar";
    case QGemmPath::Avx2: return "avx2";
    case QGemmPath::AvxVnni: return "avxvnni";
    case QGemmPath::Avx512Vnni: return "avx512vnni";
    case QGemmPath::Amx: return "amx";
  }
  return "unknown";
}

namespace {

// Linux hands out the AMX tile state (8 KiB per thread) only to processes
// that ask: until then the first tile instruction is a fatal signal. The
// permission is for the whole process, so asking once is enough.
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

std::vector<QGemmPath> detect_paths() {
  const Int8Features& f = int8_features();
  std::vector<QGemmPath> paths{QGemmPath::Scalar};
  if (f.avx2) paths.push_back(QGemmPath::Avx2);
  if (f.avxvnni) paths.push_back(QGemmPath::AvxVnni);
  if (f.avx512vnni) paths.push_back(QGemmPath::Avx512Vnni);
  if (f.amx_int8 && request_amx_permission()) paths.push_back(QGemmPath::Amx);
  return paths;
}

std::string path_list(const std::vector<QGemmPath>& paths) {
  std::string s;
  for (QGemmPath p : paths) s += (s.empty() ? "" : ", ") + std::string(qgemm_path_name(p));
  return s;
}

}  // namespace

std::vector<QGemmPath> qgemm_paths_available() {
  static const std::vector<QGemmPath> paths = detect_paths();
  return paths;
}

QGemmPath qgemm_path() {
  static const QGemmPath path =
      qgemm_detail::choose_path(qgemm_paths_available(), std::getenv("KILN_SIMD"), std::getenv("KILN_QGEMM"));
  return path;
}

namespace qgemm_detail {

QGemmPath choose_path(const std::vector<QGemmPath>& available, const char* simd_cap, const char* qgemm_cap) {
  // The highest path allowed; a 256-bit path (AvxVnni) counts as AVX2 for KILN_SIMD.
  QGemmPath limit = QGemmPath::Amx;
  if (simd_cap) {
    std::string want(simd_cap);
    if (want == "scalar") limit = QGemmPath::Scalar;
    else if (want == "avx2") limit = QGemmPath::AvxVnni;
  }
  if (qgemm_cap) {
    std::string want(qgemm_cap);
    const QGemmPath all[] = {QGemmPath::Scalar, QGemmPath::Avx2, QGemmPath::AvxVnni, QGemmPath::Avx512Vnni,
                             QGemmPath::Amx};
    auto named = std::find_if(std::begin(all), std::end(all), [&](QGemmPath p) { return qgemm_path_name(p) == want; });
    KILN_CHECK(named != std::end(all), "KILN_QGEMM=", want,
               ": expected one of scalar, avx2, avxvnni, avx512vnni, amx");
    limit = std::min(limit, *named);
  }
  QGemmPath best = QGemmPath::Scalar;
  for (QGemmPath p : available)
    if (p <= limit) best = std::max(best, p);
  return best;
}

// colsum[n] = sum_k w[n][k], which the output stage needs for a_zero_point.
static std::vector<int32_t> column_sums(const int8_t* w, int64_t n, int64_t k, int64_t ldw) {
  std::vector<int32_t> colsum(n, 0);
  for (int64_t row = 0; row < n; ++row)
    for (int64_t kk = 0; kk < k; ++kk) colsum[row] += w[row * ldw + kk];
  return colsum;
}

PackedPanels::PackedPanels(const int8_t* w, int64_t n, int64_t k, int64_t ldw, QGemmPath path, int lanes,
                           int group, int kgroup_multiple)
    : PackedQWeight(n, k, path, column_sums(w, n, k, ldw)), lanes_(lanes), group_(group) {
  const int elem = path == QGemmPath::Avx2 && group == 2 ? 2 : 1;  // the Avx2 path's int16 copy
  panels_ = (n + lanes - 1) / lanes;
  kgroups_ = (k + group - 1) / group;
  kgroups_ = (kgroups_ + kgroup_multiple - 1) / kgroup_multiple * kgroup_multiple;
  panel_bytes_ = kgroups_ * lanes * group * elem;
  if (lanes > 1) panel_bytes_ = (panel_bytes_ + 63) / 64 * 64;
  size_t bytes = static_cast<size_t>(std::max<int64_t>(panels_ * panel_bytes_, 64) + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, bytes);
  KILN_CHECK(data_ != nullptr, "pack_qweight: cannot allocate ", bytes, " bytes for a ", n, " x ", k, " weight");
  std::memset(data_, 0, bytes);
  auto* out = static_cast<char*>(data_);
  for (int64_t row = 0; row < n; ++row) {
    const int64_t p = row / lanes, l = row % lanes;
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t g = kk / group, e = kk % group;
      const int64_t at = p * panel_bytes_ + ((g * lanes + l) * group + e) * elem;
      const int8_t v = w[row * ldw + kk];
      if (elem == 2) {
        const int16_t v16 = v;
        std::memcpy(out + at, &v16, 2);
      } else {
        out[at] = static_cast<char>(v);
      }
    }
    // Note [Int8 GEMM on AVX2 without VNNI] in qgemm_kernels.h.
    const int8_t* wr = w + row * ldw;
    for (int64_t kk = 0; kk < k; kk += 2) {
      const int32_t pair = std::abs(int32_t{wr[kk]}) + (kk + 1 < k ? std::abs(int32_t{wr[kk + 1]}) : 0);
      pair_sum_max_ = std::max(pair_sum_max_, pair);
    }
  }
  if (path == QGemmPath::Avx2 && group == 4)
    wide_ = std::make_unique<const PackedPanels>(w, n, k, ldw, path, lanes, 2, 1);
}

uint8_t max_byte(const uint8_t* p, int64_t count) {
  uint8_t top = 0;
  for (int64_t i = 0; i < count; ++i) top = std::max(top, p[i]);
  return top;
}

PackedPanels::~PackedPanels() { std::free(data_); }

void store_scalar(const Epilogue& e, int64_t m, int64_t n, int32_t acc) {
  const int64_t at = m * e.stride_m + n * e.stride_n;
  switch (e.kind) {
    case QGemmOutput::Kind::Int32: static_cast<int32_t*>(e.out)[at] = acc; break;
    case QGemmOutput::Kind::Float: {
      float f = static_cast<float>(acc) * e.scale[n];
      if (e.float_bias) f = f + e.float_bias[n];
      static_cast<float*>(e.out)[at] = f;
      break;
    }
    case QGemmOutput::Kind::UInt8: {
      int32_t q = quant_math::requantize_value(acc, e.scale[n], e.zero_point, e.lo, e.hi);
      if (e.residual) {
        const QuantizedAddGrids& g = e.residual_add;
        q = quant_math::add_value(q, g.zero_point_a, g.scale_a, e.residual[at], g.zero_point_b, g.scale_b,
                                  g.inv_scale_out, g.zero_point_out, g.lo, g.hi);
      }
      static_cast<uint8_t*>(e.out)[at] = static_cast<uint8_t>(q);
      break;
    }
  }
}

// The reference: a plain triple loop, summed in int64 and wrapped to int32
// as the SIMD paths' int32 lanes wrap.
void qgemm_scalar(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e) {
  const auto* wd = static_cast<const int8_t*>(w.data());
  const int64_t k = w.k();
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* ar = a + i * lda;
    for (int64_t j = 0; j < e.n; ++j) {
      const int8_t* wr = wd + j * w.panel_bytes();
      int64_t s = e.offset[j];
      for (int64_t kk = 0; kk < k; ++kk) s += static_cast<int32_t>(ar[kk]) * static_cast<int32_t>(wr[kk]);
      store_scalar(e, i, j, static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(s))));
    }
  }
}

namespace {
// The stage's Epilogue on arrays make_epilogue filled.
Epilogue epilogue_from(const QGemmOutput& out, int64_t n, const EpilogueArrays& arrays) {
  Epilogue e;
  e.kind = out.kind;
  e.n = n;
  e.offset = arrays.offset.data();
  if (!arrays.scale.empty()) e.scale = arrays.scale.data();
  if (!arrays.float_bias.empty()) e.float_bias = arrays.float_bias.data();
  e.zero_point = static_cast<float>(out.zero_point);
  e.lo = static_cast<float>(out.lo);
  e.hi = static_cast<float>(out.hi);
  e.out = out.out;
  e.stride_m = out.stride_m;
  e.stride_n = out.stride_n;
  e.residual = out.residual;
  e.residual_add = out.residual_add;
  return e;
}
}  // namespace

Epilogue make_epilogue(const QGemmOutput& out, const int32_t* colsum, int64_t n, int64_t padded,
                       EpilogueArrays& arrays) {
  using Kind = QGemmOutput::Kind;
  // offset = bias - a_zero_point * colsum in wrapping int32 (Note [Int8
  // GEMM packing]); every array zero past n, so that kernels load whole
  // vectors.
  arrays.offset.assign(padded, 0);
  for (int64_t j = 0; j < n; ++j) {
    uint32_t v = static_cast<uint32_t>(out.bias ? out.bias[j] : 0) -
                 static_cast<uint32_t>(out.a_zero_point) * static_cast<uint32_t>(colsum[j]);
    arrays.offset[j] = static_cast<int32_t>(v);
  }
  arrays.scale.clear();
  if (out.kind != Kind::Int32) {
    arrays.scale.assign(padded, 0.0f);
    for (int64_t j = 0; j < n; ++j) arrays.scale[j] = out.scale[out.scale_per_channel ? j : 0];
  }
  arrays.float_bias.clear();
  if (out.kind == Kind::Float && out.float_bias) {
    arrays.float_bias.assign(padded, 0.0f);
    std::copy(out.float_bias, out.float_bias + n, arrays.float_bias.begin());
  }
  return epilogue_from(out, n, arrays);
}

Epilogue make_epilogue(const QGemmOutput& out, const int32_t* colsum, int64_t n, int64_t padded) {
  thread_local EpilogueArrays arrays;
  return make_epilogue(out, colsum, n, padded, arrays);
}


}  // namespace qgemm_detail

std::shared_ptr<const PackedQWeight> pack_qweight(const int8_t* w, int64_t n, int64_t k, int64_t ldw,
                                                  QGemmPath path) {
  KILN_CHECK(n >= 0 && k >= 0, "pack_qweight: negative size n=", n, " k=", k);
  KILN_CHECK(ldw >= k, "pack_qweight: leading dimension ldw=", ldw, " is smaller than k=", k);
  KILN_CHECK(w != nullptr || n * k == 0, "pack_qweight: null weight for a ", n, " x ", k, " matrix");
  auto available = qgemm_paths_available();
  KILN_CHECK(std::find(available.begin(), available.end(), path) != available.end(), "pack_qweight: path ",
             qgemm_path_name(path), " is not available on this CPU (available: ", path_list(available), ")");
  using qgemm_detail::PackedPanels;
  switch (path) {
    case QGemmPath::Scalar:  // each row one panel of one lane, K values in one group
      return std::make_shared<PackedPanels>(w, n, k, ldw, path, 1, static_cast<int>(std::max<int64_t>(k, 1)), 1);
    case QGemmPath::Avx2: return std::make_shared<PackedPanels>(w, n, k, ldw, path, 8, 4, 1);
    case QGemmPath::AvxVnni: return std::make_shared<PackedPanels>(w, n, k, ldw, path, 8, 4, 1);
    case QGemmPath::Avx512Vnni: return std::make_shared<PackedPanels>(w, n, k, ldw, path, 16, 4, 1);
    case QGemmPath::Amx: return std::make_shared<PackedPanels>(w, n, k, ldw, path, 16, 4, 16);
  }
  KILN_FAIL("pack_qweight: unknown path ", static_cast<int>(path));
}

namespace {

// Checks one call's arguments (named for `op`) and whether it has work.
bool check_call(std::string_view op, int64_t m, const uint8_t* a, int64_t lda, int64_t k, const PackedQWeight& w,
                const QGemmOutput& out) {
  using Kind = QGemmOutput::Kind;
  const int64_t n = w.n();
  KILN_CHECK(m >= 0, op, ": negative row count m=", m);
  KILN_CHECK(lda >= k, op, ": leading dimension lda=", lda, " is smaller than k=", k);
  KILN_CHECK(a != nullptr || m * w.k() == 0, op, ": null A for ", m, " rows of k=", w.k());
  KILN_CHECK(out.out != nullptr || m * n == 0, op, ": null output for a ", m, " x ", n, " result");
  if (out.kind != Kind::Int32)
    KILN_CHECK(out.scale != nullptr, op, ": the ", out.kind == Kind::Float ? "float" : "uint8",
               " output stage needs a scale");
  if (out.kind == Kind::UInt8)
    KILN_CHECK(0 <= out.lo && out.lo <= out.hi && out.hi <= 255, op, ": uint8 output range [", out.lo, ", ",
               out.hi, "] is not inside [0, 255]");
  if (out.residual) {
    KILN_CHECK(out.kind == Kind::UInt8 && out.stride_n == 1, op, ": a residual add needs the uint8 output stage ",
               "with adjacent columns (stride_n 1), got ", out.kind == Kind::UInt8 ? "uint8" : "another kind",
               " with stride_n ", out.stride_n);
    const QuantizedAddGrids& g = out.residual_add;
    KILN_CHECK(0 <= g.lo && g.lo <= g.hi && g.hi <= 255, op, ": the residual add's range [", g.lo, ", ", g.hi,
               "] is not inside [0, 255]");
  }
  return m > 0 && n > 0;
}

qgemm_detail::Epilogue epilogue_for(const qgemm_detail::PackedPanels& w, const QGemmOutput& out) {
  return qgemm_detail::make_epilogue(out, w.colsum().data(), w.n(), w.panels() * w.lanes());
}

void run_qgemm(int64_t m, const uint8_t* a, int64_t lda, const PackedQWeight& w, const QGemmOutput& out,
               bool size_rule) {
  if (!check_call("qgemm", m, a, lda, w.k(), w, out)) return;
  const int64_t n = w.n(), k = w.k();
  const auto& packed = static_cast<const qgemm_detail::PackedPanels&>(w);
  const qgemm_detail::Epilogue e = epilogue_for(packed, out);

  switch (w.path()) {
    case QGemmPath::Scalar: qgemm_detail::qgemm_scalar(m, a, lda, packed, e); return;
    case QGemmPath::Avx2: qgemm_detail::qgemm_avx2(m, a, lda, packed, e); return;
    case QGemmPath::AvxVnni: qgemm_detail::qgemm_avxvnni(m, a, lda, packed, e); return;
    case QGemmPath::Avx512Vnni: qgemm_detail::qgemm_avx512vnni(m, a, lda, packed, e); return;
    case QGemmPath::Amx:
      // Both kernels read the same packed panels (Note [Int8 GEMM packing]).
      if (!size_rule || qgemm_detail::amx_pays(m, n, k)) qgemm_detail::qgemm_amx(m, a, lda, packed, e);
      else qgemm_detail::qgemm_avx512vnni(m, a, lda, packed, e);
      return;
  }
}

}  // namespace

void qgemm(int64_t m, const uint8_t* a, int64_t lda, const PackedQWeight& w, const QGemmOutput& out) {
  run_qgemm(m, a, lda, w, out, true);
}

bool qgemm_runs_supported(QGemmPath path) {
  return path == QGemmPath::Avx2 || path == QGemmPath::AvxVnni || path == QGemmPath::Avx512Vnni ||
         path == QGemmPath::Amx;
}

void qgemm_runs(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedQWeight& w,
                const QGemmOutput& out) {
  QGemmRunsCalls(runs, w, out)(m, a, lda, out.out, out.residual);
}

namespace {
void check_skip(const ARunsSkip& skip, int count) {
  KILN_CHECK(skip.first >= 0 && skip.last >= 0 && skip.first + skip.last <= count, "qgemm_runs: cannot skip the first ",
             skip.first, " and the last ", skip.last, " of ", count, " runs");
}
}  // namespace

QGemmRunsCalls::QGemmRunsCalls(const ARuns& runs, const PackedQWeight& w, const QGemmOutput& out,
                               const uint8_t* span, int64_t span_bytes)
    : runs_(runs), w_(w), stage_(out), span_(span), span_end_(span ? span + span_bytes : nullptr) {
  KILN_CHECK(qgemm_runs_supported(w.path()), "qgemm_runs: the ", qgemm_path_name(w.path()),
             " path cannot read A in runs (it needs avx2, avxvnni, avx512vnni or amx)");
  KILN_CHECK(span != nullptr || span_bytes == 0, "qgemm_runs: a null span of ", span_bytes, " bytes");
  KILN_CHECK(span_bytes >= 0, "qgemm_runs: a span of negative size ", span_bytes);
  KILN_CHECK(runs.count > 0 && runs.offset != nullptr && runs.groups >= 0 && runs.count * runs.groups * 4 == w.k(),
             "qgemm_runs: ", runs.count, " runs of ", runs.groups, " groups of 4 do not make k=", w.k());
  check_skip(runs.skip, runs.count);
  // The stage's checks; each call's m, A and output are checked there (a
  // row's first run starts at offset[0], so lda bounds only whole rows).
  check_call("qgemm_runs", 0, nullptr, 0, 0, w, out);
  const auto& packed = static_cast<const qgemm_detail::PackedPanels&>(w);
  epilogue_ =
      qgemm_detail::make_epilogue(out, packed.colsum().data(), packed.n(), packed.panels() * packed.lanes(), arrays_);
  if (span && w.path() == QGemmPath::Avx2) {
    span_max_ = qgemm_detail::max_byte(span, span_bytes);
    first_read_ = *std::min_element(runs.offset, runs.offset + runs.count);
    last_read_ = *std::max_element(runs.offset, runs.offset + runs.count) + runs.groups * 4;
    // (Over every run, skipped or not: a bound on the rows, not what is read.)
  }
}

void QGemmRunsCalls::operator()(int64_t m, const uint8_t* a, int64_t lda, void* out, const uint8_t* residual) const {
  (*this)(m, a, lda, out, residual, runs_.skip);
}

void QGemmRunsCalls::operator()(int64_t m, const uint8_t* a, int64_t lda, void* out, const uint8_t* residual,
                                const ARunsSkip& skip) const {
  // The stage was checked when the calls were made: what is new here is.
  KILN_CHECK((residual != nullptr) == (stage_.residual != nullptr), "qgemm_runs: a call ",
             residual ? "gave" : "left out", " the residual operand its stage was built ",
             stage_.residual ? "with" : "without");
  check_skip(skip, runs_.count);
  KILN_CHECK(m >= 0, "qgemm_runs: negative row count m=", m);
  if (m == 0 || w_.n() == 0) return;
  KILN_CHECK(a != nullptr, "qgemm_runs: null A for ", m, " rows of k=", w_.k());
  KILN_CHECK(out != nullptr, "qgemm_runs: null output for a ", m, " x ", w_.n(), " result");
  ARuns runs = runs_;
  runs.skip = skip;
  const auto& packed = static_cast<const qgemm_detail::PackedPanels&>(w_);
  qgemm_detail::Epilogue e = epilogue_;
  e.out = out;
  e.residual = residual;
  switch (w_.path()) {
    case QGemmPath::Avx2: {
      // The bound on A's bytes (Note [Int8 GEMM on AVX2 without VNNI] in
      // qgemm_kernels.h): the span's, when the rows lie inside it; without
      // a span the kernel scans the rows.
      std::optional<uint8_t> a_max;
      if (span_) {
        KILN_CHECK(a + first_read_ >= span_ && a + (m - 1) * lda + last_read_ <= span_end_, "qgemm_runs: ", m,
                   " rows ", lda, " bytes apart read outside the span the calls were promised to stay in");
        a_max = span_max_;
      }
      qgemm_detail::qgemm_runs_avx2(m, a, lda, runs, packed, e, a_max);
      return;
    }
    case QGemmPath::AvxVnni: qgemm_detail::qgemm_runs_avxvnni(m, a, lda, runs, packed, e); return;
    default: qgemm_detail::qgemm_runs_avx512vnni(m, a, lda, runs, packed, e); return;
  }
}

void qgemm_detail::qgemm_own_kernel(int64_t m, const uint8_t* a, int64_t lda, const PackedQWeight& w,
                                    const QGemmOutput& out) {
  run_qgemm(m, a, lda, w, out, false);
}

}  // namespace kiln::cpu
