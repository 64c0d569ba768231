// CPU quantized conv2d, static and dynamic, in one of three forms (conv_form
// picks one):
// - the GEMM form: a padded channels-last copy of each image, its patches as
//   the uint8 rows of an int8 GEMM, and the GEMM's output stage storing each
//   pixel's channels (Note [Quantized convolution on the int8 GEMM] in
//   quantized_weight.h);
// - the implicit form: the same GEMM with A read straight from the padded
//   copy, no patches, by AMX tiles (Note [Implicit int8 convolution on AMX
//   tiles] in quantized_conv_implicit.h) or by the VNNI kernels' broadcasts
//   (Note [Implicit int8 convolution on the VNNI paths], there too);
// - with few output channels, the direct form over padded NCHW planes (Note
//   [Direct int8 convolution with positions in the lanes] in
//   quantized_conv_direct.h), writing NCHW.
// conv2d_add runs the first two with a residual add in the output stage
// (Note [Residual add in the output stage] in qgemm.h).
#include <algorithm>
#include <array>
#include <cstring>

#include "tensor/cpu/copy_simd.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/qgemm_kernels.h"
#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/cpu/quantized_conv_implicit.h"
#include "tensor/cpu/quantized_weight.h"
#include "tensor/quant_math.h"

namespace kiln::cpu {
namespace {

// Scratch slots: the padded image, and the patch rows being multiplied.
constexpr int kImageSlot = 0, kPatchSlot = 1;

// The sizes one call works with, from the params and one group's shape.
struct ConvPlan {
  Conv2dParams p;
  Conv2dShape s;            // channels = C/groups
  int64_t group_out;        // O/groups
  int64_t positions;        // oh*ow, the GEMM's M
  int64_t k;                // kh*kw*C/groups, the GEMM's K
  int64_t padded_h, padded_w;
  int64_t image_bytes;      // groups * padded_h * padded_w * C/groups
  bool pointwise;           // 1x1, stride 1, no padding: the padded image is A
  int64_t block_rows;       // positions per GEMM call
  // The implicit form on the VNNI paths: where a patch row's runs start in
  // the padded plane (qgemm_runs), else no offsets and the rows are built.
  ImplicitQConvRuns runs;

  ConvPlan(const Conv2dParams& params, const Conv2dShape& shape, int64_t out_channels)
      : p(params), s(shape), group_out(out_channels / params.groups) {
    positions = s.output.h * s.output.w;
    k = s.kernel.h * s.kernel.w * s.channels;
    padded_h = s.input.h + 2 * p.padding.h, padded_w = s.input.w + 2 * p.padding.w;
    image_bytes = p.groups * padded_h * padded_w * s.channels;
    pointwise = s.kernel == Size2d(1) && p.stride == Size2d(1) && p.padding == Size2d(0);
    // Blocks of patch rows small enough (~64 KB) to stay in L2 between
    // being built and being read.
    block_rows = std::clamp<int64_t>((int64_t{1} << 16) / std::max<int64_t>(k, 1), 16, std::max<int64_t>(positions, 1));
  }

  // Read in place, the runs each output row passes over (Note [Kernel rows
  // in the padding] in quantized_conv_implicit.h): output row y skips
  // skips[row_skip[y]], and skips[0] is none.
  std::vector<KernelRowSkip> skips;
  std::vector<int> row_skip;

