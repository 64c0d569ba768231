// kiln-checkpoint (apps/tools/checkpoint_tool.h) on a checkpoint a test
// writes: inspect, consolidate and reshard in-process, the program's exit
// status, and every kind of bad input answered by a message naming the
// file and status 1.
#include "apps/tools/checkpoint_tool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app_test_support.h"
#include "distributed/checkpoint/sharded_checkpoint.h"
#include "tensor/factory.h"
#include "tensor/random.h"
#include "tensor/safetensors.h"

namespace kiln::apps::testing {
namespace {

namespace ckpt = distributed::checkpoint;
namespace fs = std::filesystem;

struct ToolResult {
  int status;
  std::string out;
  std::string err;
};

ToolResult tool(std::vector<std::string> args) {
  args.insert(args.begin(), "kiln-checkpoint");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int status = checkpoint_tool::run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {status, out.str(), err.str()};
}

TensorDict tensors() {
  Generator gen;
  gen.manual_seed(11);
  TensorDict t;
  t.insert("encoder.weight", randn({7, 5}, DType::Float64, &gen));
  t.insert("encoder.bias", randn({5}, DType::Float32, &gen));
  t.insert("step", scalar_tensor(int64_t{3}, DType::Int64));
  return t;
}

// A one-process checkpoint holding each tensor of more than one element in two pieces.
std::string write_checkpoint(const TempDir& tmp) {
  std::vector<ckpt::ShardPiece> pieces;
  for (const auto& [name, t] : tensors()) {
    const int64_t half = t.numel() / 2;
    const Tensor flat = t.reshape({-1});
    if (half > 0) pieces.push_back({name, t.shape(), t.dtype(), 0, flat.narrow(0, 0, half)});
    pieces.push_back({name, t.shape(), t.dtype(), half, flat.narrow(0, half, t.numel() - half)});
  }
  const std::string dir = tmp / "ckpt";
  ckpt::save_sharded(dir, pieces, {{"step", "3"}, {"recipe", "tiny"}});
  return dir;
}

TEST(CheckpointTool, InspectsAShardedCheckpoint) {
  TempDir tmp("kiln-checkpoint-inspect");
  const std::string dir = write_checkpoint(tmp);
  const ToolResult r = tool({"inspect", dir});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* part : {"sharded checkpoint ",
                           "world size 1, id ",
                           "3 tensors, 41 elements, 308 bytes of data in 1 files",
                           "metadata:",
                           "recipe: tiny",
                           "step: 3",
                           "encoder.weight",
                           "float64",
                           "[7, 5]",
                           "35 elements",
                           "280 bytes",
                           "2 pieces",
                           "encoder.bias",
                           "float32",
                           "[5]",
                           "step",
                           "int64",
                           "[]",
                           "rank-0-of-1.safetensors",
                           "5 pieces"})
    EXPECT_TRUE(contains(r.out, part)) << "no '" << part << "' in:\n" << r.out;
  const ToolResult listed = tool({"inspect", dir, "--pieces", "--verify"});
  ASSERT_EQ(listed.status, 0) << listed.err;
  for (const char* part : {"rank 0", "[0, 17)", "encoder.weight@0", "[17, 35)", "encoder.weight@17", "step@0"})
    EXPECT_TRUE(contains(listed.out, part)) << "no '" << part << "' in:\n" << listed.out;
  EXPECT_TRUE(contains(listed.out, "verified: every piece of every file read and its checksum checked")) << listed.out;
}

TEST(CheckpointTool, ReshardsConsolidatesAndInspectsFiles) {
  TempDir tmp("kiln-checkpoint-reshard");
  const std::string dir = write_checkpoint(tmp), out_dir = tmp / "as-three", file = tmp / "whole.safetensors";
  const ToolResult resharded = tool({"reshard", dir, out_dir, "--world-size", "3"});
  ASSERT_EQ(resharded.status, 0) << resharded.err;
  EXPECT_TRUE(contains(resharded.out, "wrote " + out_dir + ": 3 tensors as 3 ranks would have saved them"));
  const ToolResult inspected = tool({"inspect", out_dir});
  EXPECT_TRUE(contains(inspected.out, "world size 3")) << inspected.out;
  EXPECT_TRUE(contains(inspected.out, "rank-2-of-3.safetensors")) << inspected.out;

  const ToolResult consolidated = tool({"consolidate", out_dir, file});
  ASSERT_EQ(consolidated.status, 0) << consolidated.err;
  EXPECT_TRUE(contains(consolidated.out, "wrote 3 tensors of " + out_dir + " to " + file));
  std::map<std::string, std::string> metadata;
  const TensorDict loaded = load_safetensors(file, &metadata);
  const TensorDict expected = tensors();
  ASSERT_EQ(loaded.keys(), expected.keys());
  for (const auto& [name, t] : expected) {
    EXPECT_EQ(loaded.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(loaded.at(name).data_ptr(), t.data_ptr(), t.nbytes()), 0) << name;
  }
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"recipe", "tiny"}, {"step", "3"}}));

  const ToolResult rank_file = tool({"inspect", out_dir + "/rank-1-of-3.safetensors", "--verify"});
  ASSERT_EQ(rank_file.status, 0) << rank_file.err;
  for (const char* part : {"safetensors file ", "rank 1 of 3 of sharded checkpoint ", "encoder.weight@12", "[12]",
                           "of 'encoder.weight' [7, 5] from element 12", "verified: every tensor read"})
    EXPECT_TRUE(contains(rank_file.out, part)) << "no '" << part << "' in:\n" << rank_file.out;
  const ToolResult whole = tool({"inspect", file});
  EXPECT_TRUE(contains(whole.out, "3 tensors")) << whole.out;
  EXPECT_TRUE(contains(whole.out, "recipe: tiny")) << whole.out;
}

