// The int8 GEMM's residual add (Note [Residual add in the output stage] in
// tensor/cpu/qgemm.h): on every path this CPU runs, the fused stage's bytes
// against the unfused sequence (the uint8 GEMM, then quant_math::add_value
// of its bytes and the residual's), with and without either ReLU, odd
// column counts, rows with gaps between them, and A read in runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/cpu/qgemm.h"
#include "tensor/cpu/qgemm_kernels.h"
#include "tensor/error.h"
#include "tensor/quant_math.h"

namespace kiln::cpu {
namespace {

// A (m, k) uint8 with rows k + 3 apart, W (n, k) int8, a bias, per-channel
// scales that send outputs past both ends of [0, 255], and a residual laid
// out as the output: rows n + 2 apart, the gaps full of junk.
struct Problem {
  int64_t m, n, k, lda, ld_out;
  std::vector<uint8_t> a, residual;
  std::vector<int8_t> w;
  std::vector<int32_t> bias;
  std::vector<float> scale;
};

Problem make_problem(int64_t m, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p{m, n, k, k + 3, n + 2, {}, {}, {}, {}, {}};
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127), bias(-30000, 30000);
  p.a.resize(m * p.lda);
  for (auto& v : p.a) v = static_cast<uint8_t>(u8(rng));
  p.residual.resize(m * p.ld_out);
  for (auto& v : p.residual) v = static_cast<uint8_t>(u8(rng));
  p.w.resize(n * k);
  for (auto& v : p.w) v = static_cast<int8_t>(s8(rng));
  for (int64_t j = 0; j < n; ++j) p.bias.push_back(bias(rng));
  std::uniform_real_distribution<float> spread(0.5f, 2.0f);
  const float base = 300.0f / (255.0f * 128.0f * std::sqrt(static_cast<float>(k)));
  for (int64_t j = 0; j < n; ++j) p.scale.push_back(base * spread(rng));
  return p;
}

// The two stages' settings: the conv's uint8 grid and clamp, and the add's.
struct Grids {
  int32_t a_zero_point, zero_point;
  bool conv_relu;
  QuantizedAddGrids add;
};

Grids grids(bool conv_relu, bool add_relu) {
  const int32_t zp = 97, zp_out = 60;
  // scale_a is the conv output's scale, scale_b the residual's.
  const float scale_a = 0.043f, scale_b = 0.021f, scale_out = 0.05f;
  return Grids{131,
               zp,
               conv_relu,
               QuantizedAddGrids{zp, scale_a, 128, scale_b, quant_math::inverse_scale(scale_out),
                                 static_cast<float>(zp_out), add_relu ? static_cast<float>(zp_out) : 0.0f, 255.0f}};
}

// The output stage writing into `out` (rows ld_out apart), with the residual when fused.
QGemmOutput stage(const Problem& p, const Grids& g, std::vector<uint8_t>& out, bool fused) {
  out.assign(p.m * p.ld_out, 0xCD);
  QGemmOutput o;
  o.kind = QGemmOutput::Kind::UInt8;
  o.a_zero_point = g.a_zero_point;
  o.bias = p.bias.data();
  o.scale = p.scale.data();
  o.scale_per_channel = true;
  o.zero_point = g.zero_point;
  o.lo = g.conv_relu ? g.zero_point : 0;
  o.out = out.data();
  o.stride_m = p.ld_out;
  o.stride_n = 1;
  if (fused) {
    o.residual = p.residual.data();
    o.residual_add = g.add;
  }
  return o;
}

// The unfused sequence: `conv` (the GEMM's own uint8 bytes) then the add.
std::vector<uint8_t> add_after(const Problem& p, const Grids& g, std::vector<uint8_t> conv) {
  const QuantizedAddGrids& a = g.add;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      uint8_t& q = conv[i * p.ld_out + j];
      q = static_cast<uint8_t>(quant_math::add_value(q, a.zero_point_a, a.scale_a, p.residual[i * p.ld_out + j],
                                                     a.zero_point_b, a.scale_b, a.inv_scale_out, a.zero_point_out,
                                                     a.lo, a.hi));
    }
  return conv;
}

std::string describe(const Problem& p, QGemmPath path, bool own, const Grids& g) {
  std::ostringstream os;
  os << "path " << qgemm_path_name(path) << (own ? " (tiles forced)" : "") << " m=" << p.m << " n=" << p.n
     << " k=" << p.k << " conv_relu=" << g.conv_relu << " add_lo=" << g.add.lo;
  return os.str();
}

