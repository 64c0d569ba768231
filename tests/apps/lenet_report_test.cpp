// kiln-lenet's reporting pieces: the progress line, the JSON records, the
// SVG plot and the per-class table.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "apps/lenet/evaluate.h"
#include "apps/lenet/history.h"
#include "apps/lenet/plot.h"
#include "apps/common/progress.h"
#include "tensor/error.h"

namespace kiln::apps::lenet {
namespace {

TEST(LenetProgress, DurationsAndLine) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(65.4), "1:05");
  EXPECT_EQ(format_duration(3 * 3600 + 7), "3:00:07");
  EXPECT_EQ(format_duration(-1), "?");
  std::ostringstream out;
  ProgressLine line(out, false, "epoch 1/3", 782);
  EXPECT_EQ(line.format(100, 1.23456, 2345.4, 65), "epoch 1/3  step 100/782  loss 1.2346  2345 img/s  ETA 1:05");
}

TEST(LenetProgress, LineEndsWithTheGpuStatusWhenThereIsOne) {
  std::ostringstream out;
  ProgressLine line(out, false, "epoch 1/3", 782);
  cuda::GpuStatus gpu;
  gpu.utilization_percent = 87;
  gpu.memory_used_bytes = uint64_t{1288490189};  // 1.2 GiB
  gpu.memory_total_bytes = uint64_t{85899345920};  // 80 GiB
  EXPECT_EQ(format_gpu_status(gpu), "gpu 87% 1.2/80 GiB");
  EXPECT_EQ(line.format(100, 1.23456, 2345.4, 65, gpu),
            "epoch 1/3  step 100/782  loss 1.2346  2345 img/s  ETA 1:05  gpu 87% 1.2/80 GiB");
  // The trainer's line shows cuda:0 exactly when NVML answers for it; without
  // CUDA in the build, a GPU or a driver, the line is printed without it.
#ifdef KILN_WITH_CUDA
  const bool nvml_answers = cuda::gpu_status(0).has_value();
#else
  const bool nvml_answers = false;
#endif
  line.show_gpu(0);
  line.update(782, [] { return 1.0; }, 100);
  EXPECT_NE(out.str().find("step 782/782"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("  gpu ") != std::string::npos, nvml_answers) << out.str();
}

TEST(LenetProgress, PlainLinesAtQuartersOfTheEpoch) {
  std::ostringstream out;
  ProgressLine line(out, false, "e", 10);
  for (int64_t step = 1; step <= 10; ++step) line.update(step, [] { return 1.0; }, step * 20);
  line.finish();
  // Every ceil(10 / 4) = 3 steps, and the last.
  std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4) << text;
  EXPECT_NE(text.find("step 3/10"), std::string::npos);
  EXPECT_NE(text.find("step 9/10"), std::string::npos);
  EXPECT_NE(text.find("step 10/10"), std::string::npos);
  EXPECT_EQ(text.find("step 4/10"), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(LenetProgress, TerminalLineUpdatesInPlace) {
  std::ostringstream out;
  ProgressLine line(out, true, "e", 2);
  line.update(1, [] { return 2.0; }, 20);
  line.update(2, [] { return 1.0; }, 40);  // the last step is always drawn
  line.finish();
  std::string text = out.str();
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_EQ(text.front(), '\r');
  EXPECT_NE(text.find("step 2/2"), std::string::npos);
  EXPECT_EQ(text.back(), '\r');  // erased before the summary
}

TEST(LenetHistory, JsonRoundTrip) {
  EpochRecord r{.epoch = 3, .train_loss = 1.25, .test_loss = 1.5, .test_accuracy = 0.6125, .lr = 0.01,
                .seconds = 20.5, .images_per_second = 2439.0, .elapsed_seconds = 61.25};
  std::string line = to_json_line(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EpochRecord back = epoch_record_from_json(line);
  EXPECT_EQ(back.epoch, 3);
  EXPECT_EQ(back.test_accuracy, 0.6125);
  EXPECT_EQ(back.images_per_second, 2439.0);
  EXPECT_EQ(back.elapsed_seconds, 61.25);
  std::vector<EpochRecord> history = history_from_json(history_to_json({r, r}));
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].lr, 0.01);
  try {
    epoch_record_from_json("{\"epoch\": 1}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("field 'train_loss' is missing"), std::string::npos) << e.message();
  }
}

TEST(LenetPlot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 2.3, 5), (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5}));
  EXPECT_EQ(nice_ticks(1, 30, 8), (std::vector<double>{0, 5, 10, 15, 20, 25, 30}));
  EXPECT_EQ(nice_ticks(41, 68, 5), (std::vector<double>{40, 50, 60, 70}));
}

// A chart that cannot be renamed into place (its path is a folder) is an
// error naming both files, and its temporary file is gone.
TEST(LenetPlot, AFailedWriteLeavesNoTemporaryFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln-lenet-plot-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "chart.svg" / "inside");
  const std::string path = (dir / "chart.svg").string();
  try {
    write_plot_svg(path, {});
    ADD_FAILURE() << "a chart was renamed over a folder";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--plot '" + path + "': cannot rename '" + path + ".tmp' over it"), std::string::npos)
        << e.message();
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(LenetPlot, SvgHasPanelsLegendAndPoints) {
  std::vector<EpochRecord> history;
  for (int64_t e = 1; e <= 3; ++e) {
    history.push_back({.epoch = e, .train_loss = 2.0 / static_cast<double>(e), .test_loss = 2.1 / static_cast<double>(e),
                       .test_accuracy = 0.3 + 0.1 * static_cast<double>(e), .lr = 0.01, .seconds = 1,
                       .images_per_second = 100});
  }
  std::string svg = plot_svg(history);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  for (const char* label : {"train loss", "test loss", "test accuracy", "epoch", "accuracy (%)"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<polyline"), 3u);  // train loss, test loss, accuracy
  EXPECT_EQ(count("<circle"), 9u);    // three points each
  EXPECT_EQ(count("<text"), count("</text>"));
  // No history yet: axes and legend only, still a whole document.
  std::string empty = plot_svg({});
  EXPECT_EQ(empty.find("<polyline"), std::string::npos);
  EXPECT_NE(empty.find("</svg>"), std::string::npos);
}

TEST(LenetEvaluate, ClassTable) {
  Evaluation e;
  e.correct = {3, 0};
  e.total = {4, 0};
  e.images = 4;
  e.accuracy = 0.75;
  std::string table = format_class_table(e, {"cat", "dog"});
  EXPECT_EQ(table,
            "class   correct/images  accuracy\n"
            "--------------------------------\n"
            "cat                3/4    75.00%\n"
            "dog                0/0         -\n"
            "all                3/4    75.00%\n");
}

}  // namespace
}  // namespace kiln::apps::lenet
