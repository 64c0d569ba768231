// Sharded checkpoints (distributed/checkpoint/sharded_checkpoint.h): tensors
// saved in uneven pieces by N ranks come back bit for bit on M ranks and in
// one process; every broken file or index is an error naming it; a failed
// save leaves the old checkpoint as it was.
#include "distributed/checkpoint/sharded_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "multi_process.h"
#include "tensor/factory.h"
#include "tensor/random.h"
#include "tensor/safetensors.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::distributed::testing {
namespace {

using checkpoint::Index;
using checkpoint::Range;
using checkpoint::ShardPiece;
using checkpoint::TensorInfo;
namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kTimeout(20000);

// Tensors of every kind a checkpoint meets: several dtypes, a 0-dim scalar,
// an empty tensor, and float64 values whose bits a conversion would change
// (-0.0, NaN, infinities, a subnormal).
TensorDict reference_tensors(uint64_t seed = 2024) {
  Generator gen;
  gen.manual_seed(seed);
  TensorDict t;
  t.insert("embed.weight", randn({7, 5}, DType::Float64, &gen));
  t.insert("fc.bias", randn({13}, DType::Float32, &gen));
  t.insert("norm.weight", randn({9}, DType::Float32, &gen).to(DType::BFloat16));
  t.insert("steps", scalar_tensor(static_cast<int64_t>(seed), DType::Int64));
  t.insert("mask", randint(0, 2, {3, 3}, DType::Int64, &gen).to(DType::Bool));
  t.insert("empty", zeros({0, 4}, DType::Float32));
  const double inf = std::numeric_limits<double>::infinity();
  t.insert("specials", from_vector<double>({-0.0, std::numeric_limits<double>::quiet_NaN(), inf, -inf, 5e-324}, {5}));
  return t;
}

ShardPiece piece_of(const std::string& name, const Tensor& t, int64_t begin, int64_t end) {
  return {name, t.shape(), t.dtype(), begin, t.reshape({-1}).narrow(0, begin, end - begin)};
}

// Rank `rank` of `world`'s pieces: uneven runs (rank r's share grows with
// (r + the name's length) % 3), and "embed.weight" in chunks of 4 dealt
// round-robin, so that a rank holds several pieces of one tensor. Every rank
// has a piece (perhaps of 0 elements) of every tensor, so rank 0 declares
// them all, in the reference's order.
std::vector<ShardPiece> pieces_for(const TensorDict& ref, int rank, int world) {
  std::vector<ShardPiece> pieces;
  for (const auto& [name, t] : ref) {
    const int64_t n = t.numel();
    if (name == "embed.weight") {
      for (int64_t begin = 4 * rank; begin < n; begin += 4 * world)
        pieces.push_back(piece_of(name, t, begin, std::min(begin + 4, n)));
      continue;
    }
    std::vector<int64_t> weight(world);
    int64_t total = 0;
    for (int r = 0; r < world; ++r) total += weight[r] = (r + static_cast<int64_t>(name.size())) % 3 + 1;
    int64_t before = 0;
    for (int r = 0; r < rank; ++r) before += weight[r];
    pieces.push_back(piece_of(name, t, n * before / total, n * (before + weight[rank]) / total));
  }
  return pieces;
}

// Every piece of every rank, for a single-process save: of the pieces at
// one offset of one tensor (empty ones declaring it, and the one holding
// elements there), the longest.
std::vector<ShardPiece> all_pieces(const TensorDict& ref, int world) {
  std::vector<ShardPiece> pieces;
  std::map<std::pair<std::string, int64_t>, size_t> at;
  for (int r = 0; r < world; ++r) {
    for (ShardPiece& p : pieces_for(ref, r, world)) {
      auto [it, added] = at.emplace(std::pair(p.name, p.offset), pieces.size());
      if (added) {
        pieces.push_back(std::move(p));
      } else if (p.data.numel() > pieces[it->second].data.numel()) {
        pieces[it->second] = std::move(p);
      }
    }
  }
  return pieces;
}

// Rank `rank` of `world` readers loads an even split of every tensor, and a
// range across several stored pieces, and checks them bit for bit.
void check_loaded_on(int rank, int world, const std::string& dir) {
  const TensorDict ref = reference_tensors();
  std::vector<ShardPiece> wanted;
  std::vector<Tensor> expected;
  for (const auto& [name, t] : ref) {
    const Range r = checkpoint::even_split(TensorInfo{name, t.shape(), t.dtype(), {}}, world)[rank];
    wanted.push_back({name, t.shape(), DType::UInt8, r.offset, Tensor::empty({r.numel}, t.dtype())});
    expected.push_back(t.reshape({-1}).narrow(0, r.offset, r.numel));
  }
  const Tensor embed = ref.at("embed.weight");
  wanted.push_back({"embed.weight", embed.shape(), DType::UInt8, 3 + rank, Tensor::empty({25}, DType::Float64)});
  expected.push_back(embed.reshape({-1}).narrow(0, 3 + rank, 25));
  checkpoint::load_pieces(dir, wanted);
  for (size_t i = 0; i < wanted.size(); ++i) {
    EXPECT_EQ(wanted[i].dtype, expected[i].dtype()) << wanted[i].name;
    EXPECT_TRUE(bit_equal(wanted[i].data, expected[i]))
        << "rank " << rank << " of " << world << ": '" << wanted[i].name << "' at " << wanted[i].offset;
  }
}

// Consolidates, checks the index, and reshards to each of `worlds`.
void check_in_one_process(const std::string& dir, int saved_by, const std::vector<int>& worlds) {
  std::map<std::string, std::string> metadata;
  expect_bit_equal(checkpoint::consolidate(dir, &metadata), reference_tensors(), "consolidated");
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"step", "7"}}));
  const Index index = checkpoint::read_index(dir);
  EXPECT_EQ(index.world_size, saved_by);
  for (int r = 0; r < saved_by; ++r) EXPECT_EQ(fs::file_size(index.file_path(r)), index.file_bytes[r]);
  EXPECT_EQ(index.at("embed.weight").pieces.size(), 9u);  // 35 elements in chunks of 4
  EXPECT_TRUE(leftover_temporaries(dir).empty());
  for (int world : worlds) {
    const std::string out = dir + "-as-" + std::to_string(world);
    checkpoint::reshard(dir, out, world);
    EXPECT_EQ(checkpoint::read_index(out).world_size, world);
    expect_bit_equal(checkpoint::consolidate(out, &metadata), reference_tensors(),
                     "resharded to " + std::to_string(world));
    EXPECT_EQ(metadata.at("step"), "7");
    for (int r = 0; r < world; ++r) check_loaded_on(r, world, out);
  }
}

