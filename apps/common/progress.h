// The progress line of a stretch of training (an epoch, the steps between
// two evaluations): step/total, running loss, items (images, tokens) per
// second and the time left in the stretch.
//
// On a terminal the line is rewritten in place ("\r", at most ten times a
// second); in a log file (stdout not a terminal) it becomes a plain line at
// every quarter of the stretch (by default), so that logs stay short and
// readable. When training on a GPU, the line ends with its utilisation and
// memory from NVML ("gpu 87% 1.2/80 GiB"), or without them where NVML
// cannot answer.
//
//   ProgressLine progress(std::cout, isatty(1), "epoch 3/30", loader.size());
//   for (...) { ...; progress.update(step + 1, [&] { return loss_sum / images_seen; }, images_seen); }
//   progress.finish();   // clears the in-place line
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "tensor/cuda_status.h"

namespace kiln::apps {

// "1:05", "12:00:07": a duration in whole seconds for the ETA.
std::string format_duration(double seconds);

// Whether stdout is a terminal (where the line updates in place).
bool stdout_is_terminal();

// "gpu 87% 1.2/80 GiB": utilisation, memory used of the total.
std::string format_gpu_status(const cuda::GpuStatus& status);

class ProgressLine {
 public:
  // `total_steps` are the steps of the whole stretch; `first_step` those
  // already done before this line started (a resumed epoch), which the
  // speed and ETA leave out.
  ProgressLine(std::ostream& out, bool interactive, std::string label, int64_t total_steps, int64_t first_step = 0);

  // What is counted per second ("img" by default: "2345 img/s"; "tok").
  void set_unit(std::string unit) { unit_ = std::move(unit); }
  // Plain lines (stdout not a terminal) per stretch, 4 by default; must be >= 1.
  void set_plain_lines(int64_t lines);

  // After `step` of total_steps steps (1-based), with the items (images,
  // tokens) processed since the line started. `running_loss` returns the mean loss so far; it
  // is called only when the line is drawn, because reading a loss computed
  // on a GPU makes the host wait for the GPU.
  void update(int64_t step, const std::function<double()>& running_loss, int64_t items);
  // Ends the in-place line (erases it) so that a summary line follows.
  void finish();
  // Appends the status of CUDA device `device` to every update (nothing
  // when NVML is absent, as in a build without CUDA).
  void show_gpu(int device) { gpu_ = device; }

  // The text of one update, without "\r" or newline.
  std::string format(int64_t step, double running_loss, double items_per_second, double eta_seconds,
                     const std::optional<cuda::GpuStatus>& gpu = std::nullopt) const;

 private:
  using Clock = std::chrono::steady_clock;

  // Steps between two plain lines.
  int64_t plain_every() const;

  std::ostream& out_;
  bool interactive_;
  std::string label_;
  int64_t total_steps_;
  int64_t first_step_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  size_t last_width_ = 0;  // characters of the last in-place line
  int64_t plain_lines_ = 4;
  int64_t next_plain_step_;  // the next step a plain line is printed at
  std::string unit_ = "img";
  std::optional<int> gpu_;  // the CUDA device to report, if any
};

}  // namespace kiln::apps
