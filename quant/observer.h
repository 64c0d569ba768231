// Observers: modules that watch the float values flowing past a point of a
// model and choose the scale and zero point that point will be quantized
// with, as torch.ao.quantization's observers.
//
//   auto obs = std::make_shared<quant::MinMaxObserver>();        // quint8, per-tensor affine
//   for (const Tensor& batch : calibration) (*obs)(batch);         // returns the batch itself
//   quant::QParams qp = obs->calculate_qparams();                  // qp.scales[0], qp.zero_points[0]
//   Tensor q = ops::quantize(x, qp.quant_params(), qp.dtype);
//
// An observer is an nn::Module, so it sits in a model (prepare() puts one
// after each layer), appears in its repr, and its statistics are buffers
// that state_dict() carries (the keys torch uses: "eps", "min_val",
// "max_val", and "histogram" for HistogramObserver). forward(x) records x's
// statistics and returns x itself (the same tensor, untouched).
//
// Note [Observer arithmetic]
// calculate_qparams() is torch's _calculate_qparams, step for step in
// float32 (the dtype of torch's min_val/max_val buffers), so that Kiln and
// PyTorch choose the same grid for the same statistics:
//   min_neg = min(min_val, 0), max_pos = max(max_val, 0)   (0 is always representable)
//   symmetric: scale = max(-min_neg, max_pos) / (float(qmax - qmin) / 2)
//              zero_point = 0 for qint8; 128 for quint8, or (qmin + qmax) / 2
//              rounded down with a custom range
//   affine:    scale = (max_pos - min_neg) / float(qmax - qmin)
//              zero_point = clamp(qmin - round_half_even(min_neg / scale), qmin, qmax)
//   scale = max(scale, eps) in both (eps: float32's epsilon by default).
// The range [qmin, qmax] is [0, 255] for quint8 and [-128, 127] for qint8;
// reduce_range takes one bit off ([0, 127], [-64, 63]; a custom range is
// halved, rounding down), for kernels whose 16-bit intermediate sums would
// otherwise overflow (the AVX2 path without VNNI, tensor/cpu/qgemm.h).
//
// Inputs: any floating dtype (statistics are taken on its float32 values).
// An empty tensor is ignored (no statistics change, as torch). A NaN or
// infinite value is an error naming the observer and the value's index:
// torch would carry it into min/max and hand back a NaN or infinite scale,
// which quantizes everything to one value without a word.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nn/module.h"
#include "tensor/tensor.h"

namespace kiln::quant {

// torch.per_tensor_affine, per_tensor_symmetric, per_channel_affine,
// per_channel_symmetric.
enum class QScheme : uint8_t { PerTensorAffine, PerTensorSymmetric, PerChannelAffine, PerChannelSymmetric };

// "torch.per_tensor_affine", ...: the names torch prints.
std::string_view qscheme_name(QScheme qscheme);
inline bool is_per_channel(QScheme q) { return q == QScheme::PerChannelAffine || q == QScheme::PerChannelSymmetric; }
inline bool is_symmetric(QScheme q) { return q == QScheme::PerTensorSymmetric || q == QScheme::PerChannelSymmetric; }

// The settings every observer shares (torch's UniformQuantizationObserverBase).
struct ObserverOptions {
  DType dtype = DType::UInt8;  // UInt8 (quint8) or Int8 (qint8)
  QScheme qscheme = QScheme::PerTensorAffine;
  bool reduce_range = false;
  // A custom range, both or neither: quant_min <= 0 <= quant_max,
  // quant_min < quant_max, within dtype's range.
  std::optional<int64_t> quant_min;
  std::optional<int64_t> quant_max;
  double eps = std::numeric_limits<float>::epsilon();  // the smallest scale
};

// What calculate_qparams() returns: the grid of one tensor (per_channel
// false, one scale and zero point) or one per index of dim `axis`.
// Scales are float32 values held in doubles (Note [Observer arithmetic]),
// so scale_as_float (tensor/quant_math.h) gives them back exactly.
struct QParams {
  std::vector<double> scales;
  std::vector<int64_t> zero_points;
  int64_t axis = 0;
  DType dtype = DType::UInt8;
  bool per_channel = false;
  // The range values are clamped to (reduce_range and custom ranges
  // included); fake_quantize needs it, a quantized tensor's dtype implies
  // the full range.
  int64_t quant_min = 0;
  int64_t quant_max = 255;

