// CPU quantized linear, static and dynamic, on the int8 GEMM (qgemm.h), and
// the packed weight that conv2d shares (quantized_weight.h).
//
//   static   out_q[m][n] = requantize(sum_k (x_q[m][k] - zx) * w_q[n][k] + b_q[n])
//   dynamic  out[m][n]   = float(sum_k (x_q[m][k] - zx) * w_q[n][k]) * (sx * sw[n]) + bias[n]
// with x_q quantized per call in the dynamic form. The GEMM's output stage
// does the requantization (or the float scale and bias) as it stores, so the
// int32 accumulators never reach memory.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/quantized_weight.h"
#include "tensor/quant_math.h"

namespace kiln::cpu {

// ---- the packed weight ------------------------------------------------------

CpuPackedQuantizedWeight::CpuPackedQuantizedWeight(const Tensor& weight, QGemmPath path)
    : weight_(weight), path_(path) {
  const QuantParams& params = *weight.impl()->quant_params();
  const int64_t out = weight.size(0);
  scales_.resize(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const double scale = params.scheme == QuantParams::Scheme::PerChannel ? params.scales[o] : params.scales[0];
    scales_[o] = quant_math::scale_as_float(scale);
  }
  one_group_ = pack_groups(1);
}

CpuPackedQuantizedWeight::Groups CpuPackedQuantizedWeight::pack_groups(int64_t groups) const {
  const Tensor w = weight_.contiguous();
  const int8_t* data = w.data<int8_t>();
  const int64_t out = w.size(0), group_out = out / groups;
  Groups packs;
  if (w.dim() == 2) {
    const int64_t k = w.size(1);
    for (int64_t g = 0; g < groups; ++g)
      packs.gemm.push_back(pack_qweight(data + g * group_out * k, group_out, k, k, path_));
    return packs;
  }
  // (O, C/groups, kh, kw) -> per group (O/groups, kh, kw, C/groups): the
  // channels-last order of K the patches are built in.
  const int64_t cg = w.size(1), kh = w.size(2), kw = w.size(3), k = cg * kh * kw;
  std::vector<int8_t> reordered(static_cast<size_t>(group_out * k));  // (O/groups, kh*kw*C/groups)
  packs.kernel_row_sum.assign(static_cast<size_t>(groups * kh * group_out), 0);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < group_out; ++o) {
      const int8_t* src = data + (g * group_out + o) * k;  // (C/groups, kh, kw)
      int8_t* dst = reordered.data() + o * k;
      for (int64_t c = 0; c < cg; ++c) {
        for (int64_t tap = 0; tap < kh * kw; ++tap) dst[tap * cg + c] = src[c * kh * kw + tap];
      }
      for (int64_t tap = 0; tap < kh * kw; ++tap)
        for (int64_t c = 0; c < cg; ++c) packs.kernel_row_sum[(g * kh + tap / kw) * group_out + o] += dst[tap * cg + c];
    }
    packs.gemm.push_back(pack_qweight(reordered.data(), group_out, k, k, path_));
  }
  if (groups == 1 && implicit_qconv_packable(path_, cg, kh, kw))
    packs.implicit = pack_implicit_qconv(reordered.data(), group_out, cg, kh, kw, path_);
  else if (groups == 1 && stacked_qconv_packable(path_, cg, kh, kw))
    packs.implicit = pack_stacked_qconv(reordered.data(), group_out, cg, kh, kw, path_);
  if (direct_qconv_available(path_)) packs.direct = pack_direct_qconv(w, groups);
  return packs;
}

const CpuPackedQuantizedWeight::Groups& CpuPackedQuantizedWeight::groups(int64_t groups) const {
  if (groups == 1) return one_group_;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [count, packs] : other_groups_) {
    if (count == groups) return packs;
  }
  // std::list: references to earlier entries stay valid as it grows.
  return other_groups_.emplace_back(groups, pack_groups(groups)).second;
}

std::shared_ptr<const CpuPackedQuantizedWeight> pack_quantized_weight(const Tensor& weight, QGemmPath path) {
  return std::make_shared<const CpuPackedQuantizedWeight>(weight, path);
}

