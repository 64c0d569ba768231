// --plot: kiln-lenet's SVG chart (apps/common/chart.h), two panels sharing
// the epoch axis: train and test loss above, test accuracy (%) below.
//
//   write_plot_svg("run.svg", history);   // rewritten after every epoch
#pragma once

#include <string>
#include <vector>

#include "apps/common/chart.h"
#include "apps/lenet/history.h"

namespace kiln::apps::lenet {

// The chart of `history` (may be empty: then the axes alone).
Chart plot_chart(const std::vector<EpochRecord>& history);
// Its SVG document.
inline std::string plot_svg(const std::vector<EpochRecord>& history) { return chart_svg(plot_chart(history)); }

// Writes plot_svg(history) to `path` atomically (write_svg_file); throws
// kiln::Error naming the file when it cannot be written.
inline void write_plot_svg(const std::string& path, const std::vector<EpochRecord>& history) {
  write_chart_svg(path, plot_chart(history));
}

}  // namespace kiln::apps::lenet