  // Reads A in place from the padded plane (Note [Implicit int8
  // convolution on the VNNI paths] in quantized_conv_implicit.h), with the
  // weight's padded rows w where it has them.
  void read_in_place(const ImplicitQConvWeight* w) {
    runs = implicit_qconv_runs(w, p, s, padded_w);
    if (!in_place()) return;
    skips = {KernelRowSkip{}};
    const int64_t runs_per_row = static_cast<int64_t>(runs.offsets.size()) / s.kernel.h;
    for (int64_t y = 0; y < s.output.h; ++y) {
      const KernelRowSkip skip = kernel_rows_in_padding(p, s, y, runs_per_row);
      const auto at = std::find(skips.begin(), skips.end(), skip);
      row_skip.push_back(static_cast<int>(at - skips.begin()));
      if (at == skips.end()) skips.push_back(skip);
    }
  }
  bool in_place() const { return !runs.offsets.empty(); }
};

// image (C, H, W), any strides -> padded (groups, padded_h, padded_w, C/groups),
// the border at the input's zero point.
void pad_channels_last(const uint8_t* image, int64_t stride_c, int64_t stride_h, int64_t stride_w,
                       const ConvPlan& plan, uint8_t zero_point, uint8_t* padded) {
  const Conv2dParams& p = plan.p;
  const Conv2dShape& s = plan.s;
  const int64_t cg = s.channels;
  if (p.groups == 1 && stride_c == 1 && (s.input.w == 1 || stride_w == cg)) {
    // A channels-last image: each of its rows is one run of W*C bytes, and
    // only the border around the runs is set to the zero point.
    const int64_t row = plan.padded_w * cg, left = p.padding.w * cg, run = s.input.w * cg;
    const int64_t below = plan.padded_h - p.padding.h - s.input.h;
    std::memset(padded, zero_point, static_cast<size_t>(p.padding.h * row));
    for (int64_t y = 0; y < s.input.h; ++y) {
      uint8_t* dst = padded + (y + p.padding.h) * row;
      std::memset(dst, zero_point, static_cast<size_t>(left));
      std::memcpy(dst + left, image + y * stride_h, static_cast<size_t>(run));
      std::memset(dst + left + run, zero_point, static_cast<size_t>(row - left - run));
    }
    std::memset(padded + (p.padding.h + s.input.h) * row, zero_point, static_cast<size_t>(below * row));
    return;
  }
  if (p.padding.h > 0 || p.padding.w > 0) std::memset(padded, zero_point, static_cast<size_t>(plan.image_bytes));
  const bool vbmi = simd_level() == SimdLevel::Avx512 && int8_features().avx512vbmi;
  if (p.groups == 1 && stride_w == 1 && (vbmi ? cg <= 16 : cg <= 8 && simd_level() >= SimdLevel::Avx2)) {
    // An NCHW image with few channels (LeNet's second layer reads 6 from the
    // first, whose direct form writes NCHW; its first reads the 3 of the
    // image): its planes' rows interleaved with byte permutes (VBMI) or
    // unpacks (AVX2), a whole image at once when its rows and the padded
    // ones both follow one another.
    const auto interleave = vbmi ? interleave_planes_u8_avx512vbmi : interleave_planes_u8_avx2;
    const int64_t row = plan.padded_w * cg;
    uint8_t* interior = padded + p.padding.h * row + p.padding.w * cg;
    if (p.padding.w == 0 && stride_h == s.input.w) {
      interleave(interior, image, stride_c, cg, s.input.h * s.input.w);
    } else {
      for (int64_t y = 0; y < s.input.h; ++y) {
        interleave(interior + y * row, image + y * stride_h, stride_c, cg, s.input.w);
      }
    }
    return;
  }
  for (int64_t group = 0; group < plan.p.groups; ++group) {
    uint8_t* plane = padded + group * plan.padded_h * plan.padded_w * cg;  // (padded_h, padded_w, C/groups)
    for (int64_t c = 0; c < cg; ++c) {
      const uint8_t* src = image + (group * cg + c) * stride_c;
      for (int64_t y = 0; y < s.input.h; ++y) {
        const uint8_t* row = src + y * stride_h;
        uint8_t* dst = plane + ((y + p.padding.h) * plan.padded_w + p.padding.w) * cg + c;
        for (int64_t x = 0; x < s.input.w; ++x) dst[x * cg] = row[x * stride_w];
      }
    }
  }
}

// Copies a run of n bytes in 16-byte pieces, rounded up: up to 15 bytes past
// both ends are touched (kCopySlack).
inline void copy_run(uint8_t* dst, const uint8_t* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) std::memcpy(dst + i, src + i, 16);
}

// Rows [begin, end) of one group's patch matrix, (end - begin, K) with K =
// (ky, kx, c), from its padded channels-last plane (padded_h, padded_w, C/groups).
void build_patches(const uint8_t* plane, const ConvPlan& plan, int64_t begin, int64_t end, uint8_t* rows) {
  const Conv2dParams& p = plan.p;
  const Conv2dShape& s = plan.s;
  const int64_t cg = s.channels;
  const int64_t run = p.dilation.w == 1 ? s.kernel.w * cg : cg;  // contiguous bytes per copy
  int64_t oy = begin / plan.s.output.w, ox = begin % plan.s.output.w;
  for (int64_t position = begin; position < end; ++position) {
    uint8_t* dst = rows + (position - begin) * plan.k;
    for (int64_t ky = 0; ky < s.kernel.h; ++ky) {
      const uint8_t* src = plane + ((oy * p.stride.h + ky * p.dilation.h) * plan.padded_w + ox * p.stride.w) * cg;
      if (p.dilation.w == 1) {
        copy_run(dst, src, run);
        dst += run;
      } else {
        for (int64_t kx = 0; kx < s.kernel.w; ++kx, dst += run) copy_run(dst, src + kx * p.dilation.w * cg, run);
      }
    }
    if (++ox == plan.s.output.w) ox = 0, ++oy;
  }
}

// Where one image's outputs go: element (o, position) of the (O, oh*ow)
// result is at out_image + (o * stride_c + position * stride_position)
// elements; NCHW planes have stride_position 1, channels-last stride_c 1.
// A residual add's other operand, where there is one, lies at the same
// offsets from `residual`.
struct OutputImage {
  char* data;
  int64_t stride_c, stride_position;
  size_t element_size;
  const uint8_t* residual;
};

// Positions [begin, end) of one image, every group.
// skipped_sums: read in place, the sums of plan.skips[v] for group g at
// (v * groups + g) * skipped_sums_stride (ARunsSkip::sum; v = 0 unused).
void conv_rows(const uint8_t* padded, const ConvPlan& plan,
               const std::vector<std::shared_ptr<const PackedQWeight>>& packs, const QuantizedOutputStage& numbers,
               const std::vector<int32_t>& skipped_sums, int64_t skipped_sums_stride, const QGemmOutput& stage,
               const OutputImage& image, int64_t begin, int64_t end) {
  const int64_t cg = plan.s.channels, plane_bytes = plan.padded_h * plan.padded_w * cg;
  uint8_t* rows = plan.pointwise || plan.in_place() ? nullptr : thread_scratch(kPatchSlot, std::min(plan.block_rows, end - begin) * plan.k);
  for (int64_t group = 0; group < plan.p.groups; ++group) {
    const uint8_t* plane = padded + group * plane_bytes;
    const int64_t o0 = group * plan.group_out;
    QGemmOutput out = stage;
    if (numbers.bias) out.bias = numbers.bias + o0;
    if (numbers.float_bias) out.float_bias = numbers.float_bias + o0;
    out.scale = numbers.scale + o0;
    out.stride_m = image.stride_position;
    out.stride_n = image.stride_c;
    auto residual_at = [&](int64_t b) {
      return image.residual ? image.residual + o0 * image.stride_c + b * image.stride_position : nullptr;
    };
    if (plan.in_place()) {
      // A's rows in place: each output row's pixels are rows stride_w*C
      // bytes apart in the plane; one call per output row, the output
      // stage built once for them all; rows with kernel rows in the
      // padding leave them out.
      const ARuns runs{plan.runs.offsets.data(), static_cast<int>(plan.runs.offsets.size()), plan.runs.groups};
      const int64_t ow = plan.s.output.w;
      out.out = image.data;  // checked, not used: each row gives its own
      out.residual = residual_at(begin);
      const QGemmRunsCalls rows_of(runs, *packs[group], out, plane, plane_bytes + plan.runs.overread);
      for (int64_t b = begin; b < end;) {
        const int64_t y = b / ow, x = b % ow, count = std::min(end - b, ow - x);
        const uint8_t* a = plane + (y * plan.p.stride.h * plan.padded_w + x * plan.p.stride.w) * cg;
        const int v = plan.row_skip[y];
        const int32_t* sum = v > 0 ? skipped_sums.data() + (v * plan.p.groups + group) * skipped_sums_stride : nullptr;
        rows_of(count, a, plan.p.stride.w * cg,
                image.data + (o0 * image.stride_c + b * image.stride_position) * static_cast<int64_t>(image.element_size),
                residual_at(b), ARunsSkip{plan.skips[v].first, plan.skips[v].last, sum});
        b += count;
      }
      continue;
    }
    for (int64_t b = begin; b < end; b += plan.block_rows) {
      const int64_t e = std::min(end, b + plan.block_rows);
      out.out = image.data + (o0 * image.stride_c + b * image.stride_position) * static_cast<int64_t>(image.element_size);
      out.residual = residual_at(b);
      if (plan.pointwise) {
        qgemm(e - b, plane + b * cg, cg, *packs[group], out);
      } else {
        build_patches(plane, plan, b, e, rows);
        qgemm(e - b, rows, plan.k, *packs[group], out);
      }
    }
  }
}

// Image n of out (N, O, oh, ow), whose oh*ow positions must be evenly
// strided: NCHW planes or channels-last pixels (Note [Channels-last
// quantized activations] in tensor/memory_layout.h). residual: image 0 of a
// residual add's operand laid out as out (uint8), or null.
OutputImage output_image(const Tensor& out, int64_t n, size_t element_size, const uint8_t* residual) {
  const int64_t oh = out.size(2), ow = out.size(3);
  const int64_t stride_position = ow > 1 ? out.stride(3) : oh > 1 ? out.stride(2) : 1;
  KILN_CHECK(oh == 1 || ow == 1 || out.stride(2) == ow * out.stride(3),
             "quantized conv2d: the output's rows must follow one another (NCHW or channels-last), got strides ",
             out.strides(), " for shape ", out.shape());
  char* data = static_cast<char*>(out.data_ptr()) + n * out.stride(0) * static_cast<int64_t>(element_size);
  return OutputImage{data, out.stride(1), stride_position, element_size,
                     residual ? residual + n * out.stride(0) : nullptr};
}

// Runs a convolution of n_images over `threads`: whole images per thread,
// or with fewer images than threads (batch 1) each image's `units` (rows of
// positions, or blocks of them) split instead, over the padded copy the
// calling thread made. pad(n) returns image n padded; run(padded, n, begin,
// end) computes its units [begin, end).
// enter() and leave(), where given, bracket each thread's calls of run (the
// AMX tiles' configuration).
struct NoBracket {
  void operator()() const {}
};
template <class Pad, class Run, class Enter = NoBracket, class Leave = NoBracket>
void spread_over_threads(int64_t n_images, int64_t units, int threads, const Pad& pad, const Run& run,
                         const Enter& enter = {}, const Leave& leave = {}) {
  if (n_images >= threads) {
    parallel_for(0, n_images, std::max<int64_t>(1, n_images / threads), [&](int64_t begin, int64_t end) {
      enter();
      for (int64_t n = begin; n < end; ++n) run(pad(n), n, 0, units);
      leave();
    });
    return;
  }
  for (int64_t n = 0; n < n_images; ++n) {
    const uint8_t* padded = pad(n);
    parallel_for(0, units, std::max<int64_t>(1, units / threads), [&](int64_t begin, int64_t end) {
      enter();
      run(padded, n, begin, end);
      leave();
    });
  }
}

// The GEMM form: x (N, C, H, W) quint8 (any strides); out (N, O, oh, ow)
// as output_image takes it, of uint8 or float as `stage` says. in_place:
// A read from the padded image (the implicit form on the VNNI paths).
void gemm_driver(const Tensor& out, const Tensor& x, const CpuPackedQuantizedWeight& w, const Conv2dParams& p,
                 const Conv2dShape& s, const QuantizedOutputStage& numbers, const QGemmOutput& stage,
                 size_t element_size, bool in_place = false) {
  const int64_t n_images = x.size(0);
  ConvPlan plan(p, s, w.out_channels());
  const CpuPackedQuantizedWeight::Groups& groups = w.groups(plan.p.groups);
  if (in_place) plan.read_in_place(groups.implicit.get());
  // Runs over padded kernel rows read the weight packed in those rows.
  const std::vector<std::shared_ptr<const PackedQWeight>> padded_rows =
      plan.runs.padded_rows ? std::vector{groups.implicit->packed} : std::vector<std::shared_ptr<const PackedQWeight>>{};
  const auto& packs = plan.runs.padded_rows ? padded_rows : groups.gemm;
  const uint8_t* x_data = x.data<uint8_t>();
  const uint8_t zero_point = static_cast<uint8_t>(stage.a_zero_point);
  const double macs_per_image = double(plan.positions) * double(w.out_channels()) * double(plan.k);
  auto pad_image = [&](int64_t n) {
    uint8_t* padded = thread_scratch(kImageSlot, plan.image_bytes + plan.runs.overread);
    pad_channels_last(x_data + n * x.stride(0), x.stride(1), x.stride(2), x.stride(3), plan, zero_point, padded);
    // The bytes the last runs read past the plane meet zero weights; they
    // are set only so that every call reads the same bytes.
    std::memset(padded + plan.image_bytes, zero_point, static_cast<size_t>(plan.runs.overread));
    return padded;
  };

  // Note [Kernel rows in the padding]: what each set of skipped kernel
  // rows adds to a sum, z times their weights' sum, in the wrapping int32
  // of the GEMM's offsets.
  const int64_t kh = plan.s.kernel.h, go = plan.group_out, groups_n = plan.p.groups;
  const int64_t sums_stride = (go + kQGemmMaxLanes - 1) / kQGemmMaxLanes * kQGemmMaxLanes;
  std::vector<int32_t> skipped_sums(plan.skips.size() * groups_n * sums_stride, 0);
  const int64_t runs_per_row = static_cast<int64_t>(plan.runs.offsets.size()) / kh;
  for (size_t v = 1; v < plan.skips.size(); ++v) {
    const int64_t top = plan.skips[v].first / runs_per_row, bottom = kh - plan.skips[v].last / runs_per_row;
    for (int64_t g = 0; g < groups_n; ++g) {
      int32_t* sum = skipped_sums.data() + (static_cast<int64_t>(v) * groups_n + g) * sums_stride;
      for (int64_t ky = 0; ky < kh; ++ky) {
        if (ky >= top && ky < bottom) continue;
        const int32_t* row_sum = groups.kernel_row_sum.data() + (g * kh + ky) * go;
        for (int64_t o = 0; o < go; ++o)
          sum[o] = static_cast<int32_t>(static_cast<uint32_t>(sum[o]) +
                                        static_cast<uint32_t>(stage.a_zero_point) * static_cast<uint32_t>(row_sum[o]));
      }
    }
  }
  auto run = [&](const uint8_t* padded, int64_t n, int64_t begin, int64_t end) {
    conv_rows(padded, plan, packs, numbers, skipped_sums, sums_stride, stage,
              output_image(out, n, element_size, stage.residual), begin, end);
  };
  spread_over_threads(n_images, plan.positions,
                      threads_for_macs(macs_per_image * double(n_images), n_images * plan.positions), pad_image, run);
}

// image (C, H, W), any strides -> padded NCHW planes (C, padded_h, padded_w),
// the border at the input's zero point.
void pad_planes(const uint8_t* image, int64_t stride_c, int64_t stride_h, int64_t stride_w, const DirectQConvPlan& plan,
                int64_t channels, uint8_t zero_point, uint8_t* padded) {
  const Conv2dParams& p = plan.p;
  const Conv2dShape& s = plan.s;
  if (p.padding.h > 0 || p.padding.w > 0)
    std::memset(padded, zero_point, static_cast<size_t>(channels * plan.padded_h * plan.padded_w));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t y = 0; y < s.input.h; ++y) {
      const uint8_t* src = image + c * stride_c + y * stride_h;
      uint8_t* dst = padded + (c * plan.padded_h + y + p.padding.h) * plan.padded_w + p.padding.w;
      if (stride_w == 1) {
        std::memcpy(dst, src, static_cast<size_t>(s.input.w));
      } else {
        for (int64_t x = 0; x < s.input.w; ++x) dst[x] = src[x * stride_w];
      }
    }
  }
}

