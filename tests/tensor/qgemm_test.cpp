// The int8 GEMM (tensor/cpu/qgemm.h): the Scalar path against an int64
// computation written here, and every path this CPU runs against Scalar bit
// for bit, for every output stage, awkward sizes and both output layouts
// (row-major rows, and the NCHW plane a convolution writes).
#include "tensor/cpu/qgemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/cpu/qgemm_kernels.h"
#include "tensor/error.h"
#include "tensor/quant_math.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::cpu {
namespace {

using Kind = QGemmOutput::Kind;

void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
        << "message was: " << e.what() << "\nexpected to contain: " << expected;
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << expected;
}

// One problem: A (m, k) with rows lda apart, W (n, k) with rows ldw apart;
// the bytes between rows hold junk that must never reach a result.
struct Problem {
  int64_t m, n, k, lda, ldw;
  std::vector<uint8_t> a;
  std::vector<int8_t> w;
  std::vector<int32_t> bias;
  std::vector<float> scale, float_bias;
};

// a_top: A's largest value (127 for 7-bit activations, which the Avx2
// path multiplies as bytes: Note [Int8 GEMM on AVX2 without VNNI]).
Problem make_problem(int64_t m, int64_t n, int64_t k, uint32_t seed, int a_top = 255) {
  std::mt19937 rng(seed);
  Problem p{m, n, k, k + 3, k + 1, {}, {}, {}, {}, {}};
  std::uniform_int_distribution<int> u8(0, a_top), s8(-128, 127), bias(-50000, 50000);
  p.a.resize(std::max<int64_t>(m * p.lda, 1));
  for (auto& v : p.a) v = static_cast<uint8_t>(u8(rng));
  p.w.resize(std::max<int64_t>(n * p.ldw, 1));
  for (auto& v : p.w) v = static_cast<int8_t>(s8(rng));
  for (int64_t j = 0; j < n; ++j) p.bias.push_back(bias(rng));
  // Scales that send the outputs well past both ends of [0, 255], so that
  // the clamps are exercised, and differ per channel.
  std::uniform_real_distribution<float> spread(0.5f, 2.0f), fb(-3.0f, 3.0f);
  const float base = 400.0f / (255.0f * 128.0f * std::sqrt(static_cast<float>(std::max<int64_t>(k, 1))));
  for (int64_t j = 0; j < n; ++j) p.scale.push_back(base * spread(rng));
  for (int64_t j = 0; j < n; ++j) p.float_bias.push_back(fb(rng));
  return p;
}

// The output stage's settings, apart from the buffer.
struct Stage {
  Kind kind = Kind::Int32;
  int32_t a_zero_point = 0;
  bool bias = false, per_channel = false, float_bias = false;
  int32_t zero_point = 0, lo = 0, hi = 255;
  bool nchw = false;  // stride_m = 1, stride_n = m; else rows of n + 2
};

std::string describe(const Problem& p, const Stage& s) {
  std::ostringstream os;
  os << "m=" << p.m << " n=" << p.n << " k=" << p.k << " kind=" << static_cast<int>(s.kind)
     << " a_zp=" << s.a_zero_point << " bias=" << s.bias << " per_channel=" << s.per_channel
     << " float_bias=" << s.float_bias << " zp=" << s.zero_point << " lo=" << s.lo << " hi=" << s.hi
     << " nchw=" << s.nchw;
  return os.str();
}

size_t element_bytes(Kind kind) { return kind == Kind::UInt8 ? 1 : 4; }

// The output buffer as bytes, pre-filled with 0xCD so that writes outside
// the result (the gaps between rows) show up as differences.
struct Result {
  std::vector<uint8_t> bytes;
  int64_t stride_m, stride_n;
};

// The output stage s of problem p, writing into r's fresh bytes.
QGemmOutput output_into(Result& r, const Problem& p, const Stage& s) {
  r.stride_m = s.nchw ? 1 : p.n + 2;
  r.stride_n = s.nchw ? p.m : 1;
  const int64_t span = s.nchw ? p.m * p.n : p.m * (p.n + 2);
  r.bytes.assign(std::max<int64_t>(span, 1) * element_bytes(s.kind), 0xCD);
  QGemmOutput out;
  out.kind = s.kind;
  out.a_zero_point = s.a_zero_point;
  out.bias = s.bias ? p.bias.data() : nullptr;
  out.scale = p.scale.data();
  out.scale_per_channel = s.per_channel;
  out.float_bias = s.float_bias ? p.float_bias.data() : nullptr;
  out.zero_point = s.zero_point;
  out.lo = s.lo;
  out.hi = s.hi;
  out.out = r.bytes.data();
  out.stride_m = r.stride_m;
  out.stride_n = r.stride_n;
  return out;
}

Result run(const Problem& p, const Stage& s, const PackedQWeight& w, bool own_kernel) {
  Result r;
  const QGemmOutput out = output_into(r, p, s);
  if (own_kernel) qgemm_detail::qgemm_own_kernel(p.m, p.a.data(), p.lda, w, out);
  else qgemm(p.m, p.a.data(), p.lda, w, out);
  return r;
}

