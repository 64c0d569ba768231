// The direct int8 convolution's tables (Note [Direct int8 convolution with
// positions in the lanes] in quantized_conv_direct.h): the taps cut into
// quads and their weights, packed once per weight; the windows, permute
// indices and blocks of one call. The kernel is in
// quantized_conv_direct_avx512vbmi.cpp.
#include "tensor/cpu/quantized_conv_direct.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tensor/cpu/cpu_features.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

namespace kiln::cpu {

namespace {

// The taps (c, ky, kx) in the weight's order, cut into quads of at most two
// runs of one (c, ky) row each.
std::vector<DirectQConvWeight::Quad> cut_quads(int64_t channels, int64_t kh, int64_t kw) {
  using Quad = DirectQConvWeight::Quad;
  std::vector<Quad> quads;
  Quad quad;
  int runs = 0;
  int64_t row = -1;  // the (c, ky) row of the quad's last tap
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t ky = 0; ky < kh; ++ky) {
      for (int64_t kx = 0; kx < kw; ++kx) {
        const int64_t this_row = c * kh + ky;
        const bool new_run = quad.count == 0 || this_row != row;
        if (new_run && runs == 2) {  // a third window: close the quad with zero weights
          quads.push_back(quad);
          quad = Quad{};
          runs = 0;
        }
        if (new_run) ++runs;
        quad.taps[quad.count++] = {static_cast<int16_t>(c), static_cast<int16_t>(ky), static_cast<int16_t>(kx),
                                   static_cast<int8_t>(runs - 1)};
        row = this_row;
        if (quad.count == 4) {
          quads.push_back(quad);
          quad = Quad{};
          runs = 0;
        }
      }
    }
  }
  if (quad.count > 0) quads.push_back(quad);
  return quads;
}

// The widest window a run of up to 4 taps needs for 16 lanes, in bytes.
int64_t window_span(const Conv2dParams& p) { return 3 * p.dilation.w + 15 * p.stride.w + 1; }

}  // namespace

std::shared_ptr<const DirectQConvWeight> pack_direct_qconv(const Tensor& weight, int64_t groups) {
  KILN_CHECK(weight.dim() == 4 && weight.dtype() == DType::Int8, "pack_direct_qconv: expected a 4-d qint8 weight, got ",
             weight.dim(), "-d ", dtype_name(weight.dtype()));
  const Tensor w = weight.contiguous();
  auto packed = std::make_shared<DirectQConvWeight>();
  DirectQConvWeight& d = *packed;
  const int64_t out = w.size(0);
  d.groups = groups;
  d.group_out = out / groups;
  d.channels = w.size(1), d.kh = w.size(2), d.kw = w.size(3);
  d.quads = cut_quads(d.channels, d.kh, d.kw);
  const int64_t nq = static_cast<int64_t>(d.quads.size());
  const int64_t taps = d.channels * d.kh * d.kw;
  const int8_t* data = w.data<int8_t>();  // (O, C/groups, kh, kw)
  d.weight.assign(static_cast<size_t>(groups * nq * d.group_out), 0);
  d.colsum.assign(static_cast<size_t>(out), 0);
  for (int64_t o = 0; o < out; ++o) {
    const int8_t* wo = data + o * taps;
    for (int64_t t = 0; t < taps; ++t) d.colsum[o] += wo[t];
    const int64_t g = o / d.group_out, og = o % d.group_out;
    for (int64_t q = 0; q < nq; ++q) {
      const DirectQConvWeight::Quad& quad = d.quads[q];
      uint8_t bytes[4] = {0, 0, 0, 0};
      for (int e = 0; e < quad.count; ++e) {
        const DirectQConvWeight::Tap& t = quad.taps[e];
        bytes[e] = static_cast<uint8_t>(wo[(t.c * d.kh + t.ky) * d.kw + t.kx]);
      }
      std::memcpy(&d.weight[(g * nq + q) * d.group_out + og], bytes, 4);
    }
  }
  // The A tiles of the Amx kernel: weight (g, q, og) at tile og / 16, k block
  // q / 16, row og % 16, column q % 16.
  const int64_t tiles = (d.group_out + 15) / 16, kblocks = (nq + 15) / 16;
  d.amx_weight.assign(static_cast<size_t>(groups * tiles * kblocks * 256), 0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t q = 0; q < nq; ++q)
      for (int64_t og = 0; og < d.group_out; ++og) {
        const int64_t tile = (g * tiles + og / 16) * kblocks + q / 16;
        d.amx_weight[static_cast<size_t>(tile * 256 + (og % 16) * 16 + q % 16)] = d.weight[(g * nq + q) * d.group_out + og];
      }
  return packed;
}

