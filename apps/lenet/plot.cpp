#include "apps/lenet/plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "tensor/error.h"

namespace kiln::apps::lenet {

namespace {

constexpr double kWidth = 720, kHeight = 560;
constexpr double kLeft = 70, kRight = 170;  // the legend sits in the right margin
constexpr double kPanelHeight = 200, kTop1 = 40, kTop2 = 310;
const char* kTrainColor = "#1f77b4";
const char* kTestColor = "#ff7f0e";
const char* kAccuracyColor = "#2ca02c";

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", v);
  return buffer;
}

// One panel: a frame, y ticks with grid lines, x ticks at epochs, and one
// polyline (with dots) per series.
struct Series {
  const char* label;
  const char* color;
  std::function<double(const EpochRecord&)> value;
};

void panel(std::ostringstream& svg, const std::vector<EpochRecord>& history, double top, const std::string& title,
           const std::string& y_label, const std::vector<Series>& series, double y_min_floor) {
  const double plot_width = kWidth - kLeft - kRight;
  double lo = y_min_floor, hi = y_min_floor + 1;
  if (!history.empty()) {
    lo = INFINITY, hi = -INFINITY;
    for (const EpochRecord& r : history) {
      for (const Series& s : series) lo = std::min(lo, s.value(r)), hi = std::max(hi, s.value(r));
    }
    lo = std::max(lo, y_min_floor);
    if (!(hi > lo)) hi = lo + 1;
  }
  std::vector<double> y_ticks = nice_ticks(lo, hi, 5);
  lo = y_ticks.front(), hi = y_ticks.back();
  const double last_epoch = history.empty() ? 1.0 : std::max<double>(1.0, static_cast<double>(history.back().epoch));
  std::vector<double> x_ticks = nice_ticks(1, last_epoch, 8);
  const double x_lo = 1, x_hi = std::max(x_ticks.back(), 2.0);
  auto x = [&](double epoch) { return kLeft + (epoch - x_lo) / (x_hi - x_lo) * plot_width; };
  auto y = [&](double v) { return top + kPanelHeight - (v - lo) / (hi - lo) * kPanelHeight; };

  svg << "<text x=\"" << kLeft << "\" y=\"" << top - 12 << "\" font-weight=\"bold\">" << title << "</text>\n";
  for (double t : y_ticks) {
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << number(y(t)) << "\" x2=\"" << kLeft + plot_width << "\" y2=\""
        << number(y(t)) << "\" stroke=\"#dddddd\"/>\n";
    svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << number(y(t) + 4) << "\" text-anchor=\"end\">" << number(t)
        << "</text>\n";
  }
  for (double t : x_ticks) {
    if (t < x_lo || t > x_hi) continue;
    svg << "<line x1=\"" << number(x(t)) << "\" y1=\"" << top + kPanelHeight << "\" x2=\"" << number(x(t))
        << "\" y2=\"" << top + kPanelHeight + 5 << "\" stroke=\"black\"/>\n";
    svg << "<text x=\"" << number(x(t)) << "\" y=\"" << top + kPanelHeight + 18 << "\" text-anchor=\"middle\">"
        << number(t) << "</text>\n";
  }
  svg << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << plot_width << "\" height=\"" << kPanelHeight
      << "\" fill=\"none\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << kLeft + plot_width / 2 << "\" y=\"" << top + kPanelHeight + 34
      << "\" text-anchor=\"middle\">epoch</text>\n";
  svg << "<text transform=\"translate(" << kLeft - 48 << "," << top + kPanelHeight / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << y_label << "</text>\n";

  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    if (!history.empty()) {
      svg << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" points=\"";
      for (const EpochRecord& r : history) {
        svg << number(x(static_cast<double>(r.epoch))) << "," << number(y(s.value(r))) << " ";
      }
      svg << "\"/>\n";
      for (const EpochRecord& r : history) {
        svg << "<circle cx=\"" << number(x(static_cast<double>(r.epoch))) << "\" cy=\"" << number(y(s.value(r)))
            << "\" r=\"3\" fill=\"" << s.color << "\"/>\n";
      }
    }
    const double legend_y = top + 10 + 20 * static_cast<double>(i);
    const double legend_x = kWidth - kRight + 15;
    svg << "<line x1=\"" << legend_x << "\" y1=\"" << legend_y << "\" x2=\"" << legend_x + 24 << "\" y2=\""
        << legend_y << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"/>\n";
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

std::string plot_svg(const std::vector<EpochRecord>& history) {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  panel(svg, history, kTop1, "LeNet on CIFAR-10: loss", "cross-entropy loss",
        {{"train loss", kTrainColor, [](const EpochRecord& r) { return r.train_loss; }},
         {"test loss", kTestColor, [](const EpochRecord& r) { return r.test_loss; }}},
        0.0);
  panel(svg, history, kTop2, "test accuracy", "accuracy (%)",
        {{"test accuracy", kAccuracyColor, [](const EpochRecord& r) { return 100.0 * r.test_accuracy; }}}, 0.0);
  svg << "</svg>\n";
  return svg.str();
}

void write_plot_svg(const std::string& path, const std::vector<EpochRecord>& history) {
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
    out << plot_svg(history);
    out.flush();
    if (!out.good()) fail("write to '" + tmp + "' failed (" + std::strerror(errno) + ")");
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) fail("cannot rename '" + tmp + "' over it (" + error.message() + ")");
}

}  // namespace kiln::apps::lenet