// ---- several ranks ------------------------------------------------------------------

#ifdef KILN_WITH_GLOO

ShardPiece& piece_named(std::vector<ShardPiece>& pieces, const std::string& name) {
  for (ShardPiece& p : pieces)
    if (p.name == name) return p;
  throw std::runtime_error("no piece named " + name);
}

void save_on_ranks_and_read_back(int saved_by, const std::vector<int>& readers, const std::string& name) {
  SharedDir shared(name);
  const std::string dir = shared / "ckpt";
  run_on_ranks(saved_by, [&](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    checkpoint::save_sharded(dir, pieces_for(reference_tensors(), rank, saved_by), *group, {{"step", "7"}});
    // Every rank returns once the whole checkpoint is in place.
    EXPECT_TRUE(checkpoint::is_sharded_checkpoint(dir));
    check_loaded_on(rank, saved_by, dir);
  });
  for (int world : readers) run_on_ranks(world, [&](int rank) { check_loaded_on(rank, world, dir); });
  if (in_rank_process()) return;
  check_in_one_process(dir, saved_by, readers);
}

TEST(ShardedCheckpointRanks, SavedOnTwoReadOnThreeAndOne) { save_on_ranks_and_read_back(2, {3}, "sharded-2"); }

TEST(ShardedCheckpointRanks, SavedOnThreeReadOnTwoAndFour) { save_on_ranks_and_read_back(3, {2, 4}, "sharded-3"); }

TEST(ShardedCheckpointRanks, SavedOnFourReadOnThreeAndOne) { save_on_ranks_and_read_back(4, {3}, "sharded-4"); }

