// The best-of-samples timer of the int8 benchmarks (bench/qgemm.cpp,
// bench/qconv.cpp): calls fn for about sample_seconds to learn how many
// calls make a sample (which also warms caches and the thread pool), then
// times 30 such samples and returns the best one's seconds per call. On a
// shared machine the best short sample is the one most likely undisturbed.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

namespace kiln::bench {

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double time_best(const std::function<void()>& fn, double sample_seconds) {
  const double start = seconds_now();
  int reps = 0;
  while (seconds_now() - start < sample_seconds || reps < 1) {
    fn();
    ++reps;
  }
  double best = 1e30;
  for (int s = 0; s < 30; ++s) {
    const double t0 = seconds_now();
    for (int r = 0; r < reps; ++r) fn();
    best = std::min(best, (seconds_now() - t0) / reps);
  }
  return best;
}

}  // namespace kiln::bench