  // The tensor layer's form (tensor/tensor.h), for ops::quantize.
  std::shared_ptr<const QuantParams> quant_params() const;
};

// The base of the observers: options, the "eps" buffer, and the qparams of
// a min and max (Note [Observer arithmetic]).
class Observer : public nn::Module {
 public:
  // Checks the options (naming `name`, the observer's type, on error).
  Observer(std::string_view name, ObserverOptions options);

  // Records x's statistics (observe) and returns x itself.
  Tensor forward(const Tensor& x) override;
  // Records x's statistics; ignores an empty x; throws on NaN or infinity.
  virtual void observe(const Tensor& x) = 0;
  // The grid the statistics call for. Before any statistics (see
  // has_statistics) it returns torch's default, scale 1 and zero point 0;
  // convert() should check has_statistics() first and name the module.
  virtual QParams calculate_qparams() const = 0;
  // True once a non-empty tensor has been observed (or statistics loaded).
  virtual bool has_statistics() const = 0;
  // Forgets the statistics, as if never run.
  virtual void reset_min_max_vals() = 0;

  const ObserverOptions& options() const { return options_; }
  DType dtype() const { return options_.dtype; }
  QScheme qscheme() const { return options_.qscheme; }
  int64_t quant_min() const { return quant_min_; }
  int64_t quant_max() const { return quant_max_; }

  Tensor eps;  // (1), float32, as torch's buffer

 protected:
  // The grid for per-channel (or one) minima and maxima, float32 as torch's
  // buffers. `axis` is recorded in the result for per-channel schemes.
  QParams qparams_for(const std::vector<float>& min_vals, const std::vector<float>& max_vals, int64_t axis) const;
  // The default grid, scale 1 and zero point 0 (torch's, before observing).
  QParams default_qparams() const;
  // x as contiguous float32 (a view when it is one), after the NaN/inf
  // check; throws naming this observer.
  Tensor checked_float32(const Tensor& x) const;
  // "dtype=torch.quint8, qscheme=torch.per_tensor_affine, reduce_range=False" and the
  // custom range when given: the settings part of extra_repr.
  std::string options_repr() const;

 private:
  ObserverOptions options_;
  int64_t quant_min_;
  int64_t quant_max_;
};

// The running minimum and maximum of everything observed (torch.ao's
// MinMaxObserver). Per-tensor schemes only. Buffers "min_val" and
// "max_val": 0-dim float32, +inf and -inf before the first observation.
class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(ObserverOptions options = {});

  void observe(const Tensor& x) override;
  QParams calculate_qparams() const override;
  bool has_statistics() const override;
  void reset_min_max_vals() override;
  // "min_val=-1.5, max_val=2.25, dtype=torch.quint8, ..."
  std::string extra_repr() const override;

  Tensor min_val;
  Tensor max_val;

 protected:
  MinMaxObserver(std::string_view name, ObserverOptions options);
};

// min/max as a moving average of each batch's (torch.ao's
// MovingAverageMinMaxObserver): the first batch sets them, later ones do
//   min_val = min_val + c * (batch_min - min_val)   (in float32, c = averaging_constant)
// and the same for max_val.
class MovingAverageMinMaxObserver : public MinMaxObserver {
 public:
  explicit MovingAverageMinMaxObserver(double averaging_constant = 0.01, ObserverOptions options = {});

