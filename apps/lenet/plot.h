// --plot: an SVG chart of a run, two panels sharing the epoch axis: train
// and test loss above, test accuracy (%) below, each with its axes, ticks,
// grid and legend. Plain SVG 1.1 that a browser opens.
//
//   write_plot_svg("run.svg", history);   // rewritten after every epoch
#pragma once

#include <string>
#include <vector>

#include "apps/lenet/history.h"

namespace kiln::apps::lenet {

// The SVG document for `history` (may be empty: then the axes alone).
std::string plot_svg(const std::vector<EpochRecord>& history);

// Writes plot_svg(history) to `path` atomically: to "<path>.tmp", then a
// rename over `path`, so a browser reloading it never sees half a file.
// Throws kiln::Error naming the file when it cannot be written, and then
// leaves no "<path>.tmp" of its own behind.
void write_plot_svg(const std::string& path, const std::vector<EpochRecord>& history);

// Tick positions from lo to hi at a round step (1, 2 or 5 times a power of
// ten), about `target` of them; lo and hi are first widened to multiples of
// the step.
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace kiln::apps::lenet