TEST(CheckpointTool, BadInputIsAMessageNamingTheFileAndStatusOne) {
  TempDir tmp("kiln-checkpoint-bad");
  const std::string dir = write_checkpoint(tmp);
  auto expect_failure = [](const std::vector<std::string>& args, const std::string& part) {
    const ToolResult r = tool(args);
    EXPECT_EQ(r.status, 1) << args[0];
    EXPECT_TRUE(contains(r.err, part)) << "no '" << part << "' in: " << r.err;
  };
  expect_failure({"inspect", tmp / "missing"}, "kiln-checkpoint: inspect: '" + tmp / "missing" + "' does not exist");
  fs::create_directories(tmp / "empty");
  expect_failure({"inspect", tmp / "empty"},
                 "kiln-checkpoint: read_index: '" + tmp / "empty" + "' is not a sharded checkpoint");
  std::ofstream(tmp / "text.safetensors") << "not a safetensors file";
  expect_failure({"inspect", tmp / "text.safetensors"}, "'" + tmp / "text.safetensors" + "'");
  expect_failure({"consolidate", dir, tmp / "no/such/dir/out.safetensors"}, tmp / "no/such/dir/out.safetensors");
  expect_failure({"reshard", dir, tmp / "out", "--world-size", "0"}, "--world-size");
  expect_failure({"reshard", dir, tmp / "out"}, "--world-size is required");
  expect_failure({"consolidate", dir}, "OUT is required");
  expect_failure({"frobnicate"}, "A subcommand is required");
  expect_failure({}, "A subcommand is required");
  // A flipped byte: inspect reads only headers; --verify finds it.
  const std::string file = dir + "/rank-0-of-1.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 1);
    f.seekp(-3, std::ios::end);
    f.put(c);
  }
  EXPECT_EQ(tool({"inspect", dir}).status, 0);
  expect_failure({"inspect", dir, "--verify"}, "load_safetensors: '" + file + "': tensor '");
  EXPECT_EQ(tool({"--help"}).status, 0);
}

TEST(CheckpointTool, TheProgramExitsWithTheStatus) {
  TempDir tmp("kiln-checkpoint-program");
  const std::string dir = write_checkpoint(tmp);
  const ProcessResult good = run_program(KILN_CHECKPOINT_EXE, {"inspect", dir}, tmp / "err.txt");
  EXPECT_EQ(good.exit_code, 0) << read_text(tmp / "err.txt");
  EXPECT_TRUE(contains(good.out, "encoder.weight")) << good.out;
  const ProcessResult bad =
      run_program(KILN_CHECKPOINT_EXE, {"consolidate", tmp / "missing", tmp / "x"}, tmp / "err.txt");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(
      contains(read_text(tmp / "err.txt"), "kiln-checkpoint: read_index: no checkpoint at '" + tmp / "missing" + "'"));
}

}  // namespace
}  // namespace kiln::apps::testing