// A failure at each step of the collective save (Note [Sharded checkpoint
// layout]) is an error on every rank naming the failing one, and leaves
// the old checkpoint and no temporary directory.
TEST(ShardedCheckpointRanks, AFailedRankLeavesTheOldCheckpoint) {
  SharedDir shared("sharded-fail");
  const std::string dir = shared / "ckpt";
  run_on_ranks(3, [&](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    const TensorDict old_values = reference_tensors(), new_values = reference_tensors(99);
    checkpoint::save_sharded(dir, pieces_for(old_values, rank, 3), *group, {{"version", "old"}});
    const std::string failed = "save_sharded: the save to '" + dir + "' failed and left it as it was:";

    // 1. Rank 1's piece says float64 but holds float32: refused before anything is written.
    auto bad_dtype = pieces_for(new_values, rank, 3);
    if (rank == 1) piece_named(bad_dtype, "fc.bias").dtype = DType::Float64;
    expect_checkpoint_error([&] { checkpoint::save_sharded(dir, bad_dtype, *group); },
                            {failed, "rank 1: save_sharded: '" + dir + "': piece 'fc.bias' at offset",
                             "its data is float32 but the piece says float64"});
    // 3. Rank 2 cannot write its file: a name that is not UTF-8.
    auto bad_name = pieces_for(new_values, rank, 3);
    if (rank == 2) bad_name.push_back({"\xff", {1}, DType::Float32, 0, zeros({1})});
    expect_checkpoint_error(
        [&] { checkpoint::save_sharded(dir, bad_name, *group); },
        {failed, "rank 2: save_sharded: '", "rank-2-of-3.safetensors': a piece's name is not valid UTF-8"});
    // 4. Rank 2 gives no pieces: rank 0 finds the gaps when it builds the index.
    auto gap = pieces_for(new_values, rank, 3);
    if (rank == 2) gap.clear();
    expect_checkpoint_error(
        [&] { checkpoint::save_sharded(dir, gap, *group); },
        {failed, "rank 0: save_sharded: '" + dir +
                     "': tensor 'embed.weight' (shape [7, 5]): elements [8, 12) are in no piece (a gap)"});

    group->barrier()->wait();
    if (rank == 0) {
      std::map<std::string, std::string> metadata;
      expect_bit_equal(checkpoint::consolidate(dir, &metadata), old_values, "after the failed saves");
      EXPECT_EQ(metadata.at("version"), "old");
      EXPECT_TRUE(leftover_temporaries(dir).empty()) << leftover_temporaries(dir).front();
    }
    // The ranks still agree on their collectives: a good save replaces the old checkpoint.
    checkpoint::save_sharded(dir, pieces_for(new_values, rank, 3), *group, {{"version", "new"}});
    std::map<std::string, std::string> metadata;
    expect_bit_equal(checkpoint::consolidate(dir, &metadata), new_values, "after the good save");
    EXPECT_EQ(metadata.at("version"), "new");
    EXPECT_TRUE(leftover_temporaries(dir).empty());
  });
}

#endif  // KILN_WITH_GLOO

