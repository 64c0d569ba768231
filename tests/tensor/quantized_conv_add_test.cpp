// The int8 conv with the residual add in its output stage (Note [Residual
// add in the output stage] in tensor/cpu/qgemm.h): the kernel
// (QuantizedKernels::conv2d_add, which never falls back) and the front-end
// (ops::quantized_conv2d_add, which does) against ops::quantized_conv2d then
// ops::quantized_add, byte for byte, on every int8 GEMM path this CPU has,
// in the GEMM and implicit forms, with either ReLU, odd channel counts and
// several threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensor/conv.h"
#include "tensor/factory.h"
#include "tensor/cpu/qgemm.h"
#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/cpu/quantized_conv_implicit.h"
#include "tensor/cpu/quantized_weight.h"
#include "tensor/memory_layout.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"
#include "tensor/quantize.h"
#include "tensor/quantized_kernels.h"
#include "tensor/quantized_ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

Tensor random_float(const Shape& shape, double lo, double hi, uint64_t seed) {
  std::vector<double> v = pseudo_random(shape_numel(shape, "random_float"), lo, hi, seed);
  return from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

// A quint8 (N, C, H, W) tensor with every byte drawn at random, NCHW or
// channels-last (as a conv's output is).
Tensor random_activation(const Shape& shape, double scale, int64_t zero_point, uint64_t seed, bool channels_last) {
  Tensor grid = ops::quantize_per_tensor(zeros(shape), scale, zero_point, DType::UInt8);
  Tensor t = channels_last ? empty_channels_last(shape, {DType::UInt8}) : Tensor::empty(shape, {DType::UInt8});
  std::mt19937 rng(static_cast<uint32_t>(seed));
  uint8_t* bytes = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  t.impl()->set_quant_params(grid.impl()->quant_params());
  return t;
}

Tensor random_weight(const Shape& shape, uint64_t seed) {
  std::vector<double> scales;
  for (int64_t o = 0; o < shape[0]; ++o) scales.push_back((1.0 + 0.37 * double(o % 5)) / 127);
  return ops::quantize_per_channel(random_float(shape, -1.0, 1.0, seed), scales, std::vector<int64_t>(shape[0], 0), 0,
                                   DType::Int8);
}

// The bytes of a quint8 tensor in NCHW order.
std::vector<uint8_t> bytes_of(const Tensor& q) {
  Tensor c = ops::int_repr(q).contiguous();
  return std::vector<uint8_t>(c.data<uint8_t>(), c.data<uint8_t>() + c.numel());
}

struct Case {
  Shape x, w;
  Conv2dParams p;
};

// A residual block's convs and the shapes around them: the block (3x3, 16
// channels), odd output channels, a stride-2 first block, a pointwise conv
// (the plane is A), 3-channel rows (patch rows on every path), many
// channels at batch 1, LeNet's 5x5 rows of 30 bytes.
const Case kCases[] = {
    {{2, 16, 8, 8}, {16, 16, 3, 3}, {.padding = 1}},
    {{3, 16, 9, 7}, {17, 16, 3, 3}, {.padding = 1}},
    {{2, 16, 10, 10}, {33, 16, 3, 3}, {.stride = 2, .padding = 1}},
    {{2, 8, 6, 5}, {20, 8, 1, 1}, {}},
    {{2, 3, 9, 9}, {24, 3, 3, 3}, {.padding = 1}},
    {{1, 3, 11, 10}, {16, 3, 3, 3}, {.stride = 2, .padding = 1}},  // stacked kernel rows on Amx
    {{1, 64, 4, 4}, {64, 64, 3, 3}, {.padding = 1}},
    {{2, 6, 14, 14}, {16, 6, 5, 5}, {}},
};

// The grids: the conv's own output, and the add's.
struct Grids {
  QuantizedConvGrid conv;
  double out_scale;
  int64_t out_zero_point;
  bool relu;
};

Grids grids(const Case& c, bool conv_relu, bool add_relu) {
  const double conv_scale = 0.05 * std::sqrt(double(c.w[1] * c.w[2] * c.w[3])) * 0.3;
  return Grids{{conv_scale, conv_relu ? 40 : 120, conv_relu}, conv_scale * 1.3, add_relu ? 30 : 100, add_relu};
}

Tensor unfused(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias, const Conv2dParams& p,
               const Grids& g, const Tensor& residual) {
  Tensor y = ops::quantized_conv2d(x, w, bias, p, g.conv.scale, g.conv.zero_point, g.conv.relu);
  return ops::quantized_add(y, residual, g.out_scale, g.out_zero_point, g.relu);
}

// The kernel itself into a channels-last output: the fused stage, no fallback.
Tensor fused_kernel(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p, const Grids& g, const Tensor& residual) {
  const Conv2dShape s = conv2d_shape(weight.size(1), Size2d(x.size(2), x.size(3)), Size2d(weight.size(2), weight.size(3)), p);
  Tensor out = empty_channels_last(residual.shape(), {DType::UInt8});
  out.impl()->set_quant_params(
      ops::quantize_per_tensor(zeros({1}), g.out_scale, g.out_zero_point, DType::UInt8).impl()->quant_params());
  quantized_kernels_for(x.device(), "test").conv2d_add(out, x, w, bias, p, s, g.conv, residual, g.relu);
  return out;
}

bool implicit_runs(const cpu::CpuPackedQuantizedWeight& w, const Case& c) {
  const Conv2dShape s = conv2d_shape(c.w[1], Size2d(c.x[2], c.x[3]), Size2d(c.w[2], c.w[3]), c.p);
  if (w.path() == cpu::QGemmPath::Amx) return cpu::implicit_qconv_pays(c.p.groups == 1 ? w.groups(1).implicit.get() : nullptr, c.p);
  return cpu::implicit_runs_pay(w.path(), c.p.groups == 1 ? w.groups(1).implicit.get() : nullptr, c.p, s);
}

TEST(QuantizedConv2dAdd, KernelEqualsConvThenAddOnEveryPathAndForm) {
  uint64_t seed = 1;
  int implicit_ran = 0;
  for (const Case& c : kCases) {
    Tensor x = ops::quantize_per_tensor(random_float(c.x, -3, 6, seed++), 0.05, 60, DType::UInt8);
    Tensor weight = random_weight(c.w, seed++);
    Tensor bias = random_float({c.w[0]}, -2, 2, seed++);
    const Shape out_shape{c.x[0], c.w[0], (c.x[2] + 2 * c.p.padding.h - c.w[2]) / c.p.stride.h + 1,
                          (c.x[3] + 2 * c.p.padding.w - c.w[3]) / c.p.stride.w + 1};
    Tensor residual = random_activation(out_shape, 0.04, 128, seed++, true);
    for (cpu::QGemmPath path : cpu::qgemm_paths_available()) {
      auto packed = cpu::pack_quantized_weight(weight, path);
      for (cpu::QConvAlgorithm form : {cpu::QConvAlgorithm::Gemm, cpu::QConvAlgorithm::Implicit}) {
        if (form == cpu::QConvAlgorithm::Implicit && !implicit_runs(*packed, c)) continue;
        implicit_ran += form == cpu::QConvAlgorithm::Implicit;
        const cpu::ForceQConvAlgorithm force(form);
        for (bool conv_relu : {false, true}) {
          for (bool add_relu : {false, true}) {
            const Grids g = grids(c, conv_relu, add_relu);
            const Tensor want = unfused(x, *packed, bias, c.p, g, residual);
            const Tensor got = fused_kernel(x, *packed, weight, bias, c.p, g, residual);
            ASSERT_EQ(bytes_of(got), bytes_of(want))
                << detail::str("x=", c.x, " w=", c.w) << " path=" << cpu::qgemm_path_name(path)
                << (form == cpu::QConvAlgorithm::Gemm ? " gemm" : " implicit") << " conv_relu=" << conv_relu
                << " add_relu=" << add_relu;
          }
        }
      }
    }
  }
  const auto paths = cpu::qgemm_paths_available();
  if (paths.back() >= cpu::QGemmPath::AvxVnni) {
    EXPECT_GE(implicit_ran, 5);
  }
}

TEST(QuantizedConv2dAdd, FrontEndFusesOrFallsBackToTheSameBytes) {
  const Case& c = kCases[1];
  Tensor x = ops::quantize_per_tensor(random_float(c.x, -3, 6, 40), 0.05, 60, DType::UInt8);
  Tensor weight = random_weight(c.w, 41);
  auto packed = ops::pack_quantized_weight(weight);
  const Grids g = grids(c, false, true);
  const Shape out_shape{3, 17, 9, 7};
  for (bool channels_last : {true, false}) {
    // An NCHW residual is not laid out as the conv's output: the two ops run.
    Tensor residual = random_activation(out_shape, 0.04, 128, 42, channels_last);
    Tensor want = unfused(x, *packed, Tensor(), c.p, g, residual);
    Tensor got = ops::quantized_conv2d_add(x, *packed, Tensor(), c.p, g.conv, residual, g.out_scale,
                                           g.out_zero_point, g.relu);
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << "channels_last residual " << channels_last;
    EXPECT_EQ(ops::q_scale(got), g.out_scale);
    EXPECT_EQ(ops::q_zero_point(got), g.out_zero_point);
    EXPECT_EQ(is_channels_last(got), channels_last);  // the fused output, or quantized_add's
  }
  // Few output channels: the direct form writes NCHW where it runs, and the
  // front-end runs the two ops.
  Tensor w6 = random_weight({6, 3, 5, 5}, 43);
  Tensor x3 = ops::quantize_per_tensor(random_float({2, 3, 20, 20}, -1, 1, 44), 0.01, 100, DType::UInt8);
  auto packed6 = ops::pack_quantized_weight(w6);
  Tensor residual = random_activation({2, 6, 16, 16}, 0.03, 10, 45, true);
  const Grids g6{{0.02, 128, false}, 0.03, 0, true};
  EXPECT_EQ(bytes_of(ops::quantized_conv2d_add(x3, *packed6, Tensor(), {}, g6.conv, residual, g6.out_scale,
                                               g6.out_zero_point, true)),
            bytes_of(unfused(x3, *packed6, Tensor(), {}, g6, residual)));
}

TEST(QuantizedConv2dAdd, ThreadsGiveTheSameBytes) {
  const int saved = get_num_threads();
  const Case& c = kCases[1];
  Tensor weight = random_weight(c.w, 60);
  Tensor bias = random_float({c.w[0]}, -1, 1, 61);
  auto packed = ops::pack_quantized_weight(weight);
  const Grids g = grids(c, false, true);
  for (int64_t batch : {1, 5}) {
    Tensor x = ops::quantize_per_tensor(random_float({batch, 16, 9, 7}, -3, 6, 62), 0.05, 60, DType::UInt8);
    Tensor residual = random_activation({batch, 17, 9, 7}, 0.04, 128, 63, true);
    set_num_threads(1);
    const std::vector<uint8_t> want = bytes_of(unfused(x, *packed, bias, c.p, g, residual));
    const std::vector<uint8_t> one = bytes_of(fused_kernel(x, *packed, weight, bias, c.p, g, residual));
    set_num_threads(std::max(saved, 2));
    const std::vector<uint8_t> many = bytes_of(fused_kernel(x, *packed, weight, bias, c.p, g, residual));
    set_num_threads(saved);
    EXPECT_EQ(one, want) << "batch " << batch;
    EXPECT_EQ(many, want) << "batch " << batch;
  }
}

TEST(QuantizedConv2dAdd, KernelRejectsAResidualLaidOutOtherwise) {
  const Case& c = kCases[0];
  Tensor x = ops::quantize_per_tensor(random_float(c.x, -3, 6, 70), 0.05, 60, DType::UInt8);
  Tensor weight = random_weight(c.w, 71);
  auto packed = ops::pack_quantized_weight(weight);
  Tensor nchw = random_activation({2, 16, 8, 8}, 0.04, 128, 72, false);
  const Grids g = grids(c, false, false);
  expect_error([&] { fused_kernel(x, *packed, weight, Tensor(), c.p, g, nchw); },
               "quantized conv2d_add: the residual must be quint8 laid out as the output");
}

}  // namespace
}  // namespace kiln
