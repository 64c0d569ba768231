// HistogramObserver (Note [Histogram observer] in quant/observer.h).
#include <algorithm>
#include <cmath>

#include "nn/repr.h"
#include "quant/observer.h"
#include "quant/state_tensors.h"
#include "tensor/factory.h"

namespace kiln::quant {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// 2^8 levels, whatever the range (torch's dst_nbins): the error estimate
// compares candidate ranges, it does not model reduce_range.
constexpr int64_t kDestinationBins = 256;

float value_of(const Tensor& t) { return detail::scalar_of(t); }
void set_value(Tensor& t, float v) { detail::fill(t, v); }

// counts[b] += the number of x in bin b of `bins` equal bins over [lo, hi]
// (hi itself in the last bin), in float32 as torch.histc. lo == hi widens
// the range to [lo - 1, hi + 1], as histc does.
void add_histogram(const float* x, int64_t n, float lo, float hi, float* counts, int64_t bins) {
  if (lo == hi) {
    lo -= 1.0f;
    hi += 1.0f;
  }
  const float width = hi - lo;
  const float nbins = static_cast<float>(bins);
  for (int64_t i = 0; i < n; ++i) {
    if (!(x[i] >= lo && x[i] <= hi)) continue;
    auto b = static_cast<int64_t>((x[i] - lo) * nbins / width);
    counts[std::min(b, bins - 1)] += 1.0f;
  }
}

// (b^3 - a^3) / 3: the integral of t^2 over [a, b], the squared error of a
// unit density spread over distances a..b from a destination bin's centre.
double cube_integral(double a, double b) { return (b * b * b - a * a * a) / 3.0; }

}  // namespace

HistogramObserver::HistogramObserver(ObserverOptions options, int64_t bins, int64_t upsample_rate)
    : Observer("HistogramObserver", options), bins(bins), upsample_rate(upsample_rate) {
  KILN_CHECK(!is_per_channel(options.qscheme), "HistogramObserver: qscheme ", qscheme_name(options.qscheme),
             " is per-channel; this observer is per-tensor");
  KILN_CHECK(bins >= 1 && upsample_rate >= 1, "HistogramObserver: bins (", bins, ") and upsample_rate (",
             upsample_rate, ") must be positive");
  histogram = register_buffer("histogram", zeros({bins}, DType::Float32));
  min_val = register_buffer("min_val", scalar_tensor(kInf, DType::Float32));
  max_val = register_buffer("max_val", scalar_tensor(-kInf, DType::Float32));
}

bool HistogramObserver::has_statistics() const {
  return !(value_of(min_val) == kInf && value_of(max_val) == -kInf);
}

void HistogramObserver::reset_min_max_vals() {
  set_value(min_val, kInf);
  set_value(max_val, -kInf);
  detail::fill(histogram, 0.0);
}

void HistogramObserver::observe(const Tensor& x) {
  if (x.numel() == 0) return;
  KILN_CHECK(histogram.numel() == bins, "HistogramObserver: the histogram buffer has ", histogram.numel(),
             " bins, the observer was made with ", bins);
  Tensor f = checked_float32(x);
  const float* p = f.data<float>();
  const int64_t n = f.numel();
  float lo = kInf, hi = -kInf;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  std::vector<float> counts = detail::host_floats(histogram);
  const float old_min = value_of(min_val), old_max = value_of(max_val);
  if (!has_statistics() || old_min == old_max) {
    std::fill(counts.begin(), counts.end(), 0.0f);
    add_histogram(p, n, lo, hi, counts.data(), bins);
    detail::store_floats(histogram, counts);
    set_value(min_val, lo);
    set_value(max_val, hi);
    return;
  }
  // The widened range, stretched at the top so that it is a whole number
  // (downsample) of fine bins per new bin; float32 as torch's tensors.
  float new_min = std::min(lo, old_min), new_max = std::max(hi, old_max);
  const float fine_width = (old_max - old_min) / static_cast<float>(bins * upsample_rate);
  const float new_bin_width = static_cast<float>(bins) * fine_width;
  const auto downsample = static_cast<int64_t>(std::ceil((new_max - new_min) / new_bin_width));
  new_max = new_max + (static_cast<float>(downsample) * new_bin_width - (new_max - new_min));
  const auto start = static_cast<int64_t>(std::nearbyint((old_min - new_min) / fine_width));

  std::vector<float> merged(bins, 0.0f);
  add_histogram(p, n, new_min, new_max, merged.data(), bins);
  if (new_min == old_min && new_max == old_max) {
    for (int64_t b = 0; b < bins; ++b) merged[b] += counts[b];
  } else {
    // Old bin i covers fine bins [start + i*up, start + (i+1)*up); new bin
    // j covers fine bins [j*down, (j+1)*down). Each fine bin carries
    // 1/up of its old bin's count.
    std::vector<double> moved(bins, 0.0);
    const int64_t fine_total = bins * downsample;
    for (int64_t i = 0; i < bins; ++i) {
      if (counts[i] == 0.0f) continue;
      int64_t from = start + i * upsample_rate;
      const int64_t to = std::min(from + upsample_rate, fine_total);
      while (from < to) {
        const int64_t j = from / downsample;
        const int64_t stop = std::min(to, (j + 1) * downsample);
        moved[j] += static_cast<double>(counts[i]) * static_cast<double>(stop - from);
        from = stop;
      }
    }
    for (int64_t j = 0; j < bins; ++j) merged[j] += static_cast<float>(moved[j] / static_cast<double>(upsample_rate));
  }
  detail::store_floats(histogram, merged);
  set_value(min_val, new_min);
  set_value(max_val, new_max);
}