// A form's plan (its tables for one call) depends only on the weight's
// shape, the params and the input size, which a model repeats at every call
// of a layer: the calling thread keeps the plans of the last kPlans keys it
// met, per kind of plan. make() builds a plan for a key not kept.
template <class Plan, size_t N, class Make>
const Plan& cached_plan(const std::array<int64_t, N>& key, const Make& make) {
  struct Entry {
    std::array<int64_t, N> key;
    std::shared_ptr<const Plan> plan;
  };
  constexpr size_t kPlans = 8;
  thread_local std::vector<Entry> entries;
  thread_local size_t next = 0;
  for (const Entry& e : entries)
    if (e.key == key) return *e.plan;
  auto plan = std::make_shared<const Plan>(make());
  if (entries.size() < kPlans) {
    entries.push_back({key, std::move(plan)});
    return *entries.back().plan;
  }
  entries[next] = {key, std::move(plan)};
  const Plan& found = *entries[next].plan;
  next = (next + 1) % kPlans;
  return found;
}

// The numbers a conv call's plan depends on, besides the weight's shape.
std::array<int64_t, 13> call_key(const Conv2dParams& p, const Conv2dShape& s) {
  return {p.stride.h,  p.stride.w,  p.padding.h, p.padding.w, p.dilation.h, p.dilation.w, p.groups,
          s.channels,  s.input.h,   s.input.w,   s.kernel.h * s.kernel.w,   s.output.h,   s.output.w};
}