const CpuPackedQuantizedWeight& cpu_packed_weight(const PackedQuantizedWeight& w, std::string_view op) {
  const auto* cpu = dynamic_cast<const CpuPackedQuantizedWeight*>(&w);
  KILN_CHECK(cpu != nullptr, op, ": the weight was packed for another backend, not the CPU's int8 GEMM");
  return *cpu;
}

std::shared_ptr<const PackedQuantizedWeight> CpuQuantizedKernels::pack_weight(const Tensor& weight) {
  return pack_quantized_weight(weight, qgemm_path());
}

// ---- shared by linear and conv ----------------------------------------------

uint8_t* thread_scratch(int slot, int64_t bytes) {
  thread_local std::vector<uint8_t> buffers[4];
  std::vector<uint8_t>& buffer = buffers[slot];
  const size_t wanted = static_cast<size_t>(bytes + kCopySlack);
  if (buffer.size() < wanted) buffer.resize(wanted);
  return buffer.data();
}

int threads_for_macs(double macs, int64_t items) {
  // About 10 us of int8 work per thread pays for waking it.
  constexpr double kMacsPerThread = double(int64_t{1} << 20);
  const double most = static_cast<double>(std::min<int64_t>(get_num_threads(), std::max<int64_t>(items, 1)));
  return static_cast<int>(std::clamp(macs / kMacsPerThread, 1.0, most));
}

QuantizedOutputStage static_output_stage(const CpuPackedQuantizedWeight& w, const Tensor& bias, float scale_x,
                                         float scale_y) {
  thread_local std::vector<int32_t> bias_q;
  thread_local std::vector<float> multiplier;
  const int64_t n = w.out_channels();
  const std::vector<float>& scale_w = w.scales();
  multiplier.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) multiplier[j] = quant_math::requantize_multiplier(scale_x, scale_w[j], scale_y);
  QuantizedOutputStage stage;
  stage.scale = multiplier.data();
  if (bias.defined()) {
    const float* b = bias.data<float>();
    bias_q.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) bias_q[j] = quant_math::quantize_bias(b[j * bias.stride(0)], scale_x, scale_w[j]);
    stage.bias = bias_q.data();
  }
  return stage;
}

QuantizedOutputStage dynamic_output_stage(const CpuPackedQuantizedWeight& w, const Tensor& bias, float scale_x) {
  thread_local std::vector<float> scale, float_bias;
  const int64_t n = w.out_channels();
  scale.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) scale[j] = scale_x * w.scales()[j];
  QuantizedOutputStage stage;
  stage.scale = scale.data();
  if (bias.defined()) {
    float_bias.resize(static_cast<size_t>(n));
    const float* b = bias.data<float>();
    for (int64_t j = 0; j < n; ++j) float_bias[j] = b[j * bias.stride(0)];
    stage.float_bias = float_bias.data();
  }
  return stage;
}

// Note [Dynamic quantization parameters]
// Dynamic quantization picks the input's grid per call from its own range,
// with the formula of PyTorch's MinMaxObserver for affine quint8, in float32
// step for step (quant/'s observers compute the same, so a dynamic model and
// its observed twin agree):
//   lo = min(min, 0), hi = max(max, 0)        (0 must be exact: padding, ReLU)
//   scale = max((hi - lo) / float(qmax - qmin), FLT_EPSILON)
//   zero_point = clamp(qmin - nearbyint(lo / scale), qmin, qmax)
// with [qmin, qmax] = [0, 255], or [0, 127] under reduce_range. The clamp is
// on the float, so a NaN range gives qmin rather than an undefined
// conversion.
DynamicQParams dynamic_qparams(float min, float max, bool reduce_range) {
  const quant_math::QRange range = quant_math::qrange(DType::UInt8, reduce_range);
  const float lo = std::fmin(min, 0.0f), hi = std::fmax(max, 0.0f);
  const float qmin = static_cast<float>(range.lo), qmax = static_cast<float>(range.hi);
  const float scale = std::fmax((hi - lo) / (qmax - qmin), std::numeric_limits<float>::epsilon());
  const float zero_point = std::fmin(std::fmax(qmin - std::nearbyint(lo / scale), qmin), qmax);
  return {scale, static_cast<int32_t>(zero_point)};
}