// The L2 error of quantizing `counts` (bins over [min_val, max_val]) to
// 256 levels spread over bins [start_bin, end_bin].
static double quantization_error(const std::vector<float>& counts, float min_val, float max_val, int64_t start_bin,
                          int64_t end_bin) {
  const auto bins = static_cast<int64_t>(counts.size());
  const double bin_width = (static_cast<double>(max_val) - min_val) / static_cast<double>(bins);
  const double dst_width = bin_width * static_cast<double>(end_bin - start_bin + 1) / kDestinationBins;
  if (dst_width == 0.0) return 0.0;
  const double last_dst = static_cast<double>(kDestinationBins - 1);
  const double half = dst_width / 2;
  double error = 0.0;
  for (int64_t i = 0; i < bins; ++i) {
    if (counts[i] == 0.0f) continue;
    // Source bin i, measured from the start of destination bin 0.
    const double begin = static_cast<double>(i - start_bin) * bin_width;
    const double end = begin + bin_width;
    const double dst_begin = std::clamp(std::floor(begin / dst_width), 0.0, last_dst);
    const double dst_end = std::clamp(std::floor(end / dst_width), 0.0, last_dst);
    const double density = static_cast<double>(counts[i]) / bin_width;
    // The part in the first destination bin, the whole destination bins
    // between, and the part in the last one.
    double norm = cube_integral(begin - (dst_begin + 0.5) * dst_width, half);
    norm += (dst_end - dst_begin - 1) * cube_integral(-half, half);
    norm += cube_integral(-half, end - (dst_end * dst_width + half));
    error += density * norm;
  }
  return error;
}

std::pair<float, float> HistogramObserver::search_range() const {
  KILN_CHECK(has_statistics(), "HistogramObserver: search_range needs statistics; observe a tensor first");
  const float min_f = value_of(min_val), max_f = value_of(max_val);
  if (min_f == max_f) return {min_f, max_f};
  const std::vector<float> counts = detail::host_floats(histogram);
  // Cumulative counts accumulated in double and stored as float32, the
  // quantile bounds compared in float32: as torch's cumsum and comparisons.
  std::vector<float> cumulative(bins);
  double running = 0.0;
  for (int64_t b = 0; b < bins; ++b) {
    running += counts[b];
    cumulative[b] = static_cast<float>(running);
  }
  const double total = static_cast<double>(static_cast<float>(running));
  const double step = 1e-5;
  double alpha = 0.0, beta = 1.0;
  int64_t start_bin = 0, end_bin = bins - 1;
  double best = std::numeric_limits<double>::infinity();
  while (alpha < beta) {
    const double next_alpha = alpha + step, next_beta = beta - step;
    const auto lower = static_cast<float>(next_alpha * total), upper = static_cast<float>(next_beta * total);
    int64_t l = start_bin, r = end_bin;
    while (l < end_bin && cumulative[l] < lower) ++l;
    while (r > start_bin && cumulative[r] > upper) --r;
    // Move whichever end the quantile step moves further.
    int64_t next_start = start_bin, next_end = end_bin;
    if (l - start_bin > end_bin - r) {
      next_start = l;
      alpha = next_alpha;
    } else {
      next_end = r;
      beta = next_beta;
    }
    if (next_start == start_bin && next_end == end_bin) continue;
    const double error = quantization_error(counts, min_f, max_f, next_start, next_end);
    if (error > best) break;
    best = error;
    start_bin = next_start;
    end_bin = next_end;
  }
  const float bin_width = (max_f - min_f) / static_cast<float>(bins);
  return {min_f + bin_width * static_cast<float>(start_bin), min_f + bin_width * static_cast<float>(end_bin + 1)};
}

QParams HistogramObserver::calculate_qparams() const {
  if (!has_statistics()) return default_qparams();
  KILN_CHECK(histogram.numel() == bins, "HistogramObserver: the histogram buffer has ", histogram.numel(),
             " bins, the observer was made with ", bins);
  auto [lo, hi] = search_range();
  return qparams_for({lo}, {hi}, 0);
}

std::string HistogramObserver::extra_repr() const {
  return "bins=" + std::to_string(bins) + ", min_val=" + nn::repr::floating(value_of(min_val)) +
         ", max_val=" + nn::repr::floating(value_of(max_val)) + ", " + options_repr();
}

}  // namespace kiln::quant
