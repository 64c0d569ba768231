#include "apps/common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "tensor/error.h"

namespace kiln::apps {

namespace {

// The fastest an in-place line is redrawn; more often only costs terminal time.
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buffer;
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

std::string format_gpu_status(const cuda::GpuStatus& status) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "gpu %d%% %.1f/%.0f GiB", status.utilization_percent,
                static_cast<double>(status.memory_used_bytes) / kGiB,
                static_cast<double>(status.memory_total_bytes) / kGiB);
  return buffer;
}

ProgressLine::ProgressLine(std::ostream& out, bool interactive, std::string label, int64_t total_steps,
                           int64_t first_step)
    : out_(out),
      interactive_(interactive),
      label_(std::move(label)),
      total_steps_(total_steps),
      first_step_(first_step),
      start_(Clock::now()),
      last_draw_(start_ - kRedrawInterval) {
  set_plain_lines(plain_lines_);
}

int64_t ProgressLine::plain_every() const {
  return std::max<int64_t>(1, (total_steps_ + plain_lines_ - 1) / plain_lines_);
}

void ProgressLine::set_plain_lines(int64_t lines) {
  KILN_CHECK(lines >= 1, "ProgressLine: plain lines per stretch must be at least 1, got ", lines);
  plain_lines_ = lines;
  // The first multiple of the interval after the steps already done.
  next_plain_step_ = (first_step_ / plain_every() + 1) * plain_every();
}

std::string ProgressLine::format(int64_t step, double running_loss, double items_per_second, double eta_seconds,
                                 const std::optional<cuda::GpuStatus>& gpu) const {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "%s  step %lld/%lld  loss %.4f  %.0f %s/s  ETA %s", label_.c_str(),
                static_cast<long long>(step), static_cast<long long>(total_steps_), running_loss, items_per_second,
                unit_.c_str(), format_duration(eta_seconds).c_str());
  std::string text = buffer;
  if (gpu) text += "  " + format_gpu_status(*gpu);
  return text;
}

void ProgressLine::update(int64_t step, const std::function<double()>& running_loss, int64_t items) {
  const Clock::time_point now = Clock::now();
  const bool last = step == total_steps_;
  if (interactive_) {
    if (!last && now - last_draw_ < kRedrawInterval) return;
  } else {
    if (step < next_plain_step_ && !last) return;
    next_plain_step_ = (step / plain_every() + 1) * plain_every();
  }
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double items_per_second = seconds > 0 ? static_cast<double>(items) / seconds : 0.0;
  const int64_t done = step - first_step_;
  const double eta = done > 0 ? seconds / static_cast<double>(done) * static_cast<double>(total_steps_ - step) : NAN;
  std::optional<cuda::GpuStatus> gpu;
  // Without libkiln_cuda or NVML there is no status to show.
  if (gpu_) gpu = cuda::gpu_status(*gpu_);
  std::string text = format(step, running_loss(), items_per_second, eta, gpu);
  if (interactive_) {
    // Spaces over the tail of a longer previous line.
    const size_t width = text.size();
    if (width < last_width_) text.append(last_width_ - width, ' ');
    last_width_ = width;
    out_ << '\r' << text << std::flush;
  } else {
    out_ << text << '\n' << std::flush;
  }
}

void ProgressLine::finish() {
  if (interactive_ && last_width_ > 0) {
    out_ << '\r' << std::string(last_width_, ' ') << '\r' << std::flush;
    last_width_ = 0;
  }
}

}  // namespace kiln::apps
