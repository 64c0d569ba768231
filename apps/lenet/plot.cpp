#include "apps/lenet/plot.h"

#include <functional>

namespace kiln::apps::lenet {

namespace {

// One series of `history`: (epoch, value(record)) for every epoch.
ChartSeries series(const char* label, const char* color, const std::vector<EpochRecord>& history,
                   const std::function<double(const EpochRecord&)>& value) {
  ChartSeries s{label, color};
  for (const EpochRecord& r : history) s.points.emplace_back(static_cast<double>(r.epoch), value(r));
  return s;
}

}  // namespace

Chart plot_chart(const std::vector<EpochRecord>& history) {
  Chart chart{.x_label = "epoch", .x_start = 1};
  chart.panels.push_back(
      {.title = "LeNet on CIFAR-10: loss",
       .y_label = "cross-entropy loss",
       .series = {series("train loss", kTrainColor, history, [](const EpochRecord& r) { return r.train_loss; }),
                  series("test loss", kTestColor, history, [](const EpochRecord& r) { return r.test_loss; })}});
  chart.panels.push_back({.title = "test accuracy",
                          .y_label = "accuracy (%)",
                          .series = {series("test accuracy", kAccuracyColor, history,
                                            [](const EpochRecord& r) { return 100.0 * r.test_accuracy; })}});
  return chart;
}

}  // namespace kiln::apps::lenet
