// kiln-pipeline-schedule: the table, the bubble against its formula, the
// SVG picture, and its errors.
#include "apps/tools/schedule_tool.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::apps::schedule_tool {
namespace {

struct Result {
  int status;
  std::string out, err;
};

Result run_tool(std::vector<std::string> args) {
  args.insert(args.begin(), "kiln-pipeline-schedule");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int status = run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {status, out.str(), err.str()};
}

TEST(ScheduleTool, PrintsTheTableAndTheBubbleBesideItsFormula) {
  const Result r = run_tool({"--schedule", "1f1b", "--ranks", "4", "--micro-batches", "8"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("pipeline schedule '1f1b': 4 ranks, 4 stages, 8 micro-batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 3"), std::string::npos);
  EXPECT_NE(r.out.find("SEND_B s3 m7"), std::string::npos);
  // (p-1)/(m+p-1) = 3/11; 1F1B holds 4, 3, 2, 1 micro-batches.
  EXPECT_NE(r.out.find("bubble 0.2727 (formula 0.2727), makespan 33, peak micro-batches in flight per rank: 4 3 2 1"),
            std::string::npos)
      << r.out;
}

TEST(ScheduleTool, InterleavedAndCustomCosts) {
  const Result r = run_tool({"--schedule", "interleaved", "--ranks", "2", "--micro-batches", "4", "--virtual-stages",
                             "2", "--costs", "1,1,1,1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 ranks, 4 stages, 4 micro-batches"), std::string::npos) << r.out;
}

TEST(ScheduleTool, WritesTheTimelinePicture) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln-schedule-tool-test";
  std::filesystem::create_directories(dir);
  const std::string svg = (dir / "zb.svg").string();
  const Result r = run_tool({"--schedule", "zero-bubble", "--ranks", "3", "--micro-batches", "6", "--svg", svg});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("<svg", 0), 0u);
  size_t rects = 0;
  for (size_t at = text.str().find("<rect"); at != std::string::npos; at = text.str().find("<rect", at + 1)) ++rects;
  EXPECT_EQ(rects, 3u * 6u * 3u);  // F, I and W for each rank and micro-batch
  std::filesystem::remove_all(dir);
}

TEST(ScheduleTool, ErrorsNameWhatIsWrong) {
  Result r = run_tool({"--schedule", "pipedream"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("unknown schedule 'pipedream'"), std::string::npos) << r.err;
  r = run_tool({"--schedule", "interleaved", "--ranks", "4", "--micro-batches", "6", "--virtual-stages", "2"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("must be a multiple of the number of ranks (4)"), std::string::npos) << r.err;
  r = run_tool({"--costs", "1,2,x,1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--costs: 'x' is not a positive number"), std::string::npos) << r.err;
  r = run_tool({"--svg", "/nonexistent-folder/out.svg"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent-folder/out.svg"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kiln::apps::schedule_tool
