#include "data/transforms.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "tensor/error.h"

namespace kiln::data::transforms {
namespace {

// The shape of the input as (N, C, H, W), N = 1 for a single image, plus the
// input made contiguous so the loops below can walk raw buffers.
struct ImageView {
  Tensor x;
  int64_t n, c, h, w;
};

ImageView image_view(const Tensor& x, const char* op) {
  KILN_CHECK(x.defined(), op, ": got an undefined tensor");
  KILN_CHECK(x.device() == kCPU, op, ": transforms run on CPU tensors, got one on ", x.device());
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected an image (C, H, W) or a batch (N, C, H, W), got shape ",
             x.shape());
  bool batch = x.dim() == 4;
  return {x.contiguous(), batch ? x.size(0) : 1, x.size(-3), x.size(-2), x.size(-1)};
}

// One Philox block for the next sample (Note [Transform randomness]).
std::array<uint32_t, 4> draw_block(Generator& gen) { return Philox4x32::block(gen.advance(1), 0, gen.seed()); }

// Uniform integer in [0, range) from 32 random bits (multiply-shift, which
// unlike `w % range` needs no division).
int64_t uniform_int(uint32_t w, int64_t range) {
  return static_cast<int64_t>((static_cast<uint64_t>(w) * static_cast<uint64_t>(range)) >> 32);
}

// Uniform in [0, 1) with 24 bits, as the tensor layer's float32 uniform.
double uniform01(uint32_t w) { return static_cast<double>(w >> 8) * (1.0 / 16777216.0); }

}  // namespace

uint64_t sample_seed(uint64_t seed, uint64_t epoch, uint64_t index) {
  // SplitMix64's finaliser over a combination that differs for every
  // (epoch, index) pair below 2^32 samples per epoch.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (((epoch << 32) ^ index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Tensor ToTensor::apply(const Tensor& x, Generator&) const {
  ImageView v = image_view(x, "ToTensor");
  KILN_CHECK(v.x.dtype() == DType::UInt8, "ToTensor: expected a uint8 image, got ", v.x.dtype());
  // A table of v / 255 in float32 gives torchvision's x.float().div(255)
  // bit for bit without a division per element.
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = static_cast<float>(i) / 255.0f;
    return t;
  }();
  Tensor out = Tensor::empty(v.x.shape(), DType::Float32);
  const uint8_t* src = v.x.data<uint8_t>();
  float* dst = out.data<float>();
  for (int64_t i = 0, n = v.x.numel(); i < n; ++i) dst[i] = table[src[i]];
  return out;
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  KILN_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize: mean and std need one value per channel, got ",
             mean_.size(), " means and ", std_.size(), " stds");
  for (size_t c = 0; c < std_.size(); ++c)
    KILN_CHECK(std_[c] != 0.0, "Normalize: std of channel ", c, " is 0 (std = ", std_, ")");
}

Tensor Normalize::apply(const Tensor& x, Generator&) const {
  ImageView v = image_view(x, "Normalize");
  KILN_CHECK(v.x.dtype() == DType::Float32, "Normalize: expected a float32 image (apply ToTensor first), got ",
             v.x.dtype());
  KILN_CHECK(v.c == static_cast<int64_t>(mean_.size()), "Normalize: the image has ", v.c, " channels (shape ",
             x.shape(), ") but mean and std have ", mean_.size());
  Tensor out = Tensor::empty(v.x.shape(), DType::Float32);
  // x, out: (N, C, H*W). Float32 arithmetic with float32 mean and std, as
  // torchvision's tensor.sub_(mean).div_(std).
  const float* src = v.x.data<float>();
  float* dst = out.data<float>();
  const int64_t plane = v.h * v.w;
  for (int64_t s = 0; s < v.n; ++s)
    for (int64_t c = 0; c < v.c; ++c) {
      const float mean = static_cast<float>(mean_[c]), std = static_cast<float>(std_[c]);
      const int64_t base = (s * v.c + c) * plane;
      for (int64_t i = 0; i < plane; ++i) dst[base + i] = (src[base + i] - mean) / std;
    }
  return out;
}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  KILN_CHECK(height > 0 && width > 0, "RandomCrop: size must be positive, got (", height, ", ", width, ")");
  KILN_CHECK(padding >= 0, "RandomCrop: padding must be >= 0, got ", padding);
}

namespace {

// Copies the (height, width) window at (top, left) of the zero-padded image.
// src: (C, H, W), dst: (C, height, width), both contiguous, `es` bytes an element.
void crop_sample(const uint8_t* src, uint8_t* dst, int64_t c, int64_t h, int64_t w, int64_t height, int64_t width,
                 int64_t padding, int64_t top, int64_t left, size_t es) {
  // Output columns [x0, x1) come from the image; the rest are padding.
  const int64_t x0 = std::clamp<int64_t>(padding - left, 0, width);
  const int64_t x1 = std::clamp<int64_t>(w + padding - left, x0, width);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < height; ++y) {
      uint8_t* out_row = dst + ((k * height + y) * width) * es;
      const int64_t sy = top + y - padding;
      if (sy < 0 || sy >= h) {
        std::memset(out_row, 0, static_cast<size_t>(width) * es);
        continue;
      }
      const uint8_t* in_row = src + ((k * h + sy) * w + (left + x0 - padding)) * es;
      std::memset(out_row, 0, static_cast<size_t>(x0) * es);
      std::memcpy(out_row + x0 * es, in_row, static_cast<size_t>(x1 - x0) * es);
      std::memset(out_row + x1 * es, 0, static_cast<size_t>(width - x1) * es);
    }
}

}  // namespace

