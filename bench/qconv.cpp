// ResNet-20's int8 convolutions one at a time, at the batch size of the
// quantized-model figures (docs/BENCHMARKS.md), on 1 thread: what each layer
// of `quant_bench --model resnet20` costs, so that a change to one kernel can
// be measured on the layers it touches without the rest of the model.
// One line per layer:
//   qconv layer=.. x=NxCxHxW o=.. k=.. stride=.. add=0|1 count=.. ms=.. gops=.. share=..
// ms is one call (best of 30 samples of ~5 ms each, as bench/qgemm), gops the
// multiply-adds (x2) per second, count how many such calls one forward pass
// of ResNet-20 makes, share the layer's part of the sum of count x ms.
//
//   build/bench/qconv                 # batch 64
//   build/bench/qconv --batch 1
//   KILN_QGEMM=avx512vnni build/bench/qconv   # another int8 path
//   build/bench/qconv --layer stem --qconv gemm  # one layer, one form (Auto: the library's choice)
//
// The activations are random bytes, channels-last as a convolution's output
// is (the first layer reads an NCHW image, as the model's QuantStub writes);
// the weights random int8 per channel. The output grid is chosen so that
// most outputs land inside it, as calibration does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/time_best.h"
#include "kiln.h"
#include "tensor/cpu/qgemm.h"
#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/memory_layout.h"
#include "tensor/parallel.h"
#include "tensor/quantize.h"
#include "tensor/quantized_ops.h"

namespace {

using kiln::DType;
using kiln::Tensor;

// About 5e-3 s a sample (bench/time_best.h).
double time_best(const std::function<void()>& fn) { return kiln::bench::time_best(fn, 5e-3); }

Tensor random_activation(const kiln::Shape& shape, bool channels_last, uint32_t seed) {
  Tensor grid = kiln::ops::quantize_per_tensor(kiln::zeros(shape), 0.05, 0, DType::UInt8);
  Tensor t = channels_last ? kiln::empty_channels_last(shape, {DType::UInt8}) : Tensor::empty(shape, {DType::UInt8});
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u8(0, 80);  // post-ReLU activations: the low part of the grid
  uint8_t* bytes = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) bytes[i] = static_cast<uint8_t>(u8(rng));
  t.impl()->set_quant_params(grid.impl()->quant_params());
  return t;
}

Tensor random_weight(const kiln::Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (auto& x : v) x = u(rng);
  std::vector<double> scales(static_cast<size_t>(shape[0]), 1.0 / 127);
  return kiln::ops::quantize_per_channel(kiln::from_vector<float>(v, shape), scales,
                                         std::vector<int64_t>(static_cast<size_t>(shape[0]), 0), 0, DType::Int8);
}

struct Layer {
  const char* name;
  int64_t c, h, o, k, stride;
  bool add;           // the second conv of a residual block: the add and ReLU in its output stage
  bool nchw_input;    // the stem reads the QuantStub's NCHW image
  int count;          // calls per forward pass of ResNet-20
};

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 64;
  std::string only;  // a layer's name, or every layer
  kiln::cpu::QConvAlgorithm form = kiln::cpu::QConvAlgorithm::Auto;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") batch = std::stoll(value);
    else if (flag == "--layer") only = value;
    else if (flag == "--qconv" && value == "gemm") form = kiln::cpu::QConvAlgorithm::Gemm;
    else if (flag == "--qconv" && value == "implicit") form = kiln::cpu::QConvAlgorithm::Implicit;
    else if (flag == "--qconv" && value == "direct") form = kiln::cpu::QConvAlgorithm::Direct;
    else {
      std::fprintf(stderr, "qconv: bad flag %s %s (flags: --batch N, --layer NAME, --qconv gemm|implicit|direct)\n",
                   flag.c_str(), value.c_str());
      return 2;
    }
  }
  const kiln::cpu::ForceQConvAlgorithm forced(form);
  kiln::set_num_threads(1);
  const Layer layers[] = {
      {"stem", 3, 32, 16, 3, 1, false, true, 1},
      {"layer1.conv1", 16, 32, 16, 3, 1, false, false, 3},
      {"layer1.conv2+add", 16, 32, 16, 3, 1, true, false, 3},
      {"layer2.0.conv1", 16, 32, 32, 3, 2, false, false, 1},
      {"layer2.0.downsample", 16, 32, 32, 1, 2, false, false, 1},
      {"layer2.conv1", 32, 16, 32, 3, 1, false, false, 2},
      {"layer2.conv2+add", 32, 16, 32, 3, 1, true, false, 3},
      {"layer3.0.conv1", 32, 16, 64, 3, 2, false, false, 1},
      {"layer3.0.downsample", 32, 16, 64, 1, 2, false, false, 1},
      {"layer3.conv1", 64, 8, 64, 3, 1, false, false, 2},
      {"layer3.conv2+add", 64, 8, 64, 3, 1, true, false, 3},
  };
  struct Row {
    const Layer* l;
    double ms, gops;
  };
  std::vector<Row> rows;
  double total = 0;
  uint32_t seed = 1;
  for (const Layer& l : layers) {
    if (!only.empty() && only != l.name) continue;
    Tensor x = random_activation({batch, l.c, l.h, l.h}, !l.nchw_input, seed++);
    auto w = kiln::ops::pack_quantized_weight(random_weight({l.o, l.c, l.k, l.k}, seed++));
    std::vector<float> b(static_cast<size_t>(l.o), 0.1f);
    Tensor bias = kiln::from_vector<float>(b, {l.o});
    kiln::Conv2dParams p;
    p.stride = {l.stride, l.stride};
    p.padding = {l.k / 2, l.k / 2};
    const int64_t oh = (l.h + 2 * (l.k / 2) - l.k) / l.stride + 1;
    // Each output is a sum of c*k*k products of bytes up to 80 with weights up
    // to 1 (scale 0.05 * 1/127): a grid of width 0.1 keeps most of them inside.
    const double out_scale = 0.1;
    Tensor residual = random_activation({batch, l.o, oh, oh}, true, seed++);
    std::function<void()> call;
    if (l.add) {
      const kiln::QuantizedConvGrid grid{0.1, 0, false};
      call = [&] { kiln::ops::quantized_conv2d_add(x, *w, bias, p, grid, residual, out_scale, 0, true); };
    } else {
      call = [&] { kiln::ops::quantized_conv2d(x, *w, bias, p, out_scale, 0, true); };
    }
    const double s = time_best(call);
    const double macs = double(batch) * oh * oh * l.o * l.c * l.k * l.k;
    rows.push_back({&l, s * 1e3, 2 * macs / s * 1e-9});
    total += l.count * s * 1e3;
  }
  const std::string path_name = std::string(kiln::cpu::qgemm_path_name(kiln::cpu::qgemm_path()));
  const char* path = path_name.c_str();
  for (const Row& r : rows) {
    const Layer& l = *r.l;
    std::printf("qconv layer=%s x=%ldx%ldx%ldx%ld o=%ld k=%ld stride=%ld add=%d count=%d ms=%.4f gops=%.1f share=%.3f path=%s\n",
                l.name, static_cast<long>(batch), static_cast<long>(l.c), static_cast<long>(l.h),
                static_cast<long>(l.h), static_cast<long>(l.o), static_cast<long>(l.k), static_cast<long>(l.stride),
                l.add ? 1 : 0, l.count, r.ms, r.gops, l.count * r.ms / total, path);
  }
  std::printf("qconv total_ms=%.3f (the convolutions of one forward pass, count x ms)\n", total);
  return 0;
}
