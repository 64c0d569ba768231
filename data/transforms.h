// Per-sample image transforms: ToTensor, Normalize, RandomCrop,
// RandomHorizontalFlip and Compose, as torchvision.transforms.
//
// Every transform takes one image (C, H, W) or a batch (N, C, H, W) of CPU
// tensors and returns a new contiguous tensor; the input is never modified.
// The geometric ones (RandomCrop, RandomHorizontalFlip) move bytes and work
// on any dtype, so they run on uint8 images before ToTensor, where a sample
// is 4x smaller.
//
// Note [Transform randomness]
// A random transform draws one Philox block (Note [Random streams]) per
// sample from the Generator it is given, in sample order, and takes all its
// choices for that sample (crop offsets, flip) from that block. The result
// therefore depends only on the generator's (seed, offset), never on which
// thread runs it. A data loader that transforms samples on worker threads
// gives each sample its own generator, Generator(sample_seed(seed, epoch, i)),
// so sample i of an epoch looks the same whatever the thread count or order.
//
//   transforms::Compose train({std::make_shared<transforms::RandomCrop>(32, 4),
//                              std::make_shared<transforms::RandomHorizontalFlip>(),
//                              std::make_shared<transforms::ToTensor>(),
//                              std::make_shared<transforms::Normalize>(mean, std)});
//   Generator gen(sample_seed(seed, epoch, i));
//   Tensor x = train(image, gen);   // (3, 32, 32) float32
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace kiln::data::transforms {

// A seed for sample `index` of `epoch` under the run's `seed`: a SplitMix64
// hash, so neighbouring samples get unrelated Philox keys.
uint64_t sample_seed(uint64_t seed, uint64_t epoch, uint64_t index);

class Transform {
 public:
  virtual ~Transform() = default;
  // x: (C, H, W) or (N, C, H, W) on the CPU. Random transforms draw from
  // `gen` (Note [Transform randomness]); the others ignore it.
  virtual Tensor apply(const Tensor& x, Generator& gen) const = 0;
  virtual std::string name() const = 0;

  Tensor operator()(const Tensor& x, Generator& gen) const { return apply(x, gen); }
  // Draws from default_generator() (for transforms that are not random, or
  // single-threaded use).
  Tensor operator()(const Tensor& x) const { return apply(x, default_generator()); }
};

// uint8 in [0, 255] -> float32 in [0, 1] (x / 255), same shape. Float
// inputs are an error: they have already been converted.
class ToTensor : public Transform {
 public:
  Tensor apply(const Tensor& x, Generator& gen) const override;
  std::string name() const override { return "ToTensor"; }
};

// out[c] = (x[c] - mean[c]) / std[c] over channel dim C; x float32, with as
// many channels as `mean` and `std` have entries; every std must be nonzero.
class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor apply(const Tensor& x, Generator& gen) const override;
  std::string name() const override { return "Normalize"; }

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
};

// Pads every side by `padding` zeros, then cuts a (height, width) window at
// a random offset: top uniform in [0, H + 2*padding - height], left uniform
// in [0, W + 2*padding - width] (torchvision's RandomCrop with fill 0).
class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(int64_t height, int64_t width, int64_t padding);
  Tensor apply(const Tensor& x, Generator& gen) const override;
  std::string name() const override { return "RandomCrop"; }

  // The crop of one sample at a given offset into the padded image, without
  // randomness (what apply() does once it has drawn top and left).
  // x: (C, H, W) -> (C, height, width)
  Tensor crop_at(const Tensor& x, int64_t top, int64_t left) const;

 private:
  int64_t height_;
  int64_t width_;
  int64_t padding_;
};

// Mirrors each sample left-right with probability p.
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor apply(const Tensor& x, Generator& gen) const override;
  std::string name() const override { return "RandomHorizontalFlip"; }

 private:
  double p_;
};

// Applies its transforms in order, all drawing from the same generator.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<Transform>> transforms);
  Tensor apply(const Tensor& x, Generator& gen) const override;
  std::string name() const override;
  const std::vector<std::shared_ptr<Transform>>& transforms() const { return transforms_; }

 private:
  std::vector<std::shared_ptr<Transform>> transforms_;
};

}  // namespace kiln::data::transforms