template <size_t A, size_t B>
std::array<int64_t, A + B> join_keys(const std::array<int64_t, A>& a, const std::array<int64_t, B>& b) {
  std::array<int64_t, A + B> key;
  std::copy(a.begin(), a.end(), key.begin());
  std::copy(b.begin(), b.end(), key.begin() + A);
  return key;
}

const DirectQConvPlan& cached_direct_plan(const DirectQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  const std::array<int64_t, 5> shape = {w.groups, w.group_out, w.channels, w.kh, w.kw};
  return cached_plan<DirectQConvPlan>(join_keys(shape, call_key(p, s)), [&] { return plan_direct_qconv(w, p, s); });
}

const ImplicitQConvPlan& cached_implicit_plan(const ImplicitQConvWeight& w, const Conv2dParams& p,
                                              const Conv2dShape& s) {
  const std::array<int64_t, 5> shape = {w.out_channels, w.channels, w.kh, w.kw, w.row_bytes};
  return cached_plan<ImplicitQConvPlan>(join_keys(shape, call_key(p, s)), [&] { return plan_implicit_qconv(w, p, s); });
}

// The direct form (Note [Direct int8 convolution with positions in the
// lanes] in quantized_conv_direct.h), with gemm_driver's arguments.
void direct_driver(const Tensor& out, const Tensor& x, const CpuPackedQuantizedWeight& w, const Conv2dParams& p,
                   const Conv2dShape& s, const QuantizedOutputStage& numbers, const QGemmOutput& stage,
                   size_t element_size) {
  KILN_CHECK(stage.residual == nullptr, "quantized conv2d: the direct form writes NCHW planes and takes no residual add");
  const DirectQConvWeight& dw = *w.groups(p.groups).direct;
  const DirectQConvPlan& plan = cached_direct_plan(dw, p, s);
  const int64_t n_images = x.size(0), channels = x.size(1);
  const int64_t blocks = static_cast<int64_t>(plan.blocks.size());
  const int64_t image_bytes = p.groups * plan.group_bytes;
  // The output stage of every channel at once; each group's is a view of it.
  QGemmOutput all = stage;
  all.bias = numbers.bias;
  all.float_bias = numbers.float_bias;
  all.scale = numbers.scale;
  const qgemm_detail::Epilogue e = qgemm_detail::make_epilogue(all, dw.colsum.data(), w.out_channels(), w.out_channels());
  const uint8_t* x_data = x.data<uint8_t>();
  const uint8_t zero_point = static_cast<uint8_t>(stage.a_zero_point);
  auto pad_image = [&](int64_t n) {
    uint8_t* padded = thread_scratch(kImageSlot, image_bytes + kDirectQConvSlack);
    pad_planes(x_data + n * x.stride(0), x.stride(1), x.stride(2), x.stride(3), plan, channels, zero_point, padded);
    return padded;
  };
  auto run = [&](const uint8_t* padded, int64_t n, int64_t b0, int64_t b1) {
    const OutputImage image = output_image(out, n, element_size, nullptr);
    // The kernel stores 16 adjacent positions of one channel at a time.
    KILN_CHECK(image.stride_position == 1, "quantized conv2d: the direct form writes NCHW planes, got an output "
               "with strides ", out.strides());
    for (int64_t g = 0; g < p.groups; ++g) {
      const int64_t o0 = g * dw.group_out;
      qgemm_detail::Epilogue eg = e;
      eg.n = dw.group_out;
      eg.offset = e.offset + o0;
      eg.scale = e.scale ? e.scale + o0 : nullptr;
      eg.float_bias = e.float_bias ? e.float_bias + o0 : nullptr;
      eg.out = image.data + o0 * image.stride_c * static_cast<int64_t>(element_size);
      eg.stride_m = 1;
      eg.stride_n = image.stride_c;
      if (w.path() == QGemmPath::Amx) qconv_direct_amx(plan, dw, g, padded + g * plan.group_bytes, b0, b1, eg);
      else qconv_direct_avx512vbmi(plan, dw, g, padded + g * plan.group_bytes, b0, b1, eg);
    }
  };

  const double macs_per_image =
      double(s.output.h * s.output.w) * double(w.out_channels()) * double(dw.channels * dw.kh * dw.kw);
  spread_over_threads(n_images, blocks, threads_for_macs(macs_per_image * double(n_images), n_images * blocks),
                      pad_image, run);
}