// ---- one process ---------------------------------------------------------------------

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kiln-sharded-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string path(const std::string& name) const { return (root_ / name).string(); }

  // A checkpoint of the reference tensors as `world` ranks would write it
  // (a single-process save resharded evenly).
  std::string make_checkpoint(const std::string& name, int world, uint64_t seed = 2024) {
    const std::string dir = path(name);
    checkpoint::save_sharded(dir, all_pieces(reference_tensors(seed), 3), {{"step", "7"}});
    if (world != 1) checkpoint::reshard(dir, dir, world);
    return dir;
  }

  fs::path root_;
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST_F(ShardedCheckpoint, OneProcessWritesManyPiecesAndReadsThemBack) {
  const std::string dir = path("ckpt");
  checkpoint::save_sharded(dir + "/", all_pieces(reference_tensors(), 3),
                           {{"step", "7"}});  // a trailing '/' is the same dir
  EXPECT_TRUE(fs::is_regular_file(dir + "/rank-0-of-1.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(dir + "/index.json"));
  const Index index = checkpoint::read_index(dir);
  EXPECT_EQ(index.world_size, 1);
  EXPECT_EQ(index.dir, dir);
  EXPECT_EQ(index.id.size(), 16u);
  ASSERT_EQ(index.tensors.size(), 7u);
  const TensorInfo& bias = index.at("fc.bias");
  EXPECT_EQ(bias.global_shape, (Shape{13}));
  EXPECT_EQ(bias.dtype, DType::Float32);
  ASSERT_EQ(bias.pieces.size(), 3u);  // sorted by offset, tiling [0, 13)
  int64_t next = 0;
  for (const auto& p : bias.pieces) {
    EXPECT_EQ(p.rank, 0);
    EXPECT_EQ(p.offset, next);
    EXPECT_EQ(p.key, "fc.bias@" + std::to_string(p.offset));
    next += p.numel;
  }
  EXPECT_EQ(next, 13);
  // The rank file is a plain safetensors file of 1-d pieces.
  std::map<std::string, std::string> file_metadata;
  const TensorDict raw = load_safetensors(dir + "/rank-0-of-1.safetensors", &file_metadata);
  EXPECT_TRUE(bit_equal(raw.at("fc.bias@0"), reference_tensors().at("fc.bias").narrow(0, 0, bias.pieces[0].numel)));
  EXPECT_TRUE(file_metadata.contains("kiln.sharded_checkpoint"));
  check_in_one_process(dir, 1, {2, 5});
}

TEST_F(ShardedCheckpoint, LoadPiecesConvertsToTheCallersDtype) {
  const std::string dir = make_checkpoint("ckpt", 3);
  const TensorDict ref = reference_tensors();
  std::vector<ShardPiece> wanted{
      {"embed.weight", {7, 5}, DType::UInt8, 10, Tensor::empty({20}, DType::Float32)},
      {"norm.weight", {9}, DType::UInt8, 0, Tensor::empty({9}, DType::Float64)},
      {"steps", {}, DType::UInt8, 0, Tensor::empty({1}, DType::Float64)},
      {"empty", {0, 4}, DType::UInt8, 0, Tensor::empty({0}, DType::Float32)},
  };
  checkpoint::load_pieces(dir, wanted);
  EXPECT_TRUE(bit_equal(wanted[0].data, ref.at("embed.weight").reshape({-1}).narrow(0, 10, 20).to(DType::Float32)));
  EXPECT_TRUE(bit_equal(wanted[1].data, ref.at("norm.weight").to(DType::Float64)));
  EXPECT_EQ(wanted[2].data.at<double>({0}), 2024.0);
  EXPECT_EQ(wanted[0].dtype, DType::Float64);
  EXPECT_EQ(wanted[1].dtype, DType::BFloat16);
  EXPECT_EQ(wanted[2].dtype, DType::Int64);
  // A view of a larger tensor is filled in place.
  Tensor big = zeros({2, 13}, DType::Float32);
  std::vector<ShardPiece> into_view{{"fc.bias", {13}, DType::UInt8, 0, big.select(0, 1)}};
  checkpoint::load_pieces(dir, into_view);
  EXPECT_TRUE(bit_equal(big.select(0, 1), ref.at("fc.bias")));
  EXPECT_TRUE(bit_equal(big.select(0, 0), zeros({13})));
}

TEST_F(ShardedCheckpoint, ASaveReplacesTheOldCheckpointWhole) {
  const std::string dir = make_checkpoint("ckpt", 1);
  checkpoint::save_sharded(dir, all_pieces(reference_tensors(5), 2), {{"step", "8"}});
  std::map<std::string, std::string> metadata;
  expect_bit_equal(checkpoint::consolidate(dir, &metadata), reference_tensors(5), "replaced");
  EXPECT_EQ(metadata.at("step"), "8");
  EXPECT_TRUE(leftover_temporaries(dir).empty());
  // Resharding in place is a save too.
  checkpoint::reshard(dir, dir, 4);
  EXPECT_EQ(checkpoint::read_index(dir).world_size, 4);
  expect_bit_equal(checkpoint::consolidate(dir), reference_tensors(5), "resharded in place");
  EXPECT_FALSE(fs::exists(dir + "/rank-0-of-1.safetensors"));
  EXPECT_TRUE(leftover_temporaries(dir).empty());
}

TEST_F(ShardedCheckpoint, AFailedSaveLeavesTheOldCheckpointAndNoTemporaryDirectory) {
  const std::string dir = make_checkpoint("ckpt", 2);
  const TensorDict other = reference_tensors(77);
  // Fails after the file is written: a gap found when the index is built.
  auto gap = all_pieces(other, 2);
  gap.erase(std::find_if(gap.begin(), gap.end(), [](const ShardPiece& p) { return p.name == "fc.bias"; }));
  expect_checkpoint_error(
      [&] { checkpoint::save_sharded(dir, gap); },
      {"save_sharded: '" + dir + "': tensor 'fc.bias' (shape [13]): elements [0, ", ") are in no piece (a gap)"});
  // Fails before: a bad piece.
  auto bad = all_pieces(other, 2);
  bad[0].data = bad[0].data.to(DType::Float32);
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, bad); },
                          {"save_sharded: '" + dir +
                           "': piece 'embed.weight' at offset 0: its data is float32 but the "
                           "piece says float64"});
  // Fails in a splitter.
  expect_checkpoint_error(
      [&] { checkpoint::reshard(dir, dir, 2, [](const TensorInfo&, int) { return std::vector<Range>(1); }); },
      {"reshard: the splitter gives 1 ranges for 'embed.weight', expected one per rank (2)"});
  expect_checkpoint_error(
      [&] {
        checkpoint::reshard(dir, dir, 2, [](const TensorInfo& t, int) {
          return std::vector<Range>{{0, t.numel()}, {1, 1}};
        });
      },
      {"reshard: the splitter gives rank 1 elements [1, 2) of 'steps', which has 1"});
  expect_checkpoint_error(
      [&] {
        checkpoint::reshard(dir, dir, 2, [](const TensorInfo& t, int) {
          return std::vector<Range>{{0, t.numel()}, {0, std::min<int64_t>(1, t.numel())}};
        });
      },
      {"reshard: '" + dir +
       "': tensor 'embed.weight': pieces overlap: elements [0, 1) on rank 1 and [0, 35) on rank 0"});
  expect_bit_equal(checkpoint::consolidate(dir), reference_tensors(), "after the failed saves");
  EXPECT_EQ(checkpoint::read_index(dir).world_size, 2);
  EXPECT_TRUE(leftover_temporaries(dir).empty());
}