// The same result from an int64 triple loop and the output formulas of
// qgemm.h, written out here.
Result reference(const Problem& p, const Stage& s) {
  Result r;
  r.stride_m = s.nchw ? 1 : p.n + 2;
  r.stride_n = s.nchw ? p.m : 1;
  const int64_t span = s.nchw ? p.m * p.n : p.m * (p.n + 2);
  r.bytes.assign(std::max<int64_t>(span, 1) * element_bytes(s.kind), 0xCD);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < p.k; ++kk)
        acc += (int64_t{p.a[i * p.lda + kk]} - s.a_zero_point) * int64_t{p.w[j * p.ldw + kk]};
      if (s.bias) acc += p.bias[j];
      EXPECT_TRUE(acc >= INT32_MIN && acc <= INT32_MAX) << "the test's accumulator overflows int32";
      const int32_t acc32 = static_cast<int32_t>(acc);
      const float scale = p.scale[s.per_channel ? j : 0];
      const int64_t at = i * r.stride_m + j * r.stride_n;
      if (s.kind == Kind::Int32) {
        std::memcpy(&r.bytes[at * 4], &acc32, 4);
      } else if (s.kind == Kind::Float) {
        volatile float product = static_cast<float>(acc32) * scale;  // rounded before the add
        float f = s.float_bias ? product + p.float_bias[j] : product;
        std::memcpy(&r.bytes[at * 4], &f, 4);
      } else {
        r.bytes[at] = static_cast<uint8_t>(quant_math::requantize_value(
            acc32, scale, static_cast<float>(s.zero_point), static_cast<float>(s.lo), static_cast<float>(s.hi)));
      }
    }
  }
  return r;
}

// Where two results first differ, as "m=.. n=..", or "" when they are equal.
std::string first_difference(const Result& got, const Result& want, const Problem& p, Kind kind) {
  if (got.bytes == want.bytes) return "";
  const size_t eb = element_bytes(kind);
  for (size_t b = 0; b < got.bytes.size(); ++b) {
    if (got.bytes[b] == want.bytes[b]) continue;
    const int64_t at = static_cast<int64_t>(b / eb);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j)
        if (i * got.stride_m + j * got.stride_n == at) {
          std::ostringstream os;
          os << "first difference at m=" << i << " n=" << j;
          return os.str();
        }
    return "first difference at element " + std::to_string(at) + ", outside the result";
  }
  return "sizes differ";
}

// Every stage worth telling apart.
std::vector<Stage> all_stages() {
  std::vector<Stage> stages;
  for (bool nchw : {false, true}) {
    for (int32_t azp : {0, 131}) {
      for (bool bias : {false, true}) {
        stages.push_back({Kind::Int32, azp, bias, false, false, 0, 0, 255, nchw});
        for (bool pc : {false, true}) {
          for (bool fb : {false, true}) stages.push_back({Kind::Float, azp, bias, pc, fb, 0, 0, 255, nchw});
          stages.push_back({Kind::UInt8, azp, bias, pc, false, 0, 0, 255, nchw});
          stages.push_back({Kind::UInt8, azp, bias, pc, false, 97, 97, 255, nchw});  // relu: lo = zero point
          stages.push_back({Kind::UInt8, azp, bias, pc, false, 128, 3, 250, nchw});
        }
      }
    }
  }
  return stages;
}

std::vector<QGemmPath> paths() { return qgemm_paths_available(); }

std::string path_name(QGemmPath p) { return std::string(qgemm_path_name(p)); }

// Every path (and for Amx its tiles even where qgemm would hand a small
// problem to the VNNI kernels) against the Scalar path and the reference.
void check_all_paths(const Problem& p, const std::vector<Stage>& stages) {
  auto scalar = pack_qweight(p.w.data(), p.n, p.k, p.ldw, QGemmPath::Scalar);
  for (const Stage& s : stages) {
    Result want = reference(p, s);
    Result got_scalar = run(p, s, *scalar, false);
    std::string diff = first_difference(got_scalar, want, p, s.kind);
    ASSERT_EQ(diff, "") << "scalar vs int64 reference, " << describe(p, s);
  }
  for (QGemmPath path : paths()) {
    if (path == QGemmPath::Scalar) continue;
    auto packed = pack_qweight(p.w.data(), p.n, p.k, p.ldw, path);
    ASSERT_EQ(packed->colsum(), scalar->colsum()) << path_name(path);
    for (const Stage& s : stages) {
      Result want = run(p, s, *scalar, false);
      for (bool own : {false, true}) {
        if (own && path != QGemmPath::Amx) continue;
        Result got = run(p, s, *packed, own);
        std::string diff = first_difference(got, want, p, s.kind);
        ASSERT_EQ(diff, "") << "path " << path_name(path) << (own ? " (tiles forced)" : "") << " vs scalar, "
                            << describe(p, s);
      }
    }
  }
}

const int64_t kSizes[] = {1, 3, 5, 17, 31, 33, 64, 75, 150};