// The implicit form on the Amx path (Note [Implicit int8 convolution on AMX
// tiles] in quantized_conv_implicit.h), with gemm_driver's arguments: the padded
// channels-last image is itself the GEMM's A operand.
void implicit_driver(const Tensor& out, const Tensor& x, const CpuPackedQuantizedWeight& w, const Conv2dParams& p,
                     const Conv2dShape& s, const QuantizedOutputStage& numbers, const QGemmOutput& stage,
                     size_t element_size) {
  const ImplicitQConvWeight& iw = *w.groups(1).implicit;
  // With stacked kernel rows the tiles run a 1 x kw convolution over the
  // stacked image (Note [Stacked kernel rows]).
  const bool stacked = iw.stacked_kh > 0;
  const StackedQConvCall call = stacked ? stacked_qconv_call(iw, p, s) : StackedQConvCall{p, s};
  const ImplicitQConvPlan& plan = cached_implicit_plan(iw, call.p, call.s);
  const ConvPlan pad_plan(call.p, call.s, w.out_channels());
  const int64_t n_images = x.size(0);
  QGemmOutput all = stage;
  all.bias = numbers.bias;
  all.float_bias = numbers.float_bias;
  all.scale = numbers.scale;
  const auto& panels = static_cast<const qgemm_detail::PackedPanels&>(*iw.packed);
  const qgemm_detail::Epilogue e = qgemm_detail::make_epilogue(all, iw.packed->colsum().data(), w.out_channels(),
                                                               panels.panels() * panels.lanes());
  const uint8_t* x_data = x.data<uint8_t>();
  const uint8_t zero_point = static_cast<uint8_t>(stage.a_zero_point);
  auto pad_image = [&](int64_t n) {
    uint8_t* padded = thread_scratch(kImageSlot, plan.image_bytes);
    // The tail room the last blocks' tile loads read: what is there meets
    // zero weights or is never stored, and is set only so that every run
    // reads the same bytes.
    std::memset(padded + pad_plan.image_bytes, zero_point, static_cast<size_t>(plan.image_bytes - pad_plan.image_bytes));
    const uint8_t* image = x_data + n * x.stride(0);
    if (stacked) stack_kernel_rows(image, x.stride(1), x.stride(2), x.stride(3), p, s, zero_point, padded);
    else pad_channels_last(image, x.stride(1), x.stride(2), x.stride(3), pad_plan, zero_point, padded);
    return padded;
  };
  auto run = [&](const uint8_t* padded, int64_t n, int64_t b0, int64_t b1) {
    const OutputImage image = output_image(out, n, element_size, stage.residual);
    qgemm_detail::Epilogue en = e;
    en.out = image.data;
    en.residual = image.residual;
    en.stride_m = image.stride_position;
    en.stride_n = image.stride_c;
    qgemm_detail::qconv_implicit_amx(plan, iw, padded, b0, b1, en);
  };

  const double macs_per_image = double(pad_plan.positions) * double(w.out_channels()) * double(pad_plan.k);
  const int64_t blocks = static_cast<int64_t>(plan.blocks.size());
  spread_over_threads(n_images, blocks, threads_for_macs(macs_per_image * double(n_images), n_images * blocks),
                      pad_image, run, qgemm_detail::begin_implicit_amx,
                      qgemm_detail::end_implicit_amx);
}