TEST_F(ShardedCheckpoint, ASaveRemovesWhatKilledSavesLeft) {
  const std::string dir = make_checkpoint("ckpt", 1);
  fs::create_directories(dir + ".tmp.0123456789abcdef");
  write_text(dir + ".tmp.0123456789abcdef/rank-0-of-2.safetensors", "half a file");
  fs::create_directories(dir + ".tmp.notes");  // not a save's: kept
  checkpoint::save_sharded(dir, all_pieces(reference_tensors(), 1));
  EXPECT_FALSE(fs::exists(dir + ".tmp.0123456789abcdef"));
  EXPECT_TRUE(fs::exists(dir + ".tmp.notes"));
}

TEST_F(ShardedCheckpoint, ASaveReplacesNothingButACheckpoint) {
  const auto pieces = all_pieces(reference_tensors(), 1);
  const std::string notes = path("notes");
  fs::create_directories(notes);
  write_text(notes + "/todo.txt", "keep me");
  expect_checkpoint_error([&] { checkpoint::save_sharded(notes, pieces); },
                          {"save_sharded: '" + notes + "' exists and is neither empty nor a sharded checkpoint"});
  EXPECT_TRUE(fs::exists(notes + "/todo.txt"));
  const std::string file = path("file");
  write_text(file, "x");
  expect_checkpoint_error([&] { checkpoint::save_sharded(file, pieces); },
                          {"save_sharded: '" + file + "' exists and is not a directory"});
  fs::create_directory_symlink(notes, path("link"));
  expect_checkpoint_error([&] { checkpoint::save_sharded(path("link"), pieces); }, {"is a symbolic link"});
  for (const std::string& bad : std::vector<std::string>{"", ".", "/", path("x") + "/.."})
    EXPECT_NE(checkpoint_error([&] { checkpoint::save_sharded(bad, pieces); }), "<no error>") << bad;
  expect_checkpoint_error([&] { checkpoint::save_sharded(".", pieces); },
                          {"save_sharded: '.' does not name a directory of its own"});
  const std::string empty = path("empty");  // an empty directory may be used
  fs::create_directories(empty);
  checkpoint::save_sharded(empty, pieces);
  EXPECT_TRUE(checkpoint::is_sharded_checkpoint(empty));
  EXPECT_TRUE(leftover_temporaries(empty).empty());
}

