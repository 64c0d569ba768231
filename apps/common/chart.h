// --plot: an SVG chart of a run, one or more panels stacked over a shared x
// axis (epochs, steps), each with its axes, ticks, grid, legend and one
// line per named series. Plain SVG 1.1 that a browser opens.
//
//   Chart chart{.x_label = "step", .x_start = 0};
//   chart.panels.push_back({.title = "loss", .y_label = "cross-entropy loss",
//                           .series = {{"train", "#1f77b4", {{0, 4.2}, {250, 2.1}}},
//                                      {"validation", "#ff7f0e", {{0, 4.2}, {250, 2.2}}}}});
//   write_chart_svg("run.svg", chart);   // rewritten after every evaluation
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln::apps {

// The colours the apps give their series (matplotlib's first three).
inline constexpr const char* kTrainColor = "#1f77b4";
inline constexpr const char* kTestColor = "#ff7f0e";
inline constexpr const char* kAccuracyColor = "#2ca02c";

struct ChartSeries {
  std::string label;                                   // in the legend
  std::string color;                                   // an SVG colour
  std::vector<std::pair<double, double>> points = {};  // (x, y), in increasing x
};

struct ChartPanel {
  std::string title;
  std::string y_label;
  std::vector<ChartSeries> series;
  // The y axis starts at or above this (losses and accuracies are >= 0);
  // with no points at all it spans [y_floor, y_floor + 1].
  double y_floor = 0;
};

struct Chart {
  std::string x_label = "step";
  // The left end of the x axis (1 for epochs, 0 for steps counted from the
  // initial model); the right end is the last point's x rounded up to a tick.
  double x_start = 0;
  std::vector<ChartPanel> panels = {};
};

// The SVG document of `chart`; series may be empty (then the axes and the
// legend alone).
std::string chart_svg(const Chart& chart);

// Writes `svg` to `path` atomically: to "<path>.tmp", then a rename over
// `path`, so a browser reloading it never sees half a file. Throws
// kiln::Error naming the file ("--plot '<path>': ...") when it cannot be
// written, and then leaves no "<path>.tmp" of its own behind.
void write_svg_file(const std::string& path, const std::string& svg);
inline void write_chart_svg(const std::string& path, const Chart& chart) { write_svg_file(path, chart_svg(chart)); }

// Tick positions from lo to hi at a round step (1, 2 or 5 times a power of
// ten), about `target` of them; lo and hi are first widened to multiples of
// the step.
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace kiln::apps
