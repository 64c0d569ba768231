#include "apps/common/chart.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tensor/error.h"

namespace kiln::apps {

namespace {

constexpr double kWidth = 720;
constexpr double kLeft = 70, kRight = 170;  // the legend sits in the right margin
constexpr double kPanelHeight = 200;
constexpr double kTop = 40;          // of the first panel
constexpr double kPanelPitch = 270;  // from one panel's top to the next's
constexpr double kBottom = 50;       // below the last panel: its x tick labels and axis label

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", v);
  return buffer;
}

// The x range every panel shares: from x_start to the last point, widened to ticks.
struct XAxis {
  std::vector<double> ticks;
  double lo, hi;
};

XAxis x_axis(const Chart& chart) {
  double last = chart.x_start;
  for (const ChartPanel& p : chart.panels) {
    for (const ChartSeries& s : p.series) {
      if (!s.points.empty()) last = std::max(last, s.points.back().first);
    }
  }
  XAxis axis;
  axis.ticks = nice_ticks(chart.x_start, last, 8);
  axis.lo = chart.x_start;
  axis.hi = std::max(axis.ticks.back(), chart.x_start + 1);
  return axis;
}

// One panel: a frame, y ticks with grid lines, x ticks, and one polyline
// (with dots) per series.
void panel(std::ostringstream& svg, const ChartPanel& p, double top, const XAxis& xa, const std::string& x_label) {
  const double plot_width = kWidth - kLeft - kRight;
  double lo = p.y_floor, hi = p.y_floor + 1;
  bool any = false;
  for (const ChartSeries& s : p.series) any = any || !s.points.empty();
  if (any) {
    lo = INFINITY, hi = -INFINITY;
    for (const ChartSeries& s : p.series) {
      for (const auto& [px, py] : s.points) {
        if (std::isfinite(py)) lo = std::min(lo, py), hi = std::max(hi, py);
      }
    }
    lo = std::max(lo, p.y_floor);
    if (!(hi > lo)) hi = lo + 1;
  }
  std::vector<double> y_ticks = nice_ticks(lo, hi, 5);
  lo = y_ticks.front(), hi = y_ticks.back();
  auto x = [&](double v) { return kLeft + (v - xa.lo) / (xa.hi - xa.lo) * plot_width; };
  auto y = [&](double v) { return top + kPanelHeight - (v - lo) / (hi - lo) * kPanelHeight; };

  svg << "<text x=\"" << kLeft << "\" y=\"" << top - 12 << "\" font-weight=\"bold\">" << p.title << "</text>\n";
  for (double t : y_ticks) {
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << number(y(t)) << "\" x2=\"" << kLeft + plot_width << "\" y2=\""
        << number(y(t)) << "\" stroke=\"#dddddd\"/>\n";
    svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << number(y(t) + 4) << "\" text-anchor=\"end\">" << number(t)
        << "</text>\n";
  }
  for (double t : xa.ticks) {
    if (t < xa.lo || t > xa.hi) continue;
    svg << "<line x1=\"" << number(x(t)) << "\" y1=\"" << top + kPanelHeight << "\" x2=\"" << number(x(t)) << "\" y2=\""
        << top + kPanelHeight + 5 << "\" stroke=\"black\"/>\n";
    svg << "<text x=\"" << number(x(t)) << "\" y=\"" << top + kPanelHeight + 18 << "\" text-anchor=\"middle\">"
        << number(t) << "</text>\n";
  }
  svg << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << plot_width << "\" height=\"" << kPanelHeight
      << "\" fill=\"none\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << kLeft + plot_width / 2 << "\" y=\"" << top + kPanelHeight + 34 << "\" text-anchor=\"middle\">"
      << x_label << "</text>\n";
  svg << "<text transform=\"translate(" << kLeft - 48 << "," << top + kPanelHeight / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << p.y_label << "</text>\n";

  for (size_t i = 0; i < p.series.size(); ++i) {
    const ChartSeries& s = p.series[i];
    if (!s.points.empty()) {
      svg << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" points=\"";
      for (const auto& [px, py] : s.points) svg << number(x(px)) << "," << number(y(py)) << " ";
      svg << "\"/>\n";
      for (const auto& [px, py] : s.points) {
        svg << "<circle cx=\"" << number(x(px)) << "\" cy=\"" << number(y(py)) << "\" r=\"3\" fill=\"" << s.color
            << "\"/>\n";
      }
    }
    const double legend_y = top + 10 + 20 * static_cast<double>(i);
    const double legend_x = kWidth - kRight + 15;
    svg << "<line x1=\"" << legend_x << "\" y1=\"" << legend_y << "\" x2=\"" << legend_x + 24 << "\" y2=\"" << legend_y
        << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"/>\n";
    svg << "<text x=\"" << legend_x + 30 << "\" y=\"" << legend_y + 4 << "\">" << s.label << "</text>\n";
  }
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  const double first = std::floor(lo / step + 1e-9) * step;
  const double last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (double t = first; t <= last + step * 1e-6; t += step) ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string chart_svg(const Chart& chart) {
  const double panels = static_cast<double>(std::max<size_t>(1, chart.panels.size()));
  const double height = kTop + (panels - 1) * kPanelPitch + kPanelHeight + kBottom;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << kWidth << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const XAxis xa = x_axis(chart);
  for (size_t i = 0; i < chart.panels.size(); ++i) {
    panel(svg, chart.panels[i], kTop + kPanelPitch * static_cast<double>(i), xa, chart.x_label);
  }
  svg << "</svg>\n";
  return svg.str();
}

void write_svg_file(const std::string& path, const std::string& svg) {
  const std::string tmp = path + ".tmp";
  // A run that goes on after a failed chart (a warning) leaves no half-written file behind.
  auto fail = [&](const std::string& what) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    KILN_FAIL("--plot '", path, "': ", what);
  };
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out.good()) KILN_FAIL("--plot '", path, "': cannot create '", tmp, "' (", std::strerror(errno), ")");
    out << svg;
    out.flush();
    if (!out.good()) fail("write to '" + tmp + "' failed (" + std::strerror(errno) + ")");
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) fail("cannot rename '" + tmp + "' over it (" + error.message() + ")");
}

}  // namespace kiln::apps