TEST_F(ShardedCheckpoint, BadPiecesAreRefusedNamingThem) {
  const std::string dir = path("ckpt");
  const std::string at = "save_sharded: '" + dir + "': ";
  auto one = [](std::string name, Shape shape, DType dtype, int64_t offset, Tensor data) {
    return std::vector<ShardPiece>{{std::move(name), std::move(shape), dtype, offset, std::move(data)}};
  };
  const Tensor four = zeros({4});
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, one("", {4}, DType::Float32, 0, four)); },
                          {at, "a piece has an empty name"});
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, one("w", {4}, DType::Float32, 0, Tensor())); },
                          {at, "piece 'w' at offset 0: its data is undefined"});
  expect_checkpoint_error(
      [&] {
        checkpoint::save_sharded(dir, one("w", {4}, DType::Float32, 0, zeros({2, 2})));
      },
      {at, "piece 'w' at offset 0: its data must be 1-d, got shape [2, 2]"});
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, one("w", {4}, DType::Int64, 0, four)); },
                          {at, "its data is float32 but the piece says int64"});
  expect_checkpoint_error(
      [&] {
        checkpoint::save_sharded(dir, one("w", {2, 3}, DType::Float32, 3, four));
      },
      {at, "piece 'w' at offset 3: elements [3, 7) lie outside a tensor of shape [2, 3] (6 elements)"});
  expect_checkpoint_error(
      [&] {
        checkpoint::save_sharded(dir, one("w", {-1, 3}, DType::Float32, 0, four));
      },
      {at, "global shape [-1, 3] has a negative size"});
  auto twice = one("w", {8}, DType::Float32, 0, four);
  twice.push_back(twice[0]);
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, twice); },
                          {at, "piece 'w' at offset 0: this rank gives that piece twice"});
  auto overlap = one("w", {8}, DType::Float32, 0, four);
  overlap.push_back({"w", {8}, DType::Float32, 2, zeros({6})});
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, overlap); },
                          {at, "tensor 'w': pieces overlap: elements [0, 4) on rank 0 and [2, 8) on rank 0"});
  auto shapes = one("w", {8}, DType::Float32, 0, four);
  shapes.push_back({"w", {2, 4}, DType::Float32, 4, zeros({4})});
  expect_checkpoint_error([&] { checkpoint::save_sharded(dir, shapes); },
                          {at, "tensor 'w' is [2, 4] float32 on rank 0 but [8] float32 on rank 0"});
  expect_checkpoint_error(
      [&] {
        checkpoint::save_sharded(dir, one("w", {4}, DType::Float32, 0, four), {{"kiln.crc32.w", "0"}});
      },
      {at, "metadata key 'kiln.crc32.w' uses the prefix"});
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(leftover_temporaries(dir).empty());
}

TEST_F(ShardedCheckpoint, WhatACallerAsksForIsChecked) {
  const std::string dir = make_checkpoint("ckpt", 2);
  const std::string at = "load_pieces: '" + dir + "': ";
  auto load = [&](std::string name, Shape shape, int64_t offset, Tensor data) {
    std::vector<ShardPiece> wanted{{std::move(name), std::move(shape), DType::Float32, offset, std::move(data)}};
    checkpoint::load_pieces(dir, wanted);
  };
  expect_checkpoint_error([&] { load("fc.weight", {13}, 0, zeros({13})); },
                          {"load_pieces: sharded checkpoint '" + dir +
                           "' holds no tensor 'fc.weight' (it holds 7 tensors: "
                           "embed.weight, fc.bias, norm.weight"});
  expect_checkpoint_error(
      [&] {
        load("fc.bias", {13, 1}, 0, zeros({13}));
      },
      {at, "tensor 'fc.bias' has shape [13] in the checkpoint, but the caller expects [13, 1]"});
  expect_checkpoint_error([&] { load("fc.bias", {13}, 10, zeros({4})); },
                          {at, "elements [10, 14) wanted of tensor 'fc.bias', which has 13 (shape [13])"});
  expect_checkpoint_error(
      [&] {
        load("fc.bias", {13}, 0, zeros({13, 1}));
      },
      {at, "the data wanted for 'fc.bias' must be a 1-d tensor, got shape [13, 1]"});
  expect_checkpoint_error([&] { load("fc.bias", {13}, 0, Tensor()); },
                          {at, "must be a 1-d tensor, got an undefined tensor"});
}

