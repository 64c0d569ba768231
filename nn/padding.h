// The padding layers, as torch.nn's: ZeroPad2d, ConstantPad1d/2d/3d,
// ReflectionPad1d/2d/3d and ReplicationPad1d/2d/3d, each F::pad with a fixed
// padding and mode (Note [Composite layers] in nn/functional_composite.h).
// A padding is one int for every side or torch's list, last dim first:
// (left, right), (left, right, top, bottom), (left, right, top, bottom,
// front, back); a negative entry crops.
//
//   auto pad = std::make_shared<nn::ReflectionPad2d>(std::vector<int64_t>{1, 1, 2, 0});
//   Tensor y = (*pad)(x);   // x: (N, C, H, W) -> (N, C, H + 2, W + 2)
//   nn::ConstantPad1d fill(3, 0.5);   // (N, C, L) -> (N, C, L + 6), new elements 0.5
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/functional_composite.h"
#include "nn/module.h"

namespace kiln::nn {

// What the padding layers share (torch's _ConstantPadNd, _ReflectionPadNd
// and _ReplicationPadNd); no parameters. The input is as F::pad requires
// for the mode: for the reflection and replication layers of k dims, a
// (k + 1)-d or batched (k + 2)-d input.
class PadNd : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  // As torch: "padding=(1, 1, 2, 0), value=0.5" for the constant layers,
  // "(1, 1, 2, 0)" for the others and ZeroPad2d.
  std::string extra_repr() const override;

  const std::vector<int64_t> padding;  // 2 * dims entries, last dim first
  const functional::PadMode mode;
  const double value;  // the constant layers' fill

 protected:
  // `name` for messages and printing, `dims` the number of padded dims.
  PadNd(const char* name, int64_t dims, std::vector<int64_t> padding, functional::PadMode mode, double value = 0.0);
};

// Pad with `value`: ConstantPad1d(2, 0.5), ConstantPad2d({1, 1, 2, 0}, -1.0).
class ConstantPad1d : public PadNd {
 public:
  ConstantPad1d(int64_t padding, double value) : ConstantPad1d(std::vector<int64_t>(2, padding), value) {}
  ConstantPad1d(std::vector<int64_t> padding, double value)
      : PadNd("ConstantPad1d", 1, std::move(padding), functional::PadMode::Constant, value) {}
};

class ConstantPad2d : public PadNd {
 public:
  ConstantPad2d(int64_t padding, double value) : ConstantPad2d(std::vector<int64_t>(4, padding), value) {}
  ConstantPad2d(std::vector<int64_t> padding, double value)
      : PadNd("ConstantPad2d", 2, std::move(padding), functional::PadMode::Constant, value) {}
};

class ConstantPad3d : public PadNd {
 public:
  ConstantPad3d(int64_t padding, double value) : ConstantPad3d(std::vector<int64_t>(6, padding), value) {}
  ConstantPad3d(std::vector<int64_t> padding, double value)
      : PadNd("ConstantPad3d", 3, std::move(padding), functional::PadMode::Constant, value) {}
};

// Mirror about the edges without repeating them; each pad < its dim's size.
class ReflectionPad1d : public PadNd {
 public:
  explicit ReflectionPad1d(int64_t padding) : ReflectionPad1d(std::vector<int64_t>(2, padding)) {}
  explicit ReflectionPad1d(std::vector<int64_t> padding)
      : PadNd("ReflectionPad1d", 1, std::move(padding), functional::PadMode::Reflect) {}
};

class ReflectionPad2d : public PadNd {
 public:
  explicit ReflectionPad2d(int64_t padding) : ReflectionPad2d(std::vector<int64_t>(4, padding)) {}
  explicit ReflectionPad2d(std::vector<int64_t> padding)
      : PadNd("ReflectionPad2d", 2, std::move(padding), functional::PadMode::Reflect) {}
};

class ReflectionPad3d : public PadNd {
 public:
  explicit ReflectionPad3d(int64_t padding) : ReflectionPad3d(std::vector<int64_t>(6, padding)) {}
  explicit ReflectionPad3d(std::vector<int64_t> padding)
      : PadNd("ReflectionPad3d", 3, std::move(padding), functional::PadMode::Reflect) {}
};

// Repeat the edge elements.
class ReplicationPad1d : public PadNd {
 public:
  explicit ReplicationPad1d(int64_t padding) : ReplicationPad1d(std::vector<int64_t>(2, padding)) {}
  explicit ReplicationPad1d(std::vector<int64_t> padding)
      : PadNd("ReplicationPad1d", 1, std::move(padding), functional::PadMode::Replicate) {}
};

class ReplicationPad2d : public PadNd {
 public:
  explicit ReplicationPad2d(int64_t padding) : ReplicationPad2d(std::vector<int64_t>(4, padding)) {}
  explicit ReplicationPad2d(std::vector<int64_t> padding)
      : PadNd("ReplicationPad2d", 2, std::move(padding), functional::PadMode::Replicate) {}
};

class ReplicationPad3d : public PadNd {
 public:
  explicit ReplicationPad3d(int64_t padding) : ReplicationPad3d(std::vector<int64_t>(6, padding)) {}
  explicit ReplicationPad3d(std::vector<int64_t> padding)
      : PadNd("ReplicationPad3d", 3, std::move(padding), functional::PadMode::Replicate) {}
};

// Pads the last two dims with zeros; prints as torch's, "ZeroPad2d((1, 1, 2, 0))".
class ZeroPad2d : public PadNd {
 public:
  explicit ZeroPad2d(int64_t padding) : ZeroPad2d(std::vector<int64_t>(4, padding)) {}
  explicit ZeroPad2d(std::vector<int64_t> padding)
      : PadNd("ZeroPad2d", 2, std::move(padding), functional::PadMode::Constant) {}
  std::string extra_repr() const override;
};

}  // namespace kiln::nn