TEST(QGemm, EveryPathEqualsScalarOnAwkwardSizes) {
  // Int32 output over a grid of sizes: K not a multiple of 4 or 64, N not
  // a multiple of any panel, M not a multiple of any tile.
  const Stage plain{Kind::Int32, 0, false, false, false, 0, 0, 255, false};
  const Stage full{Kind::Int32, 77, true, false, false, 0, 0, 255, true};
  uint32_t seed = 1;
  for (int64_t m : kSizes)
    for (int64_t n : {1, 3, 5, 6, 10, 16, 17, 31, 33, 64, 84, 120})
      for (int64_t k : {1, 3, 5, 17, 31, 33, 64, 75, 150, 400, 576}) {
        if (m * n * k > 3000000) continue;
        check_all_paths(make_problem(m, n, k, seed++), {plain, full});
        if (HasFatalFailure()) return;
      }
}

TEST(QGemm, EveryPathEqualsScalarForEveryOutputStage) {
  const int64_t shapes[][3] = {{1, 10, 84},   {1, 120, 400}, {3, 17, 33},   {17, 6, 75},  {33, 33, 150},
                               {64, 84, 120}, {75, 16, 150}, {100, 32, 144}, {31, 64, 288}};
  uint32_t seed = 1000;
  for (const auto& s : shapes) {
    check_all_paths(make_problem(s[0], s[1], s[2], seed++), all_stages());
    if (HasFatalFailure()) return;
  }
}

TEST(QGemm, EveryPathEqualsScalarOnConvolutionShapes) {
  // Conv as GEMM (M = output pixels, K = C*kh*kw, N = output channels) into
  // the NCHW plane, requantized with relu, and a few products large enough
  // for several AMX tiles in both directions.
  const int64_t shapes[][3] = {{784, 6, 75}, {100, 16, 150}, {256, 32, 288}, {64, 64, 576}, {400, 64, 576}};
  const Stage conv{Kind::UInt8, 113, true, true, false, 64, 64, 255, true};
  const Stage linear{Kind::Float, 3, true, true, true, 0, 0, 255, false};
  uint32_t seed = 2000;
  for (const auto& s : shapes) {
    check_all_paths(make_problem(s[0], s[1], s[2], seed++), {conv, linear});
    if (HasFatalFailure()) return;
  }
}

TEST(QGemm, EveryPathEqualsScalarOnSevenBitActivations) {
  // A in [0, 127] (reduce_range): the Avx2 path multiplies the bytes with
  // vpmaddubsw, for any weight.
  const Stage plain{Kind::Int32, 0, false, false, false, 0, 0, 255, false};
  const Stage full{Kind::Int32, 77, true, false, false, 0, 0, 255, true};
  uint32_t seed = 3000;
  for (int64_t m : kSizes)
    for (int64_t n : {1, 6, 10, 17, 33, 64})
      for (int64_t k : {1, 3, 5, 17, 31, 64, 75, 150, 576}) {
        if (m * n * k > 3000000) continue;
        check_all_paths(make_problem(m, n, k, seed++, 127), {plain, full});
        if (HasFatalFailure()) return;
      }
  const int64_t shapes[][3] = {{1, 10, 84}, {17, 6, 75}, {64, 84, 120}, {31, 64, 288}};
  for (const auto& s : shapes) {
    check_all_paths(make_problem(s[0], s[1], s[2], seed++, 127), all_stages());
    if (HasFatalFailure()) return;
  }
}

// The bound of Note [Int8 GEMM on AVX2 without VNNI]: the largest pair sum
// of the packed pairs (k even), and a_max * it <= 32767 exactly.
TEST(QGemm, Avx2MultipliesBytesOnlyWhereNoPairCanSaturate) {
  // Row 0: pairs (3, -7) (100, 0) (-128): 10, 100, 128. Row 1: (127, 90)
  // and (-1, 5): 217 and 6. The odd pair (-7, 100) is never formed.
  const int8_t w[2 * 5] = {3, -7, 100, 0, -128, 127, 90, -1, 5, 0};
  auto packed = std::make_shared<qgemm_detail::PackedPanels>(w, 2, 5, 5, QGemmPath::Avx2, 8, 4, 1);
  EXPECT_EQ(packed->pair_sum_max(), 217);
  EXPECT_EQ(packed->wide().pair_sum_max(), 217);
  // 151 * 217 = 32767 fits; 152 * 217 = 32984 does not.
  EXPECT_TRUE(qgemm_detail::avx2_bytes_exact(151, *packed));
  EXPECT_FALSE(qgemm_detail::avx2_bytes_exact(152, *packed));
  const int8_t small[4] = {64, -64, 0, 0};  // 7-bit weights: 128 * 255 = 32640
  EXPECT_TRUE(qgemm_detail::avx2_bytes_exact(
      255, qgemm_detail::PackedPanels(small, 1, 4, 4, QGemmPath::Avx2, 8, 4, 1)));
  const int8_t over[4] = {64, -65, 0, 0};
  EXPECT_FALSE(qgemm_detail::avx2_bytes_exact(
      255, qgemm_detail::PackedPanels(over, 1, 4, 4, QGemmPath::Avx2, 8, 4, 1)));
}