TEST_F(ShardedCheckpoint, MissingAndMalformedIndexesAreErrors) {
  expect_checkpoint_error([&] { checkpoint::read_index(path("nothing")); },
                          {"read_index: no checkpoint at '" + path("nothing") + "': the directory does not exist"});
  fs::create_directories(path("plain"));
  expect_checkpoint_error([&] { checkpoint::read_index(path("plain")); },
                          {"read_index: '" + path("plain") + "' is not a sharded checkpoint: it has no index.json"});
  EXPECT_FALSE(checkpoint::is_sharded_checkpoint(path("plain")));
  // What an interrupted two-rename swap leaves is pointed to.
  fs::create_directories(path("gone.old.0123456789abcdef"));
  expect_checkpoint_error(
      [&] { checkpoint::read_index(path("gone")); },
      {"but '" + path("gone.old.0123456789abcdef") + "' holds the one an interrupted save was replacing"});

  const std::string dir = make_checkpoint("ckpt", 3);
  const std::string index_path = dir + "/index.json";
  const nlohmann::json good = read_json(index_path);
  auto expect_index_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& message) {
    nlohmann::json bad = good;
    edit(bad);
    write_text(index_path, bad.dump());
    expect_checkpoint_error([&] { checkpoint::read_index(dir); }, {message});
    write_text(index_path, good.dump());
  };
  const std::string at = "read_index: '" + index_path + "': ";
  expect_index_error([](auto& j) { j["format"] = "other"; }, at + "not a sharded-checkpoint index");
  expect_index_error([](auto& j) { j["version"] = 2; }, at + "index version 2; this Kiln reads version 1");
  expect_index_error([](auto& j) { j.erase("tensors"); }, at + "no field \"tensors\"");
  expect_index_error([](auto& j) { j["world_size"] = 2; }, at + "world size 2 but the index lists 3 files");
  expect_index_error([](auto& j) { j["world_size"] = 0; },
                     at + "\"world_size\" must be an integer of at least 1, got 0");
  expect_index_error([](auto& j) { j["files"][1]["name"] = "rank-1-of-4.safetensors"; },
                     at + "file 1 is 'rank-1-of-4.safetensors', but a checkpoint of world size 3 names it "
                          "'rank-1-of-3.safetensors'");
  expect_index_error([](auto& j) { j["tensors"][1]["pieces"].erase(1); },
                     at + "tensor 'fc.bias' (shape [13]): elements [5, 9) are in no piece (a gap)");
  expect_index_error([](auto& j) { j["tensors"][1]["pieces"][1]["offset"] = 4; },
                     at + "tensor 'fc.bias': pieces overlap: elements [0, 5) on rank 0 and [4, 8) on rank 1");
  expect_index_error([](auto& j) { j["tensors"][1]["pieces"][2]["rank"] = 3; },
                     at + "tensor 'fc.bias' has a piece on rank 3, but the world size is 3");
  expect_index_error([](auto& j) { j["tensors"][1]["dtype"] = "float128"; },
                     at + "tensor 'fc.bias': unknown dtype \"float128\"");
  expect_index_error(
      [](auto& j) {
        j["tensors"][1]["shape"] = {13, -1};
      },
      at + "\"shape\" must be a list of non-negative integers");
  expect_index_error([](auto& j) { j["tensors"][2]["name"] = "fc.bias"; }, at + "tensor 'fc.bias' is listed twice");
  expect_index_error([](auto& j) { j["metadata"]["step"] = 7; }, at + "metadata 'step' must be a string, got 7");
  write_text(index_path, "{\"format\": ");
  expect_checkpoint_error([&] { checkpoint::read_index(dir); }, {at + "not valid JSON"});
  write_text(index_path, good.dump());
  expect_bit_equal(checkpoint::consolidate(dir), reference_tensors(), "the index put back");
}

