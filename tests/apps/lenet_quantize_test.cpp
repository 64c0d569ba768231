// kiln-lenet --quantize: the flags, their errors, and a tiny report on a
// few images of the real data (skipped without it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "apps/lenet/models.h"
#include "apps/lenet/options.h"
#include "apps/lenet/quantize.h"
#include "tensor/random.h"
#include "tensor/safetensors.h"

namespace kiln::apps::lenet {
namespace {

TEST(LenetQuantizeFlags, AnAvx2CpuIsToldOfReduceRange) {
  const std::vector<std::string> both{"static", "qat"};
  EXPECT_NE(reduce_range_hint("avx2", false, both).find("--reduce-range (7-bit activations)"), std::string::npos);
  EXPECT_NE(reduce_range_hint("avx2", false, {"qat"}), "");
  EXPECT_EQ(reduce_range_hint("avx2", true, both), "");            // asked for already
  EXPECT_EQ(reduce_range_hint("avx2", false, {"dynamic"}), "");    // quantized per batch, no grid to narrow
  EXPECT_EQ(reduce_range_hint("avx512vnni", false, both), "");     // VNNI multiplies bytes anyway
  EXPECT_EQ(reduce_range_hint("scalar", false, both), "");
}

TEST(LenetQuantizeFlags, ParseAndCheck) {
  CommandLine ok = parse_command_line(std::vector<std::string>{"kiln-lenet", "--weights", "w.safetensors", "--quantize", "static,qat"});
  ASSERT_TRUE(ok.options.has_value());
  EXPECT_EQ(ok.options->quantize, (std::vector<std::string>{"static", "qat"}));
  try {
    parse_command_line(std::vector<std::string>{"kiln-lenet", "--weights", "w.safetensors", "--quantize", "int4"});
    FAIL() << "--quantize int4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--quantize: unknown mode 'int4'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_command_line(std::vector<std::string>{"kiln-lenet", "--quantize", "static"}), Error);
  try {
    parse_command_line(std::vector<std::string>{"kiln-lenet", "--weights", "w.safetensors", "--eval-only",
                                                "--sensitivity"});
    FAIL() << "--sensitivity without --quantize was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sensitivity goes with --quantize"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_command_line(std::vector<std::string>{"kiln-lenet", "--weights", "w.safetensors", "--quantize",
                                                           "static", "--ddp"}),
               Error);
  const CommandLine seven = parse_command_line(
      std::vector<std::string>{"kiln-lenet", "--weights", "w.safetensors", "--quantize", "static", "--reduce-range"});
  ASSERT_TRUE(seven.options.has_value());
  EXPECT_TRUE(seven.options->reduce_range);
  try {
    parse_command_line(std::vector<std::string>{"kiln-lenet", "--weights", "w.safetensors", "--eval-only",
                                                "--reduce-range"});
    FAIL() << "--reduce-range without --quantize was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--reduce-range goes with --quantize"), std::string::npos) << e.what();
  }
}

TEST(LenetQuantizeReport, EveryModeOnAFewImages) {
  const char* data = std::getenv("KILN_DATA");
  std::filesystem::path archive = data ? std::filesystem::path(data) / "cifar10-jpeg.tar.gz" : "";
  if (!data || !std::filesystem::exists(archive)) GTEST_SKIP() << "KILN_DATA with cifar10-jpeg.tar.gz is not set";
  manual_seed(3);
  auto model = make_model("lenet");
  auto path = std::filesystem::temp_directory_path() / "kiln_quantize_report_lenet.safetensors";
  save_safetensors(path.string(), model->state_dict());
  QuantizeReportOptions o{.model = "lenet", .weights = path.string(), .data = archive.string(),
                          .modes = {"dynamic", "static", "qat"}, .calib_images = 64, .test_images = 128,
                          .qat_epochs = 1, .qat_images = 128, .warmup = 1, .b1_runs = 2, .b64_runs = 2,
                          .min_seconds = 0, .sensitivity = true};
  std::ostringstream log;
  QuantizeReport report = quantization_report(o, log);
  ASSERT_EQ(report.rows.size(), 4u);
  EXPECT_EQ(report.rows[0].mode, "float32");
  EXPECT_EQ(report.rows[0].bytes, 62006 * 4);
  for (const auto& row : report.rows) {
    EXPECT_GE(row.accuracy, 0.0);
    EXPECT_LE(row.accuracy, 100.0);
    EXPECT_GT(row.b1_ms, 0.0);
    EXPECT_GT(row.b64_ms, 0.0);
    if (row.mode == "static" || row.mode == "qat") {
      EXPECT_LE(row.bytes, 0.26 * report.rows[0].bytes);
    }
  }
  EXPECT_NE(format_quantization_table(report).find("static"), std::string::npos);
  // One sensitivity row per quantizable layer (LeNet's 2 convolutions and 3
  // linears), each an accuracy; the table lists them all.
  ASSERT_EQ(report.sensitivity.size(), 5u);
  const std::string table = format_sensitivity_table(report);
  for (const auto& row : report.sensitivity) {
    EXPECT_GE(row.metric, 0.0);
    EXPECT_LE(row.metric, 100.0);
    EXPECT_NE(table.find(row.layer), std::string::npos) << table;
  }
  EXPECT_EQ(quant_line("lenet", report.rows[2]).rfind("quant model=lenet runtime=kiln mode=static acc=", 0), 0u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kiln::apps::lenet