Tensor RandomCrop::crop_at(const Tensor& x, int64_t top, int64_t left) const {
  ImageView v = image_view(x, "RandomCrop");
  KILN_CHECK(x.dim() == 3, "RandomCrop::crop_at: expected one image (C, H, W), got shape ", x.shape());
  const int64_t max_top = v.h + 2 * padding_ - height_, max_left = v.w + 2 * padding_ - width_;
  KILN_CHECK(max_top >= 0 && max_left >= 0, "RandomCrop: crop size (", height_, ", ", width_,
             ") is larger than the padded image (", v.h + 2 * padding_, ", ", v.w + 2 * padding_, ") of shape ",
             x.shape(), " with padding ", padding_);
  KILN_CHECK(top >= 0 && top <= max_top && left >= 0 && left <= max_left, "RandomCrop::crop_at: offset (", top, ", ",
             left, ") outside [0, ", max_top, "] x [0, ", max_left, "]");
  Tensor out = Tensor::empty({v.c, height_, width_}, v.x.dtype());
  crop_sample(static_cast<const uint8_t*>(v.x.data_ptr()), static_cast<uint8_t*>(out.data_ptr()), v.c, v.h, v.w,
              height_, width_, padding_, top, left, v.x.element_size());
  return out;
}

Tensor RandomCrop::apply(const Tensor& x, Generator& gen) const {
  ImageView v = image_view(x, "RandomCrop");
  const int64_t max_top = v.h + 2 * padding_ - height_, max_left = v.w + 2 * padding_ - width_;
  KILN_CHECK(max_top >= 0 && max_left >= 0, "RandomCrop: crop size (", height_, ", ", width_,
             ") is larger than the padded image (", v.h + 2 * padding_, ", ", v.w + 2 * padding_, ") of shape ",
             x.shape(), " with padding ", padding_);
  Shape out_shape = x.dim() == 4 ? Shape{v.n, v.c, height_, width_} : Shape{v.c, height_, width_};
  Tensor out = Tensor::empty(out_shape, v.x.dtype());
  const size_t es = v.x.element_size();
  const uint8_t* src = static_cast<const uint8_t*>(v.x.data_ptr());
  uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t s = 0; s < v.n; ++s) {
    auto block = draw_block(gen);
    const int64_t top = uniform_int(block[0], max_top + 1), left = uniform_int(block[1], max_left + 1);
    crop_sample(src + s * v.c * v.h * v.w * es, dst + s * v.c * height_ * width_ * es, v.c, v.h, v.w, height_,
                width_, padding_, top, left, es);
  }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::apply(const Tensor& x, Generator& gen) const {
  ImageView v = image_view(x, "RandomHorizontalFlip");
  Tensor out = Tensor::empty(v.x.shape(), v.x.dtype());
  const size_t es = v.x.element_size();
  const int64_t sample_bytes = v.c * v.h * v.w * static_cast<int64_t>(es);
  const uint8_t* src = static_cast<const uint8_t*>(v.x.data_ptr());
  uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t s = 0; s < v.n; ++s) {
    const uint8_t* in = src + s * sample_bytes;
    uint8_t* o = dst + s * sample_bytes;
    if (uniform01(draw_block(gen)[0]) >= p_) {
      std::memcpy(o, in, static_cast<size_t>(sample_bytes));
      continue;
    }
    // rows: (C*H, W); element x of a row goes to W-1-x.
    for (int64_t r = 0; r < v.c * v.h; ++r) {
      const uint8_t* in_row = in + r * v.w * es;
      uint8_t* out_row = o + r * v.w * es;
      if (es == 1) {
        for (int64_t i = 0; i < v.w; ++i) out_row[i] = in_row[v.w - 1 - i];
      } else {
        for (int64_t i = 0; i < v.w; ++i) std::memcpy(out_row + i * es, in_row + (v.w - 1 - i) * es, es);
      }
    }
  }
  return out;
}

Compose::Compose(std::vector<std::shared_ptr<Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    KILN_CHECK(transforms_[i] != nullptr, "Compose: transform ", i, " is null");
}

Tensor Compose::apply(const Tensor& x, Generator& gen) const {
  Tensor y = x;
  for (const auto& t : transforms_) y = t->apply(y, gen);
  return y;
}

std::string Compose::name() const {
  std::string s = "Compose(";
  for (size_t i = 0; i < transforms_.size(); ++i) s += (i ? ", " : "") + transforms_[i]->name();
  return s + ")";
}

}  // namespace kiln::data::transforms
