// The padding argument of Conv1d and Conv2d and of F::conv1d and F::conv2d,
// as torch's: a number (or a pair for Conv2d) of zeros on each side, or
// kiln::kValid (no padding) or kiln::kSame (the output as long as the input;
// stride 1 only).
//
//   nn::Conv2d conv(nn::Conv2dOptions(3, 8, 3).padding(kiln::kSame));   // (N, 3, H, W) -> (N, 8, H, W)
//   nn::Conv1d conv1(nn::Conv1dOptions(4, 4, 4).padding(kiln::kSame).padding_mode(kiln::kReflect));
//   Tensor y = F::conv2d(x, w, F::Conv2dFuncOptions().padding(kiln::kValid));
//
// Note [Same padding]
// torch's padding='same' pads each dim by dilation * (kernel - 1) in all,
// total / 2 before and the rest after, so with an even total (an even kernel
// at odd dilation) the after side (right, bottom) gets one more. A
// convolution pads both sides alike, so the extra element cannot be one of
// its settings: torch's _convolution_same pads the input explicitly by the
// difference and lets the convolution pad the before amount, and Kiln does
// the same (conv_padding_sides below gives both amounts). Only the before
// amount is a Conv2dParams padding, which is what a 'same' layer holds in
// its params, so a symmetric 'same' layer is an ordinary padded convolution
// to everything that reads them. With a padding_mode other than zeros the
// input is padded in that mode by both amounts and the convolution pads
// nothing, as torch's _conv_forward. 'same' at a stride above 1 has no
// single answer (torch refuses it), and is refused naming the layer or op.
//
// The constants are tag types, as LibTorch's torch::kSame and torch::kValid
// (its enumtype namespace); the modes' constants are in nn/constants.h.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <string>

#include "tensor/error.h"
#include "tensor/size2d.h"

namespace kiln {

namespace enumtype {
struct kValid {};
struct kSame {};
}  // namespace enumtype

inline constexpr enumtype::kValid kValid{};
inline constexpr enumtype::kSame kSame{};

}  // namespace kiln

namespace kiln::nn {

// A convolution's padding: an explicit Size (int64_t for 1-d, Size2d for
// 2-d) on each side, or valid, or same (Note [Same padding]). Converts
// implicitly from an int, a pair ({1, 2}, 2-d only), kValid and kSame, so
// that .padding(1), .padding({1, 2}) and .padding(kiln::kSame) all read as
// torch's padding=.
enum class ConvPaddingKind { Explicit, Valid, Same };

template <class Size>
class ConvPadding {
 public:
  using Kind = ConvPaddingKind;

  ConvPadding(int64_t both) : size_(both) {}  // NOLINT: implicit, as torch's padding=1
  ConvPadding(int64_t h, int64_t w)           // NOLINT: implicit, so that .padding({1, 2}) reads as torch's
      requires std::same_as<Size, Size2d> : size_(h, w) {}
  ConvPadding(Size2d size)  // NOLINT: implicit, a Conv2dParams padding as it is
      requires std::same_as<Size, Size2d> : size_(size) {}
  ConvPadding(enumtype::kValid) : kind_(Kind::Valid), size_(0) {}  // NOLINT: implicit, as torch's padding='valid'
  ConvPadding(enumtype::kSame) : kind_(Kind::Same), size_(0) {}    // NOLINT: implicit, as torch's padding='same'

  Kind kind() const { return kind_; }
  // The zeros on each side: the explicit size, 0 for valid. Not defined for
  // same, whose amounts follow from the kernel (conv_padding_sides).
  Size size() const {
    KILN_CHECK(kind_ != Kind::Same, "ConvPadding: padding='same' has no size until the kernel is known");
    return size_;
  }
  bool operator==(const ConvPadding&) const = default;

 private:
  Kind kind_ = Kind::Explicit;
  Size size_;
};

using Conv1dPadding = ConvPadding<int64_t>;
using Conv2dPadding = ConvPadding<Size2d>;

// The padding before and after one dim.
struct PadSides {
  int64_t before, after;
  bool operator==(const PadSides&) const = default;
};

// The sides of each dim for `padding` with a kernel of `kernel` at
// `dilation`: the explicit size (0 for valid) on both sides, or same's
// dilation * (kernel - 1) split as total / 2 before and the rest after
// (Note [Same padding]).
inline PadSides conv_padding_sides(const Conv1dPadding& padding, int64_t kernel, int64_t dilation) {
  if (padding.kind() != ConvPaddingKind::Same) return {padding.size(), padding.size()};
  const int64_t total = dilation * (kernel - 1);
  return {total / 2, total - total / 2};
}
// {height's sides, width's sides}.
inline std::array<PadSides, 2> conv_padding_sides(const Conv2dPadding& padding, Size2d kernel, Size2d dilation) {
  if (padding.kind() != ConvPaddingKind::Same) {
    const Size2d p = padding.size();
    return {PadSides{p.h, p.h}, PadSides{p.w, p.w}};
  }
  const Conv1dPadding same = kSame;
  return {conv_padding_sides(same, kernel.h, dilation.h), conv_padding_sides(same, kernel.w, dilation.w)};
}

// "same", "valid" or the explicit size as `size_text` prints it, for
// extra_repr and messages.
template <class Size, class Print>
std::string conv_padding_text(const ConvPadding<Size>& padding, Print size_text) {
  switch (padding.kind()) {
    case ConvPaddingKind::Same:
      return "same";
    case ConvPaddingKind::Valid:
      return "valid";
    case ConvPaddingKind::Explicit:
      break;
  }
  return size_text(padding.size());
}

}  // namespace kiln::nn