TEST_F(ShardedCheckpoint, BrokenRankFilesAreNamed) {
  const std::string dir = make_checkpoint("ckpt", 3);
  const std::string file1 = dir + "/rank-1-of-3.safetensors";
  // Another checkpoint of the same tensors: its files have the same sizes but another id.
  const std::string other = make_checkpoint("other", 3);
  const std::string other_id = checkpoint::read_index(other).id, id = checkpoint::read_index(dir).id;
  fs::copy_file(file1, path("saved-rank-1"));
  fs::copy_file(other + "/rank-1-of-3.safetensors", file1, fs::copy_options::overwrite_existing);
  std::vector<ShardPiece> rank1_bias{{"fc.bias", {13}, DType::UInt8, 5, zeros({4})}};
  expect_checkpoint_error(
      [&] { checkpoint::load_pieces(dir, rank1_bias); },
      {"load_pieces: '" + dir + "': tensor 'fc.bias': '" + file1 + "': the file belongs to checkpoint " + other_id +
       ", not " + id + " (a file of another checkpoint copied in?)"});
  fs::copy_file(path("saved-rank-1"), file1, fs::copy_options::overwrite_existing);

  // A flipped bit in rank 1's last piece: its CRC-32 says so, and only a
  // reader of that piece notices (the others never read it).
  {
    std::fstream f(file1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x10);
    f.seekp(-1, std::ios::end);
    f.put(c);
  }
  std::vector<ShardPiece> rank0_only{{"fc.bias", {13}, DType::UInt8, 0, zeros({5})}};
  checkpoint::load_pieces(dir, rank0_only);
  EXPECT_TRUE(bit_equal(rank0_only[0].data, reference_tensors().at("fc.bias").narrow(0, 0, 5)));
  const std::string corrupt = checkpoint_error([&] { checkpoint::consolidate(dir); });
  EXPECT_NE(corrupt.find("load_pieces: '" + dir + "': tensor '"), std::string::npos) << corrupt;
  EXPECT_NE(corrupt.find("load_safetensors: '" + file1 + "': tensor '"), std::string::npos) << corrupt;
  EXPECT_NE(corrupt.find("' is corrupt: the CRC-32 of its"), std::string::npos) << corrupt;
  fs::copy_file(path("saved-rank-1"), file1, fs::copy_options::overwrite_existing);

  // Truncated: the size the index records says so before anything is read.
  const std::string good_index = read_json(dir + "/index.json").dump();
  fs::resize_file(file1, fs::file_size(file1) - 8);
  expect_checkpoint_error(
      [&] { checkpoint::read_index(dir); },
      {"read_index: '" + file1 + "' is " + std::to_string(fs::file_size(file1)) + " bytes but the index records " +
       std::to_string(fs::file_size(path("saved-rank-1"))) + " (truncated or replaced?)"});
  // And if the index has been given the wrong size too, the file's own layout does.
  {
    auto index = read_json(dir + "/index.json");
    index["files"][1]["bytes"] = fs::file_size(file1);
    write_text(dir + "/index.json", index.dump());
    expect_checkpoint_error(
        [&] { checkpoint::consolidate(dir); },
        {"load_pieces: '" + dir + "': tensor '", "load_safetensors: '" + file1 + "'", "(truncated file)"});
  }
  write_text(dir + "/index.json", good_index);
  fs::remove(file1);
  expect_checkpoint_error(
      [&] { checkpoint::read_index(dir); },
      {"read_index: '" + file1 + "', which the index lists, is missing: No such file or directory"});
  fs::copy_file(path("saved-rank-1"), file1);
  fs::copy_file(dir + "/rank-0-of-3.safetensors", dir + "/rank-3-of-4.safetensors");
  expect_checkpoint_error([&] { checkpoint::read_index(dir); },
                          {"read_index: '" + dir +
                           "' holds 'rank-3-of-4.safetensors', which its index (world size 3) "
                           "does not list: files of another checkpoint?"});
}

#ifdef KILN_WITH_CUDA
// Pieces on a GPU are saved as their host copies, and load_pieces fills GPU
// tensors: the same bits as on the CPU.
TEST_F(ShardedCheckpoint, PiecesOnTheGpuSaveAndLoadAsOnTheCpu) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  const Device gpu = cuda_device(0);
  const TensorDict ref = reference_tensors();
  std::vector<ShardPiece> pieces = all_pieces(ref, 3);
  for (ShardPiece& p : pieces) p.data = p.data.to(gpu);
  const std::string dir = path("ckpt");
  checkpoint::save_sharded(dir, pieces);
  expect_bit_equal(checkpoint::consolidate(dir), ref, "saved from the GPU");
  for (const auto& [name, t] : ref) {
    std::vector<ShardPiece> wanted{{name, t.shape(), t.dtype(), 0, Tensor::empty({t.numel()}, {t.dtype(), gpu})}};
    checkpoint::load_pieces(dir, wanted);
    EXPECT_EQ(wanted[0].data.device(), gpu);
    EXPECT_TRUE(bit_equal(wanted[0].data, t.reshape({-1}))) << name;
  }
}
#endif

}  // namespace
}  // namespace kiln::distributed::testing