// The three forms a call can run.
enum class Form { Gemm, Direct, Implicit };

// Whether the implicit form runs this call: its tiles on the Amx path, its
// runs on the VNNI paths (the two Notes in quantized_conv_implicit.h).
bool implicit_form_pays(const CpuPackedQuantizedWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  if (w.path() == QGemmPath::Amx) return implicit_qconv_pays(p.groups == 1 ? w.groups(1).implicit.get() : nullptr, p);
  return implicit_runs_pay(w.path(), p.groups == 1 ? w.groups(1).implicit.get() : nullptr, p, s);
}

// The form this call runs (qconv_algorithm): the direct form where it pays,
// else the implicit form where it pays and its tiles' blocks are not half
// empty (implicit_blocks_half_empty), else the GEMM over patch rows.
Form conv_form(const CpuPackedQuantizedWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  switch (qconv_algorithm()) {
    case QConvAlgorithm::Auto:
      if (direct_qconv_pays(w.path(), p, s, w.out_channels() / p.groups)) return Form::Direct;
      if (!implicit_form_pays(w, p, s)) return Form::Gemm;
      if (w.path() == QGemmPath::Amx && implicit_blocks_half_empty(p, s)) return Form::Gemm;
      return Form::Implicit;
    case QConvAlgorithm::Gemm: return Form::Gemm;
    case QConvAlgorithm::Direct:
      KILN_CHECK(direct_qconv_supported(w.path(), p, s), "quantized conv2d: the direct form was forced but the ",
                 qgemm_path_name(w.path()), " path cannot run it here (it needs AVX-512 VNNI and VBMI, and a stride ",
                 p.stride.w, " with dilation ", p.dilation.w, " whose windows fit 64 bytes)");
      return Form::Direct;
    case QConvAlgorithm::Implicit:
      KILN_CHECK(implicit_form_pays(w, p, s), "quantized conv2d: the implicit form was forced but cannot run ",
                 "here (got the ", qgemm_path_name(w.path()), " path, ", p.groups, " groups, dilation_w ", p.dilation.w,
                 " and kernel rows of ", s.kernel.w, " x ", s.channels, " bytes; it needs the amx path with one ",
                 "group, dilation_w 1 and a 1x1 kernel or rows (or, at kh*C <= 16, kh rows stacked) whose 64-byte ",
                 "padding at most triples them, or the avxvnni or ",
                 "avx512vnni path and no plain 1x1, with one group and dilation_w 1 or with rows (taps, for ",
                 "dilation_w > 1) of a multiple of 4 bytes)");
      return Form::Implicit;
  }
  return Form::Gemm;
}