// Every path (Amx also with its tiles forced on small problems), fused
// against its own unfused bytes and against the scalar path's.
void check_problem(const Problem& p) {
  auto scalar = pack_qweight(p.w.data(), p.n, p.k, p.k, QGemmPath::Scalar);
  for (bool conv_relu : {false, true}) {
    for (bool add_relu : {false, true}) {
      const Grids g = grids(conv_relu, add_relu);
      std::vector<uint8_t> plain, want;
      qgemm(p.m, p.a.data(), p.lda, *scalar, stage(p, g, plain, false));
      want = add_after(p, g, plain);
      for (QGemmPath path : qgemm_paths_available()) {
        auto packed = pack_qweight(p.w.data(), p.n, p.k, p.k, path);
        for (bool own : {false, true}) {
          if (own && path != QGemmPath::Amx) continue;
          auto gemm = [&](const QGemmOutput& o) {
            if (own) qgemm_detail::qgemm_own_kernel(p.m, p.a.data(), p.lda, *packed, o);
            else qgemm(p.m, p.a.data(), p.lda, *packed, o);
          };
          std::vector<uint8_t> unfused, fused;
          gemm(stage(p, g, unfused, false));
          gemm(stage(p, g, fused, true));
          ASSERT_EQ(add_after(p, g, unfused), want) << describe(p, path, own, g) << ": unfused vs scalar";
          ASSERT_EQ(fused, want) << describe(p, path, own, g) << ": fused vs unfused";
        }
      }
    }
  }
}

TEST(QGemmResidual, EveryPathEqualsTheGemmThenTheAdd) {
  // Odd column counts (tails of every vector width), one row, rows past a
  // tile, and products large enough for several AMX tiles.
  const int64_t shapes[][3] = {{1, 16, 144},  {1, 3, 27},    {5, 17, 33},   {17, 33, 75},  {33, 70, 150},
                               {64, 16, 144}, {64, 32, 288}, {100, 64, 576}, {31, 9, 64},  {48, 130, 40}};
  uint32_t seed = 10;
  for (const auto& s : shapes) {
    check_problem(make_problem(s[0], s[1], s[2], seed++));
    if (HasFatalFailure()) return;
  }
}

TEST(QGemmResidual, RunsEqualTheGemmThenTheAdd) {
  // A in runs (qgemm_runs), as the implicit convolution reads it.
  const int64_t m = 23, n = 37, groups = 5, lda = 12;
  const std::vector<int64_t> offsets = {0, 40, 9, 200};
  const int64_t k = static_cast<int64_t>(offsets.size()) * groups * 4;
  Problem p = make_problem(m, n, k, 71);
  std::mt19937 rng(72);
  std::vector<uint8_t> image((m - 1) * lda + offsets.back() + groups * 4);
  for (auto& v : image) v = static_cast<uint8_t>(rng());
  const ARuns runs{offsets.data(), static_cast<int>(offsets.size()), groups};
  int ran = 0;
  for (QGemmPath path : qgemm_paths_available()) {
    if (!qgemm_runs_supported(path)) continue;
    auto packed = pack_qweight(p.w.data(), n, k, k, path);
    for (bool add_relu : {false, true}) {
      const Grids g = grids(false, add_relu);
      std::vector<uint8_t> unfused, fused;
      qgemm_runs(m, image.data(), lda, runs, *packed, stage(p, g, unfused, false));
      qgemm_runs(m, image.data(), lda, runs, *packed, stage(p, g, fused, true));
      EXPECT_EQ(fused, add_after(p, g, unfused)) << "path " << qgemm_path_name(path) << " add_relu=" << add_relu;
    }
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has no path that reads runs (avxvnni, avx512vnni, amx)";
}

void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << "message was: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << expected;
}

TEST(QGemmResidual, OtherStagesOrLayoutsThrow) {
  Problem p = make_problem(4, 8, 16, 5);
  auto packed = pack_qweight(p.w.data(), p.n, p.k, p.k);
  std::vector<uint8_t> out;
  QGemmOutput nchw = stage(p, grids(false, false), out, true);
  nchw.stride_m = 1;
  nchw.stride_n = p.m;
  expect_error([&] { qgemm(p.m, p.a.data(), p.lda, *packed, nchw); },
               "qgemm: a residual add needs the uint8 output stage with adjacent columns (stride_n 1), got uint8 "
               "with stride_n 4");
  std::vector<int32_t> acc(p.m * p.ld_out);
  QGemmOutput int32 = stage(p, grids(false, false), out, true);
  int32.kind = QGemmOutput::Kind::Int32;
  int32.out = acc.data();
  expect_error([&] { qgemm(p.m, p.a.data(), p.lda, *packed, int32); }, "got another kind");
}

}  // namespace
}  // namespace kiln::cpu
