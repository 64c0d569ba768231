// apps/common: the pieces kiln-lenet and kiln-gpt share, on their own
// (kiln-lenet's use of them is tested in lenet_report_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "app_test_support.h"
#include "apps/common/chart.h"
#include "apps/common/checkpoint_fields.h"
#include "apps/common/jsonl.h"
#include "apps/common/progress.h"
#include "apps/common/run_setup.h"
#include "kiln.h"

namespace kiln::apps {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(AppProgress, UnitAndPlainLinesAreSettable) {
  std::ostringstream out;
  ProgressLine line(out, false, "train", 100, 40);
  line.set_unit("tok");
  EXPECT_EQ(line.format(50, 2.5, 12345.4, 30), "train  step 50/100  loss 2.5000  12345 tok/s  ETA 0:30");
  line.set_plain_lines(10);  // every 10 steps, from the first multiple after step 40
  for (int64_t step = 41; step <= 60; ++step)
    line.update(
        step, [] { return 1.0; }, 100);
  EXPECT_EQ(out.str().find("step 49/100"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("step 50/100"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("step 60/100"), std::string::npos) << out.str();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(error_of([&] { line.set_plain_lines(0); }),
            "ProgressLine: plain lines per stretch must be at least 1, got 0");
}

TEST(AppChart, OnePanelOfTwoSeriesFromStepZero) {
  Chart chart{.x_label = "step", .x_start = 0};
  chart.panels.push_back({.title = "loss",
                          .y_label = "nats",
                          .series = {{"train", kTrainColor, {{0, 4.0}, {100, 2.0}, {200, 1.5}}},
                                     {"validation", kTestColor, {{0, 4.1}, {100, 2.2}, {200, 1.7}}}}});
  const std::string svg = chart_svg(chart);
  EXPECT_NE(svg.find("height=\"290\""), std::string::npos) << svg;  // one panel: 40 + 200 + 50
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<polyline"), 2u);
  EXPECT_EQ(count("<circle"), 6u);
  // x from 0 to 200: step 0 sits on the left edge (70), step 200 on the right (720 - 170).
  EXPECT_NE(svg.find("<circle cx=\"70\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("<circle cx=\"550\""), std::string::npos) << svg;
  for (const char* text : {">train</text>", ">validation</text>", ">step</text>", ">nats</text>", ">loss</text>"}) {
    EXPECT_NE(svg.find(text), std::string::npos) << text;
  }
}

TEST(AppJsonl, AppendsWholeLinesAndRefusesANewline) {
  apps::testing::TempDir dir("kiln-app-jsonl");
  const std::string path = dir / "log.jsonl";
  start_jsonl(path);
  append_jsonl(path, R"({"step":1})");
  append_jsonl(path, R"({"step":2})");
  EXPECT_EQ(apps::testing::read_text(path), "{\"step\":1}\n{\"step\":2}\n");
  EXPECT_NE(error_of([&] { append_jsonl(path, "{\n}"); }).find("a record must be one line"), std::string::npos);
  start_jsonl(path);
  EXPECT_EQ(apps::testing::read_text(path), "");
  const std::string missing = dir / "no/such/log.jsonl";
  EXPECT_EQ(error_of([&] { start_jsonl(missing); }),
            "--log '" + missing + "': cannot create (No such file or directory)");
}

TEST(AppCheckpointFields, FieldsAreCheckedAndNamed) {
  const std::map<std::string, std::string> extra = {
      {"recipe", "lr 0.1"}, {"step", "12"}, {"bad", "12x"}, {"loss", "2.5"}, {"negative", "-1"}};
  const CheckpointFields f(extra, "run.ckpt", "kiln-gpt");
  EXPECT_EQ(f.integer("step", 0, 100), 12);
  EXPECT_EQ(f.number("loss"), 2.5);
  EXPECT_EQ(error_of([&] { f.text("history"); }),
            "--resume 'run.ckpt': not a kiln-gpt checkpoint of this version (no 'history' field in its metadata)");
  EXPECT_EQ(error_of([&] { f.integer("bad", 0, 100); }),
            "--resume 'run.ckpt': checkpoint field 'bad' is '12x'; expected an integer from 0 to 100");
  EXPECT_EQ(error_of([&] { f.integer("step", 0, 10); }),
            "--resume 'run.ckpt': checkpoint field 'step' is '12'; expected an integer from 0 to 10");
  EXPECT_EQ(error_of([&] { f.number("negative"); }),
            "--resume 'run.ckpt': checkpoint field 'negative' is '-1'; expected a finite non-negative number");
  EXPECT_EQ(error_of([&] { f.parsed("loss", [](const std::string&) -> int { KILN_FAIL("not JSON"); }); }),
            "--resume 'run.ckpt': checkpoint field 'loss' is malformed: not JSON");
  f.check_recipe("lr 0.1");
  EXPECT_EQ(error_of([&] { f.check_recipe("lr 0.2"); }),
            "--resume 'run.ckpt': the checkpoint was made with lr 0.1; this run has lr 0.2. Resume with the flags "
            "of the saved run");
  const CheckpointFields g(extra, "run.ckpt", "kiln-gpt", "--checkpoint");
  EXPECT_EQ(error_of([&] { g.integer("bad", 0, 1); }).rfind("--checkpoint 'run.ckpt': ", 0), 0u);
  EXPECT_EQ(exact_text(0.1), "0.1");
  EXPECT_EQ(exact_text(2e-4), "2e-04");
}

TEST(AppRunSetup, OutputsAndDevicesAreCheckedUpFront) {
  apps::testing::TempDir dir("kiln-app-outputs");
  EXPECT_EQ(output_problem("--save", ""), "");
  EXPECT_EQ(output_problem("--save", dir / "run.ckpt"), "");
  EXPECT_FALSE(std::filesystem::exists(dir / "run.ckpt"));  // the probe is gone, nothing else written
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_EQ(output_problem("--plot", dir.path().string()), "--plot '" + dir.path().string() + "' is a directory");
  const std::string missing = dir / "no/such/run.svg";
  EXPECT_EQ(error_of([&] {
              check_outputs({{"--log", dir / "ok.jsonl"}, {"--plot", missing}});
            }),
            "--plot '" + missing + "': cannot create files beside it (No such file or directory)");
  check_device_flag("cpu");
  check_device_flag("cuda:1");
  EXPECT_EQ(error_of([] { check_device_flag("gpu"); }),
            "--device: unknown device 'gpu' (expected cpu, cuda or cuda:N)");
  EXPECT_EQ(autocast_dtype(kCPU), DType::BFloat16);
  EXPECT_EQ(autocast_dtype(cuda_device(0)), DType::Float16);
}

TEST(AppRunSetup, RunningLossSumAddsInFloat64FromItsStart) {
  RunningLossSum sum(1.5);
  EXPECT_EQ(sum.read(), 1.5);
  sum.add(full({}, 0.25, {DType::Float32, kCPU}), 4);
  sum.add(full({}, 0.1, {DType::Float32, kCPU}), 1);
  EXPECT_EQ(sum.read(), 1.5 + 1.0 + static_cast<double>(0.1f));
}

}  // namespace
}  // namespace kiln::apps