void conv_driver(const Tensor& out, const Tensor& x, const CpuPackedQuantizedWeight& w, const Conv2dParams& p,
                 const Conv2dShape& s, const QuantizedOutputStage& numbers, const QGemmOutput& stage,
                 size_t element_size) {
  switch (conv_form(w, p, s)) {
    case Form::Direct: return direct_driver(out, x, w, p, s, numbers, stage, element_size);
    case Form::Implicit:
      // On the VNNI paths, the GEMM form with its rows read in place (the
      // second Note in quantized_conv_implicit.h).
      if (w.path() != QGemmPath::Amx) return gemm_driver(out, x, w, p, s, numbers, stage, element_size, true);
      return implicit_driver(out, x, w, p, s, numbers, stage, element_size);
    case Form::Gemm: return gemm_driver(out, x, w, p, s, numbers, stage, element_size);
  }
}

}  // namespace

bool CpuQuantizedKernels::conv2d_channels_last(const PackedQuantizedWeight& w, const Conv2dParams& p,
                                               const Conv2dShape& s) {
  // The GEMM and implicit forms write a pixel's channels together; the
  // direct form a channel's positions.
  return conv_form(cpu_packed_weight(w, "quantized conv2d"), p, s) != Form::Direct;
}

namespace {

// The static conv's uint8 stage for input zero point zx onto output zero
// point zy.
QGemmOutput static_stage(int32_t zx, int32_t zy, bool relu) {
  QGemmOutput stage;
  stage.kind = QGemmOutput::Kind::UInt8;
  stage.a_zero_point = zx;
  stage.scale_per_channel = true;
  stage.zero_point = zy;
  stage.lo = relu ? std::max(0, zy) : 0;  // the real 0 is the zero point
  stage.hi = 255;
  return stage;
}

}  // namespace

