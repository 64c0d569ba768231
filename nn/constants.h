// LibTorch's short names for the modes the layers and functional ops take
// (torch::kReflect, torch::kBilinear, torch::kSum), so that ported code keeps
// reading the same:
//
//   nn::Conv2d edge(nn::Conv2dOptions(3, 8, 3).padding(1).padding_mode(kiln::kReflect));
//   Tensor p = F::pad(x, F::PadFuncOptions({1, 1}).mode(kiln::kReflect));
//   Tensor u = F::interpolate(x, F::InterpolateFuncOptions().size({8, 8}).mode(kiln::kBilinear));
//   nn::MSELoss criterion(nn::MSELossOptions(kiln::kSum));
//
// kiln.h includes this header; kSame and kValid, the convolutions' padding,
// are in nn/conv_padding.h.
//
// Note [Mode constants]
// One LibTorch constant serves several option types: torch::kReflect is a
// Conv2d padding_mode and an F::pad mode. LibTorch makes each constant an
// object of its own empty type (torch::enumtype::kReflect) and each option a
// std::variant of the types it accepts. Kiln's options take plain enums
// (PaddingMode, F::PadMode, ...), which a switch reads and a wrong value
// cannot be, so each constant here is an object of an empty type that
// converts, implicitly and at compile time, to the value it names of each
// enum that has it: kReflect becomes PaddingMode::Reflect where a
// PaddingMode is wanted and PadMode::Reflect where a PadMode is. A setter
// or parameter of either enum takes it as it is, a comparison
// (options.mode() == kiln::kReflect) compares enums, and a constant given
// where its enum has no such value (padding_mode(kiln::kBilinear)) does not
// compile. The enums stay what Kiln's own code writes; the constants are
// for code ported from LibTorch.
#pragma once

#include "nn/conv.h"
#include "nn/conv_padding.h"
#include "nn/functional.h"
#include "nn/functional_composite.h"
#include "nn/rnn_cell.h"

namespace kiln {

namespace enumtype {

// ---- padding: Conv1d's and Conv2d's padding_mode (nn::PaddingMode), F::pad's mode (F::PadMode) ----

struct kZeros {
  constexpr operator nn::PaddingMode() const { return nn::PaddingMode::Zeros; }
};
struct kConstant {
  constexpr operator nn::functional::PadMode() const { return nn::functional::PadMode::Constant; }
};
struct kReflect {
  constexpr operator nn::PaddingMode() const { return nn::PaddingMode::Reflect; }
  constexpr operator nn::functional::PadMode() const { return nn::functional::PadMode::Reflect; }
};
struct kReplicate {
  constexpr operator nn::PaddingMode() const { return nn::PaddingMode::Replicate; }
  constexpr operator nn::functional::PadMode() const { return nn::functional::PadMode::Replicate; }
};
struct kCircular {
  constexpr operator nn::PaddingMode() const { return nn::PaddingMode::Circular; }
  constexpr operator nn::functional::PadMode() const { return nn::functional::PadMode::Circular; }
};

// ---- F::interpolate's and nn::Upsample's mode (F::InterpolateMode) ----

struct kNearest {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::Nearest; }
};
struct kNearestExact {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::NearestExact; }
};
struct kLinear {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::Linear; }
};
struct kBilinear {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::Bilinear; }
};
struct kBicubic {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::Bicubic; }
};
struct kTrilinear {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::Trilinear; }
};
struct kArea {
  constexpr operator nn::functional::InterpolateMode() const { return nn::functional::InterpolateMode::Area; }
};

// ---- the losses' reduction (F::Reduction); GELU's approximation (F::GeluApproximation) ----

struct kNone {
  constexpr operator nn::functional::Reduction() const { return nn::functional::Reduction::None; }
  constexpr operator nn::functional::GeluApproximation() const { return nn::functional::GeluApproximation::None; }
};
struct kMean {
  constexpr operator nn::functional::Reduction() const { return nn::functional::Reduction::Mean; }
};
struct kSum {
  constexpr operator nn::functional::Reduction() const { return nn::functional::Reduction::Sum; }
};

// ---- the Elman RNN's nonlinearity (nn::RNNNonlinearity), and GELU's tanh approximation ----

struct kTanh {
  constexpr operator nn::RNNNonlinearity() const { return nn::RNNNonlinearity::Tanh; }
  constexpr operator nn::functional::GeluApproximation() const { return nn::functional::GeluApproximation::Tanh; }
};
struct kReLU {
  constexpr operator nn::RNNNonlinearity() const { return nn::RNNNonlinearity::ReLU; }
};

}  // namespace enumtype

inline constexpr enumtype::kZeros kZeros{};
inline constexpr enumtype::kConstant kConstant{};
inline constexpr enumtype::kReflect kReflect{};
inline constexpr enumtype::kReplicate kReplicate{};
inline constexpr enumtype::kCircular kCircular{};

inline constexpr enumtype::kNearest kNearest{};
inline constexpr enumtype::kNearestExact kNearestExact{};
inline constexpr enumtype::kLinear kLinear{};
inline constexpr enumtype::kBilinear kBilinear{};
inline constexpr enumtype::kBicubic kBicubic{};
inline constexpr enumtype::kTrilinear kTrilinear{};
inline constexpr enumtype::kArea kArea{};

inline constexpr enumtype::kNone kNone{};
inline constexpr enumtype::kMean kMean{};
inline constexpr enumtype::kSum kSum{};

inline constexpr enumtype::kTanh kTanh{};
inline constexpr enumtype::kReLU kReLU{};

}  // namespace kiln