  void observe(const Tensor& x) override;
  std::string extra_repr() const override;

  const double averaging_constant;
};

// Running min and max per index of dim ch_axis (torch.ao's
// PerChannelMinMaxObserver): weights, one grid per output channel.
// Per-channel schemes only (start from per_channel_defaults(); a per-tensor
// qscheme is an error). Buffers "min_val" and "max_val" are (0,) before the
// first observation and (C,) after; load_state_dict takes either shape
// (the buffers are resized in place, keeping their handles).
class PerChannelMinMaxObserver : public Observer {
 public:
  explicit PerChannelMinMaxObserver(int64_t ch_axis = 0, ObserverOptions options = per_channel_defaults());

  void observe(const Tensor& x) override;
  QParams calculate_qparams() const override;
  bool has_statistics() const override;
  void reset_min_max_vals() override;
  std::string extra_repr() const override;

  // PerChannelAffine quint8, torch's default for this observer.
  static ObserverOptions per_channel_defaults();
  // ch_axis counted from the front of the last input observed (ch_axis
  // itself before any).
  int64_t axis() const { return axis_; }

  // May be negative (counted from the end of each input); QParams::axis is
  // it counted from the front of the last input observed.
  const int64_t ch_axis;
  Tensor min_val;
  Tensor max_val;

 private:
  int64_t axis_;  // ch_axis resolved against the last input
};

// A histogram of everything observed, and a range chosen from it that
// minimises the L2 quantization error (torch.ao's HistogramObserver).
// Per-tensor schemes only. Buffers "histogram" (bins) float32, "min_val"
// and "max_val" 0-dim float32.
//
// Note [Histogram observer]
// The histogram always has `bins` (2048) equal bins spanning
// [min_val, max_val], everything observed so far. A batch that widens the
// range is merged by keeping the bin width a whole multiple of a fine grid:
// the old histogram is spread over `upsample_rate` (128) fine bins per bin,
// placed at its offset in the widened range (max is stretched so the
// widened range is a whole number of fine bins per new bin), and every
// group of fine bins is summed into one new bin; the batch itself is
// binned directly in the new range. (As torch, a batch arriving while
// min_val == max_val restarts the histogram.)
// calculate_qparams() then searches, as torch's _non_linear_param_search
// (after Caffe2's NormMinimization), for a sub-range [start_bin, end_bin]:
// starting from all bins, it repeatedly moves in whichever end lies further
// from the next quantile step (1e-5 of the total count), and stops when the
// estimated L2 error of quantizing the histogram to 2^8 levels over that
// sub-range grows. The error of each source bin treats its count as spread
// evenly over the bin and sums the squared distance to the centre of the
// destination bin holding each part. The chosen range goes through Note
// [Observer arithmetic].
// Differences from torch 1.13, on purpose: torch bins each batch over
// [int(min), int(max)] (truncating the range to integers, so that values
// of a batch in (-1, 1) are counted over the wrong range or dropped) where
// Kiln bins over the exact float range; and Kiln sums the error in double
// where torch uses float32, so where two candidate ranges' errors tie to
// float32 rounding the search may stop one step apart. On inputs whose
// min and max are integers the histograms agree (tested against torch).
class HistogramObserver : public Observer {
 public:
  explicit HistogramObserver(ObserverOptions options = {}, int64_t bins = 2048, int64_t upsample_rate = 128);

  void observe(const Tensor& x) override;
  QParams calculate_qparams() const override;
  bool has_statistics() const override;
  void reset_min_max_vals() override;
  std::string extra_repr() const override;

  // The range the L2 search picks (before Note [Observer arithmetic]), as
  // float32 min and max; requires has_statistics().
  std::pair<float, float> search_range() const;

  const int64_t bins;
  const int64_t upsample_rate;
  Tensor histogram;
  Tensor min_val;
  Tensor max_val;
};

}  // namespace kiln::quant