TEST(QGemm, Avx2GivesExactSumsWherePairsWouldSaturate) {
  // Every pair a0*w0 + a1*w1 at the edge: 151 * (127 + 90) = 32767 fits
  // int16, 152 * 217 = 32984 and 255 * 254 would saturate it, -128 * 2 * 255
  // too on the negative side. Whatever the bytes, the path equals Scalar.
  auto paths_here = paths();
  if (std::find(paths_here.begin(), paths_here.end(), QGemmPath::Avx2) == paths_here.end())
    GTEST_SKIP() << "this CPU has no AVX2: only the scalar path runs";
  const Stage s{Kind::Int32, 0, false, false, false, 0, 0, 255, false};
  for (const auto& [a_value, w0, w1] : {std::tuple{151, 127, 90}, std::tuple{152, 127, 90},
                                        std::tuple{255, 127, 127}, std::tuple{255, -128, -128},
                                        std::tuple{127, -128, -128}, std::tuple{128, -128, -128}}) {
    Problem p = make_problem(19, 11, 40, 4000);
    std::fill(p.a.begin(), p.a.end(), static_cast<uint8_t>(a_value));
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t kk = 0; kk < p.k; ++kk) p.w[j * p.ldw + kk] = static_cast<int8_t>(kk % 2 == 0 ? w0 : w1);
    auto packed = pack_qweight(p.w.data(), p.n, p.k, p.ldw, QGemmPath::Avx2);
    const Result want = reference(p, s);
    EXPECT_EQ(first_difference(run(p, s, *packed, false), want, p, s.kind), "")
        << "a=" << a_value << " w=(" << w0 << ", " << w1 << ")";
    // The same bytes read as runs: scanned per call, and through a span.
    const int64_t offsets[2] = {0, 20};
    const ARuns runs{offsets, 2, 5};
    Result got, spanned;
    qgemm_runs(p.m, p.a.data(), p.lda, runs, *packed, output_into(got, p, s));
    EXPECT_EQ(first_difference(got, want, p, s.kind), "") << "runs, a=" << a_value;
    const QGemmOutput stage = output_into(spanned, p, s);
    const QGemmRunsCalls calls(runs, *packed, stage, p.a.data(), static_cast<int64_t>(p.a.size()));
    calls(p.m, p.a.data(), p.lda, stage.out, nullptr);
    EXPECT_EQ(first_difference(spanned, want, p, s.kind), "") << "runs in a span, a=" << a_value;
  }
}

TEST(QGemm, RunsOutsideTheirSpanThrow) {
  auto paths_here = paths();
  if (std::find(paths_here.begin(), paths_here.end(), QGemmPath::Avx2) == paths_here.end())
    GTEST_SKIP() << "this CPU has no AVX2: only the scalar path runs";
  const int8_t w[2 * 8] = {};
  uint8_t a[64] = {};
  int32_t out[8];
  QGemmOutput o;
  o.out = out;
  o.stride_m = 2;
  const int64_t offsets[2] = {0, 4};
  auto packed = pack_qweight(w, 2, 8, 8, QGemmPath::Avx2);
  const QGemmRunsCalls calls(ARuns{offsets, 2, 1}, *packed, o, a, 16);
  calls(2, a, 8, out, nullptr);  // rows 0 and 1 read a[0, 16)
  expect_error([&] { calls(3, a, 8, out, nullptr); },
               "qgemm_runs: 3 rows 8 bytes apart read outside the span the calls were promised to stay in");
  const QGemmRunsCalls later(ARuns{offsets, 2, 1}, *packed, o, a + 4, 16);
  expect_error([&] { later(1, a, 8, out, nullptr); }, "read outside the span");
  expect_error([&] { QGemmRunsCalls(ARuns{offsets, 2, 1}, *packed, o, nullptr, 16); },
               "qgemm_runs: a null span of 16 bytes");
}

TEST(QGemm, RoundsHalvesToEven) {
  // Multiplier 0.5 on small accumulators puts half of all values exactly
  // halfway between two integers: nearbyint must pick the even one (2.5 -> 2,
  // 3.5 -> 4), as requantize_value does.
  Problem p = make_problem(40, 20, 3, 7);
  for (auto& v : p.a) v = static_cast<uint8_t>(v % 4);
  for (auto& v : p.w) v = static_cast<int8_t>(v % 3);
  std::fill(p.scale.begin(), p.scale.end(), 0.5f);
  const Stage s{Kind::UInt8, 0, false, false, false, 10, 0, 255, false};
  Result r = reference(p, s);
  // The reference itself rounds to even: 5 * 0.5 = 2.5 -> 2, 7 * 0.5 = 3.5 -> 4.
  EXPECT_EQ(quant_math::requantize_value(5, 0.5f, 10.0f, 0.0f, 255.0f), 12);
  EXPECT_EQ(quant_math::requantize_value(7, 0.5f, 10.0f, 0.0f, 255.0f), 14);
  EXPECT_EQ(quant_math::requantize_value(-5, 0.5f, 10.0f, 0.0f, 255.0f), 8);
  check_all_paths(p, {s});
}