void CpuQuantizedKernels::conv2d(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                                 const Conv2dParams& p, const Conv2dShape& s, bool relu) {
  const CpuPackedQuantizedWeight& packed = cpu_packed_weight(w, "quantized conv2d");
  const PerTensorParams in = per_tensor(x), to = per_tensor(out);
  const QuantizedOutputStage numbers = static_output_stage(packed, bias, in.scale, to.scale);
  conv_driver(out, x, packed, p, s, numbers, static_stage(in.zero_point, to.zero_point, relu), sizeof(uint8_t));
}

void CpuQuantizedKernels::conv2d_add(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w,
                                     const Tensor& bias, const Conv2dParams& p, const Conv2dShape& s,
                                     const QuantizedConvGrid& conv, const Tensor& residual, bool relu) {
  const CpuPackedQuantizedWeight& packed = cpu_packed_weight(w, "quantized conv2d_add");
  KILN_CHECK(conv_form(packed, p, s) != Form::Direct, "quantized conv2d_add: this conv runs the direct form, ",
             "which writes NCHW planes and takes no residual; run the conv and the add apart");
  KILN_CHECK(residual.dtype() == DType::UInt8 && residual.shape() == out.shape() && residual.strides() == out.strides(),
             "quantized conv2d_add: the residual must be quint8 laid out as the output, got ", residual.dtype(), " ",
             residual.shape(), " strides ", residual.strides(), " for an output ", out.shape(), " strides ",
             out.strides());
  const PerTensorParams in = per_tensor(x), other = per_tensor(residual), to = per_tensor(out);
  // The conv's own output grid: its uint8 values are the unfused conv's.
  const float conv_scale = quant_math::scale_as_float(conv.scale);
  const auto conv_zero_point = static_cast<int32_t>(conv.zero_point);
  const QuantizedOutputStage numbers = static_output_stage(packed, bias, in.scale, conv_scale);
  QGemmOutput stage = static_stage(in.zero_point, conv_zero_point, conv.relu);
  // The add's grids, as CpuQuantizedKernels::add builds them.
  stage.residual = residual.data<uint8_t>();
  stage.residual_add = QuantizedAddGrids{conv_zero_point,
                                         conv_scale,
                                         other.zero_point,
                                         other.scale,
                                         quant_math::inverse_scale(to.scale),
                                         static_cast<float>(to.zero_point),
                                         static_cast<float>(relu ? std::max(0, to.zero_point) : 0),
                                         255.0f};
  conv_driver(out, x, packed, p, s, numbers, stage, sizeof(uint8_t));
}

void CpuQuantizedKernels::conv2d_dynamic(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w,
                                         const Tensor& bias, const Conv2dParams& p, const Conv2dShape& s,
                                         bool reduce_range) {
  const CpuPackedQuantizedWeight& packed = cpu_packed_weight(w, "quantized conv2d_dynamic");
  const Tensor xq = quantize_dynamic_input(x, reduce_range);  // (N, C, H, W) quint8
  const PerTensorParams in = per_tensor(xq);
  const QuantizedOutputStage numbers = dynamic_output_stage(packed, bias, in.scale);
  QGemmOutput stage;
  stage.kind = QGemmOutput::Kind::Float;
  stage.a_zero_point = in.zero_point;
  stage.scale_per_channel = true;
  conv_driver(out, xq, packed, p, s, numbers, stage, sizeof(float));
}

}  // namespace kiln::cpu