Tensor quantize_dynamic_input(const Tensor& x, bool reduce_range) {
  const Tensor xc = x.contiguous();
  const float* data = xc.data<float>();
  float min = 0.0f, max = 0.0f;  // 0 is always in the range
  for (int64_t i = 0; i < xc.numel(); ++i) {
    // Written as selects so that the loop vectorises (minps / maxps).
    min = data[i] < min ? data[i] : min;
    max = data[i] > max ? data[i] : max;
  }
  const DynamicQParams qp = dynamic_qparams(min, max, reduce_range);
  auto params = std::make_shared<QuantParams>();
  params->scales = {static_cast<double>(qp.scale)};
  params->zero_points = {qp.zero_point};
  Tensor q = Tensor::empty(x.shape(), DType::UInt8);
  q.impl()->set_quant_params(std::move(params));
  if (q.numel() == 0) return q;
  // The reduced range ends at 127, which x's own max can round one past.
  const quant_math::QRange range = quant_math::qrange(DType::UInt8, reduce_range);
  kernels_for<QuantizedKernels>(kCPU, "quantize_dynamic").quantize(q, xc, range.lo, range.hi);
  return q;
}

// ---- linear -----------------------------------------------------------------

namespace {

// x: (M, K) uint8 with rows x.stride(0) apart; the rows are split over
// threads, each storing its rows through `stage`'s out pointer (element
// bytes `element_size`, rows stride_m elements apart).
void linear_rows(const Tensor& x, const CpuPackedQuantizedWeight& w, const QGemmOutput& stage, size_t element_size) {
  const int64_t m = x.size(0), k = x.size(1);
  const PackedQWeight& packed = *w.groups(1).gemm[0];
  const uint8_t* a = x.data<uint8_t>();
  const int64_t lda = x.stride(0);
  const int nthreads = threads_for_macs(double(m) * double(packed.n()) * double(k), m);
  parallel_for(0, m, std::max<int64_t>(1, m / nthreads), [&](int64_t begin, int64_t end) {
    QGemmOutput rows = stage;
    rows.out = static_cast<char*>(stage.out) + begin * stage.stride_m * static_cast<int64_t>(element_size);
    qgemm(end - begin, a + begin * lda, lda, packed, rows);
  });
}

}  // namespace

void CpuQuantizedKernels::linear(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w,
                                 const Tensor& bias, bool relu) {
  const CpuPackedQuantizedWeight& packed = cpu_packed_weight(w, "quantized linear");
  const PerTensorParams in = per_tensor(x), to = per_tensor(out);
  const QuantizedOutputStage numbers = static_output_stage(packed, bias, in.scale, to.scale);
  QGemmOutput stage;
  stage.kind = QGemmOutput::Kind::UInt8;
  stage.a_zero_point = in.zero_point;
  stage.bias = numbers.bias;
  stage.scale = numbers.scale;
  stage.scale_per_channel = true;
  stage.zero_point = to.zero_point;
  // ReLU clamps at the real 0, which is the output's zero point.
  stage.lo = relu ? std::max(0, to.zero_point) : 0;
  stage.hi = 255;
  stage.out = out.data<uint8_t>();
  stage.stride_m = out.stride(0);
  stage.stride_n = out.stride(1);
  linear_rows(x, packed, stage, sizeof(uint8_t));
}

void CpuQuantizedKernels::linear_dynamic(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w,
                                         const Tensor& bias, bool reduce_range) {
  const CpuPackedQuantizedWeight& packed = cpu_packed_weight(w, "quantized linear_dynamic");
  const Tensor xq = quantize_dynamic_input(x, reduce_range);  // (M, K) quint8, contiguous
  const PerTensorParams in = per_tensor(xq);
  const QuantizedOutputStage numbers = dynamic_output_stage(packed, bias, in.scale);
  QGemmOutput stage;
  stage.kind = QGemmOutput::Kind::Float;
  stage.a_zero_point = in.zero_point;
  stage.scale = numbers.scale;
  stage.scale_per_channel = true;
  stage.float_bias = numbers.float_bias;
  stage.out = out.data<float>();
  stage.stride_m = out.stride(0);
  stage.stride_n = out.stride(1);
  linear_rows(xq, packed, stage, sizeof(float));
}

}  // namespace kiln::cpu