TEST(QGemm, ScalarMatchesHandComputedValues) {
  // A (2, 3) = [[1, 2, 3], [255, 0, 10]], W (2, 3) = [[1, -1, 2], [-128, 127, 0]],
  // a_zero_point 1, bias [5, -7]:
  //   acc[0][0] = (0*1 + 1*-1 + 2*2) + 5 = 8       acc[0][1] = (0*-128 + 1*127 + 2*0) - 7 = 120
  //   acc[1][0] = (254*1 + -1*-1 + 9*2) + 5 = 278  acc[1][1] = (254*-128 + -1*127 + 0) - 7 = -32646
  const uint8_t a[] = {1, 2, 3, 255, 0, 10};
  const int8_t w[] = {1, -1, 2, -128, 127, 0};
  const int32_t bias[] = {5, -7};
  for (QGemmPath path : paths()) {
    auto packed = pack_qweight(w, 2, 3, 3, path);
    EXPECT_EQ(packed->colsum(), (std::vector<int32_t>{2, -1})) << path_name(path);
    int32_t out[4];
    QGemmOutput o;
    o.a_zero_point = 1;
    o.bias = bias;
    o.out = out;
    o.stride_m = 2;
    qgemm(2, a, 3, *packed, o);
    EXPECT_EQ(std::vector<int32_t>(out, out + 4), (std::vector<int32_t>{8, 120, 278, -32646})) << path_name(path);
    // uint8 at scale 0.25, zero point 100: 8 -> 102, 120 -> 130, 278 -> 169.5 -> 170, -32646 -> 0.
    const float scale = 0.25f;
    uint8_t q[4];
    o.kind = Kind::UInt8;
    o.scale = &scale;
    o.zero_point = 100;
    o.out = q;
    qgemm(2, a, 3, *packed, o);
    EXPECT_EQ(std::vector<int>(q, q + 4), (std::vector<int>{102, 130, 170, 0})) << path_name(path);
  }
}

TEST(QGemm, ZeroSizesWriteNothing) {
  Problem p = make_problem(4, 5, 0, 3);
  for (QGemmPath path : paths()) {
    auto packed = pack_qweight(p.w.data(), 5, 0, 1, path);
    Stage s{Kind::Int32, 3, true, false, false, 0, 0, 255, false};
    Result got = run(p, s, *packed, path == QGemmPath::Amx);
    EXPECT_EQ(first_difference(got, reference(p, s), p, s.kind), "") << "k=0, path " << path_name(path);
    auto empty = pack_qweight(p.w.data(), 0, 7, 7, path);
    int32_t sentinel = 12345;
    QGemmOutput o;
    o.out = &sentinel;
    qgemm(3, p.a.data(), 7, *empty, o);
    qgemm(0, nullptr, 7, *packed, o);
    EXPECT_EQ(sentinel, 12345) << path_name(path);
  }
}

TEST(QGemm, BadArgumentsThrow) {
  const int8_t w[6] = {};
  const uint8_t a[6] = {};
  expect_error([&] { pack_qweight(w, 2, 3, 2, QGemmPath::Scalar); }, "pack_qweight: leading dimension ldw=2");
  expect_error([&] { pack_qweight(w, -1, 3, 3, QGemmPath::Scalar); }, "pack_qweight: negative size n=-1");
  expect_error([&] { pack_qweight(nullptr, 2, 3, 3, QGemmPath::Scalar); }, "pack_qweight: null weight");
  auto packed = pack_qweight(w, 2, 3, 3, QGemmPath::Scalar);
  int32_t out[4];
  QGemmOutput o;
  o.out = out;
  o.stride_m = 2;
  expect_error([&] { qgemm(2, a, 2, *packed, o); }, "qgemm: leading dimension lda=2 is smaller than k=3");
  expect_error([&] { qgemm(-1, a, 3, *packed, o); }, "qgemm: negative row count m=-1");
  expect_error([&] { qgemm(2, nullptr, 3, *packed, o); }, "qgemm: null A");
  QGemmOutput no_out = o;
  no_out.out = nullptr;
  expect_error([&] { qgemm(2, a, 3, *packed, no_out); }, "qgemm: null output");
  QGemmOutput u8 = o;
  u8.kind = Kind::UInt8;
  expect_error([&] { qgemm(2, a, 3, *packed, u8); }, "qgemm: the uint8 output stage needs a scale");
  const float scale = 1.0f;
  u8.scale = &scale;
  u8.lo = 10;
  u8.hi = 300;
  expect_error([&] { qgemm(2, a, 3, *packed, u8); }, "qgemm: uint8 output range [10, 300] is not inside [0, 255]");
  QGemmOutput fl = o;
  fl.kind = Kind::Float;
  expect_error([&] { qgemm(2, a, 3, *packed, fl); }, "qgemm: the float output stage needs a scale");
}