bool direct_qconv_available(QGemmPath path) {
  return (path == QGemmPath::Avx512Vnni || path == QGemmPath::Amx) && int8_features().avx512vbmi;
}

bool direct_qconv_supported(QGemmPath path, const Conv2dParams& p, const Conv2dShape& s) {
  return direct_qconv_available(path) && window_span(p) <= 64 && s.output.h > 0 && s.output.w > 0;
}

bool direct_qconv_pays(QGemmPath path, const Conv2dParams& p, const Conv2dShape& s, int64_t group_out) {
  return group_out < 16 && direct_qconv_supported(path, p, s);
}

namespace {
std::atomic<QConvAlgorithm> forced_algorithm{QConvAlgorithm::Auto};
}

QConvAlgorithm qconv_algorithm() { return forced_algorithm.load(std::memory_order_relaxed); }

ForceQConvAlgorithm::ForceQConvAlgorithm(QConvAlgorithm algorithm) : saved_(forced_algorithm.exchange(algorithm)) {}
ForceQConvAlgorithm::~ForceQConvAlgorithm() { forced_algorithm.store(saved_); }

DirectQConvPlan plan_direct_qconv(const DirectQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  DirectQConvPlan plan(p, s);
  plan.padded_h = s.input.h + 2 * p.padding.h;
  plan.padded_w = s.input.w + 2 * p.padding.w;
  const int64_t plane = plan.padded_h * plan.padded_w;
  plan.group_bytes = w.channels * plane;
  auto offset = [&](const DirectQConvWeight::Tap& t) {
    return t.c * plane + t.ky * p.dilation.h * plan.padded_w + t.kx * p.dilation.w;
  };
  plan.quads.resize(w.quads.size());
  for (size_t q = 0; q < w.quads.size(); ++q) {
    const DirectQConvWeight::Quad& quad = w.quads[q];
    DirectQConvQuadCall& call = plan.quads[q];
    // Each run's window starts at its first tap (the second run's, when
    // there is none, at the first's).
    call.window[0] = offset(quad.taps[0]);
    call.window[1] = call.window[0];
    for (int e = 0; e < quad.count; ++e) {
      if (quad.taps[e].run == 1) {
        call.window[1] = offset(quad.taps[e]);
        break;
      }
    }
    for (int j = 0; j < 16; ++j) {
      for (int e = 0; e < 4; ++e) {
        int64_t at = 0;  // an unused slot reads any byte: its weight is 0
        if (e < quad.count) {
          const DirectQConvWeight::Tap& t = quad.taps[e];
          at = offset(t) - call.window[t.run] + j * p.stride.w;
          KILN_CHECK(at >= 0 && at < 64, "direct int8 conv: tap (", t.c, ", ", t.ky, ", ", t.kx,
                     ") is outside its 64-byte window (stride ", p.stride.w, ", dilation ", p.dilation.w, ")");
          at += t.run * 64;
        }
        call.index[4 * j + e] = static_cast<uint8_t>(at);
      }
    }
  }
  for (int64_t oy = 0; oy < s.output.h; ++oy) {
    for (int64_t ox = 0; ox < s.output.w; ox += 16) {
      plan.blocks.push_back({oy * p.stride.h * plan.padded_w + ox * p.stride.w, oy * s.output.w + ox,
                             static_cast<int>(std::min<int64_t>(16, s.output.w - ox))});
    }
  }
  return plan;
}

}  // namespace kiln::cpu