// qgemm_runs reads row i's K as runs at a + i * lda + offset[r]: it gives
// the bytes of qgemm on those runs copied into contiguous rows, on every
// path that reads runs, for overlapping runs (as a convolution's are), a
// lda smaller than K, several panels and a uint8 NCHW-plane output.
TEST(QGemm, RunsGiveTheBytesOfTheRowsTheyName) {
  const int64_t m = 23, n = 37, groups = 5, lda = 12;
  const std::vector<int64_t> offsets = {0, 40, 9, 200};  // out of order, overlapping rows
  const int64_t k = static_cast<int64_t>(offsets.size()) * groups * 4;
  Problem p = make_problem(m, n, k, 71);
  auto scalar = pack_qweight(p.w.data(), n, k, p.ldw, QGemmPath::Scalar);
  std::mt19937 rng(72);
  std::vector<uint8_t> full((m - 1) * lda + offsets.back() + groups * 4);
  for (auto& v : full) v = static_cast<uint8_t>(rng());
  std::vector<uint8_t> seven_bit(full.size());  // what the Avx2 path multiplies as bytes
  for (size_t i = 0; i < full.size(); ++i) seven_bit[i] = full[i] & 127;
  const ARuns runs{offsets.data(), static_cast<int>(offsets.size()), groups};
  int ran = 0;
  for (const std::vector<uint8_t>* image : {&full, &seven_bit}) {
    std::vector<uint8_t> rows(m * k);
    for (int64_t i = 0; i < m; ++i)
      for (size_t r = 0; r < offsets.size(); ++r)
        std::memcpy(rows.data() + i * k + r * groups * 4, image->data() + i * lda + offsets[r], groups * 4);
    Problem copied = p;  // the same problem with the runs copied into rows of A
    copied.a = rows;
    copied.lda = k;
    const std::string bits = image == &full ? " 8-bit A " : " 7-bit A ";
    for (QGemmPath path : paths()) {
      if (!qgemm_runs_supported(path)) continue;
      auto packed = pack_qweight(p.w.data(), n, k, p.ldw, path);
      for (const Stage& s : {Stage{Kind::Int32, 7, true, false, false, 0, 0, 255, false},
                             Stage{Kind::UInt8, 130, true, true, false, 60, 60, 255, true},
                             Stage{Kind::Float, 3, false, true, true, 0, 0, 255, false}}) {
        const Result want = run(copied, s, *scalar, false);
        Result got;
        qgemm_runs(m, image->data(), lda, runs, *packed, output_into(got, p, s));
        EXPECT_EQ(first_difference(got, want, p, s.kind), "") << "path " << path_name(path) << bits << describe(p, s);
        // The same rows in three calls through one QGemmRunsCalls, as an
        // implicit convolution makes one per output row, with and without
        // the span they lie in.
        for (bool span : {false, true}) {
          Result pieces;
          const QGemmOutput stage = output_into(pieces, p, s);
          const QGemmRunsCalls calls = span ? QGemmRunsCalls(runs, *packed, stage, image->data(),
                                                             static_cast<int64_t>(image->size()))
                                            : QGemmRunsCalls(runs, *packed, stage);
          for (int64_t i0 : {int64_t{0}, int64_t{8}, int64_t{16}}) {
            const int64_t rows_here = std::min<int64_t>(8, m - i0);
            calls(rows_here, image->data() + i0 * lda, lda,
                  pieces.bytes.data() + i0 * stage.stride_m * element_bytes(s.kind), nullptr);
          }
          EXPECT_EQ(first_difference(pieces, want, p, s.kind), "")
              << "path " << path_name(path) << bits << "in three calls" << (span ? " in a span " : " ")
              << describe(p, s);
        }
      }
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has no path that reads runs (avx2, avxvnni, avx512vnni, amx)";
}

// Skipped runs (ARunsSkip) are not read: without a sum they count as
// zeros, and qgemm_runs gives the bytes of the scalar GEMM on rows whose
// skipped runs are zero; with a sum, those of the same GEMM with the sum
// added to the bias. On every path that reads runs, for 8-bit A (the Avx2
// path's widened rows) and 7-bit A (its bytes as they are), skipping every
// run too, through qgemm_runs and through a QGemmRunsCalls built without
// skips.
TEST(QGemm, SkippedRunsAreNotRead) {
  const int64_t m = 13, n = 20, groups = 3, lda = 16;
  const std::vector<int64_t> offsets = {0, 30, 12, 50};
  const int count = static_cast<int>(offsets.size());
  const int64_t k = count * groups * 4;
  Problem p = make_problem(m, n, k, 81);
  auto scalar = pack_qweight(p.w.data(), n, k, p.ldw, QGemmPath::Scalar);
  std::vector<int32_t> sum(32, 0);  // n rounded up to kQGemmMaxLanes
  for (int64_t j = 0; j < n; ++j) sum[j] = static_cast<int32_t>(j * 977 - 9000);
  int ran = 0;
  for (int a_top : {255, 127}) {
    std::mt19937 rng(82 + a_top);
    std::vector<uint8_t> image((m - 1) * lda + offsets.back() + groups * 4);
    for (auto& v : image) v = static_cast<uint8_t>(rng() % (a_top + 1));
    for (const auto& [first, last] : {std::pair{1, 0}, {0, 2}, {1, 1}, {3, 1}, {0, 0}}) {
      Problem zeroed = p;  // the runs copied into rows of A, the skipped ones zero
      zeroed.lda = k;
      zeroed.a.assign(m * k, 0);
      for (int64_t i = 0; i < m; ++i)
        for (int r = first; r < count - last; ++r)
          std::memcpy(zeroed.a.data() + i * k + r * groups * 4, image.data() + i * lda + offsets[r], groups * 4);
      Problem summed = zeroed;  // and the sum in the bias
      for (int64_t j = 0; j < n; ++j) summed.bias[j] += sum[j];
      for (QGemmPath path : paths()) {
        if (!qgemm_runs_supported(path)) continue;
        auto packed = pack_qweight(p.w.data(), n, k, p.ldw, path);
        const std::string where = "path " + std::string(path_name(path)) + " skipping " + std::to_string(first) +
                                  " and " + std::to_string(last) + " of " + std::to_string(count) + " runs, A up to " +
                                  std::to_string(a_top);
        const Stage s{Kind::UInt8, 90, true, true, false, 40, 10, 250, false};
        Result zeros;
        qgemm_runs(m, image.data(), lda, ARuns{offsets.data(), count, groups, {first, last, nullptr}}, *packed,
                   output_into(zeros, p, s));
        EXPECT_EQ(first_difference(zeros, run(zeroed, s, *scalar, false), p, s.kind), "") << where;
        Result with_sum;
        qgemm_runs(m, image.data(), lda, ARuns{offsets.data(), count, groups, {first, last, sum.data()}}, *packed,
                   output_into(with_sum, p, s));
        EXPECT_EQ(first_difference(with_sum, run(summed, s, *scalar, false), p, s.kind), "") << where << " with a sum";
        Result calls;
        const QGemmRunsCalls plain(ARuns{offsets.data(), count, groups}, *packed, output_into(calls, p, s),
                                   image.data(), static_cast<int64_t>(image.size()));
        plain(m, image.data(), lda, calls.bytes.data(), nullptr, ARunsSkip{first, last, sum.data()});
        EXPECT_EQ(first_difference(calls, run(summed, s, *scalar, false), p, s.kind), "")
            << where << " with a sum, through calls built without skips";
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has no path that reads runs (avx2, avxvnni, avx512vnni, amx)";
}

TEST(QGemm, RunsThatDoNotMakeKOrAPathWithoutThemThrow) {
  const int8_t w[2 * 8] = {};
  const uint8_t a[64] = {};
  int32_t out[8];
  QGemmOutput o;
  o.out = out;
  o.stride_m = 2;
  const int64_t offsets[2] = {0, 4};
  auto scalar = pack_qweight(w, 2, 8, 8, QGemmPath::Scalar);
  expect_error([&] { qgemm_runs(2, a, 8, ARuns{offsets, 2, 1}, *scalar, o); },
               "qgemm_runs: the scalar path cannot read A in runs (it needs avx2, avxvnni, avx512vnni or amx)");
  for (QGemmPath path : paths()) {
    if (!qgemm_runs_supported(path)) continue;
    auto packed = pack_qweight(w, 2, 8, 8, path);
    expect_error([&] { qgemm_runs(2, a, 8, ARuns{offsets, 2, 2}, *packed, o); },
                 "qgemm_runs: 2 runs of 2 groups of 4 do not make k=8");
    expect_error([&] { qgemm_runs(-1, a, 8, ARuns{offsets, 2, 1}, *packed, o); }, "qgemm_runs: negative row count");
    expect_error([&] { QGemmRunsCalls(ARuns{offsets, 2, 2}, *packed, o); },
                 "qgemm_runs: 2 runs of 2 groups of 4 do not make k=8");
    expect_error([&] { qgemm_runs(2, a, 8, ARuns{offsets, 2, 1, {2, 1}}, *packed, o); },
                 "qgemm_runs: cannot skip the first 2 and the last 1 of 2 runs");
    expect_error([&] { QGemmRunsCalls(ARuns{offsets, 2, 1, {-1, 0}}, *packed, o); },
                 "qgemm_runs: cannot skip the first -1 and the last 0 of 2 runs");
    const QGemmRunsCalls calls(ARuns{offsets, 2, 1}, *packed, o);
    expect_error([&] { calls(2, a, 8, out, nullptr, ARunsSkip{1, 2}); },
                 "qgemm_runs: cannot skip the first 1 and the last 2 of 2 runs");
    expect_error([&] { calls(-1, a, 8, out, nullptr); }, "qgemm_runs: negative row count");
    expect_error([&] { calls(2, a, 8, nullptr, nullptr); }, "qgemm_runs: null output");
    expect_error([&] { calls(2, a, 8, out, a); },
                 "qgemm_runs: a call gave the residual operand its stage was built without");
  }
  expect_error([&] { QGemmRunsCalls(ARuns{offsets, 2, 1}, *scalar, o); },
               "qgemm_runs: the scalar path cannot read A in runs");
}

TEST(QGemm, PackingForAPathTheCpuLacksThrows) {
  auto available = paths();
  const QGemmPath all[] = {QGemmPath::Avx2, QGemmPath::AvxVnni, QGemmPath::Avx512Vnni, QGemmPath::Amx};
  const int8_t w[4] = {};
  int missing = 0;
  for (QGemmPath p : all) {
    if (std::find(available.begin(), available.end(), p) != available.end()) continue;
    ++missing;
    expect_error([&] { pack_qweight(w, 2, 2, 2, p); },
                 "pack_qweight: path " + path_name(p) + " is not available on this CPU (available: scalar");
  }
  if (missing == 0) GTEST_SKIP() << "this CPU runs every int8 GEMM path";
}

// The CPU flags Linux reports (the first "flags" line of /proc/cpuinfo).
std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string w; words >> w;) flags.push_back(w);
    return flags;
  }
  return {};
}

TEST(QGemm, EveryPathTheCpuPromisesIsAvailable) {
  // The paths come from CPUID; /proc/cpuinfo is a second opinion. On an
  // Intel Xeon with AMX (Sapphire Rapids and later) this requires all five
  // paths, so that the comparisons above ran every kernel.
  const std::vector<std::string> flags = cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  const bool avx2 = has("avx2") && has("fma");
  const bool avx512 = avx2 && has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl");
  std::vector<QGemmPath> promised{QGemmPath::Scalar};
  if (avx2) promised.push_back(QGemmPath::Avx2);
  if (avx2 && has("avx_vnni")) promised.push_back(QGemmPath::AvxVnni);
  if (avx512 && has("avx512_vnni")) promised.push_back(QGemmPath::Avx512Vnni);
  if (avx512 && has("avx512_vnni") && has("amx_tile") && has("amx_int8")) {
    // Linux may refuse the tile state (an old kernel, a seccomp policy);
    // the library then goes without Amx, and so does this expectation.
    bool granted = false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
    if (granted) promised.push_back(QGemmPath::Amx);
    else std::printf("note: the CPU has AMX-INT8 but arch_prctl(ARCH_REQ_XCOMP_PERM) was refused: no Amx path\n");
  }
  std::string want, got;
  for (QGemmPath p : promised) want += path_name(p) + " ";
  for (QGemmPath p : paths()) got += path_name(p) + " ";
  EXPECT_EQ(got, want) << "qgemm_paths_available() against /proc/cpuinfo's flags";
}

TEST(QGemm, CapsChooseThePath) {
  using qgemm_detail::choose_path;
  const std::vector<QGemmPath> all{QGemmPath::Scalar, QGemmPath::Avx2, QGemmPath::AvxVnni, QGemmPath::Avx512Vnni,
                                   QGemmPath::Amx};
  EXPECT_EQ(choose_path(all, nullptr, nullptr), QGemmPath::Amx);
  EXPECT_EQ(choose_path(all, "scalar", nullptr), QGemmPath::Scalar);
  EXPECT_EQ(choose_path(all, "avx2", nullptr), QGemmPath::AvxVnni);
  EXPECT_EQ(choose_path(all, "avx512", nullptr), QGemmPath::Amx);
  EXPECT_EQ(choose_path(all, nullptr, "avx2"), QGemmPath::Avx2);
  EXPECT_EQ(choose_path(all, nullptr, "avx512vnni"), QGemmPath::Avx512Vnni);
  EXPECT_EQ(choose_path(all, "avx2", "amx"), QGemmPath::AvxVnni);
  EXPECT_EQ(choose_path(all, "scalar", "avx2"), QGemmPath::Scalar);
  // A path the CPU lacks is never chosen: the next one below it is.
  const std::vector<QGemmPath> no_avxvnni{QGemmPath::Scalar, QGemmPath::Avx2, QGemmPath::Avx512Vnni};
  EXPECT_EQ(choose_path(no_avxvnni, nullptr, "avxvnni"), QGemmPath::Avx2);
  EXPECT_EQ(choose_path(no_avxvnni, nullptr, "amx"), QGemmPath::Avx512Vnni);
  EXPECT_EQ(choose_path({QGemmPath::Scalar, QGemmPath::Avx2}, nullptr, nullptr), QGemmPath::Avx2);
  expect_error([&] { choose_path(all, nullptr, "vnni"); },
               "KILN_QGEMM=vnni: expected one of scalar, avx2, avxvnni, avx512vnni, amx");
  // qgemm_path() is that choice for this CPU and this environment.
  EXPECT_EQ(qgemm_path(), choose_path(paths(), std::getenv("KILN_SIMD"), std::getenv("KILN_QGEMM")));
  EXPECT_EQ(paths().front(), QGemmPath::Scalar);
}

}  // namespace
}  // namespace kiln::cpu
