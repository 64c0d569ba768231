// Text corpora and token windows: corpus loading and its errors, the 90/10
// split, window shapes and contents, and the determinism of the batches
// across worker counts, seeds and resumption (Note [Token windows]).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/data_test_util.h"
#include "data/text_dataset.h"
#include "tensor/factory.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

class TextCorpusFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_text_dataset_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& contents) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  fs::path dir_;
};

// Tokens 0, 1, ..., n - 1 plus `offset`: a window's values say where it starts.
Tensor iota_tokens(int64_t n, int64_t offset = 0) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), offset);
  return from_vector<int64_t>(values, {n});
}

std::vector<int64_t> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + c.numel());
}

void expect_same_batch(const Batch& a, const Batch& b) {
  ASSERT_EQ(a.data.shape(), b.data.shape());
  EXPECT_EQ(values_of(a.data), values_of(b.data));
  EXPECT_EQ(values_of(a.target), values_of(b.target));
}

// ---- corpora ------------------------------------------------------------------------------

TEST_F(TextCorpusFiles, LoadsUtf8FilesAndNamesTheOffsetOfInvalidBytes) {
  EXPECT_EQ(load_text_file(write("ok.txt", "caf\u00e9\n")), "caf\u00e9\n");
  const std::string bad = write("bad.txt", "hello\xc3(world");
  expect_error_parts([&] { load_text_file(bad); },
                     {"load_text_file: '" + bad + "' is not UTF-8: byte 5 (0xc3) does not start a well-formed sequence"});
  const std::string surrogate = write("surrogate.txt", "ab\xed\xa0\x80");  // U+D800 encoded
  expect_error_parts([&] { load_text_file(surrogate); }, {surrogate + "' is not UTF-8: byte 2 (0xed)"});
  const std::string empty = write("empty.txt", "");
  expect_error_parts([&] { load_text_file(empty); }, {"load_text_file: '" + empty + "' is empty"});
  const std::string missing = (dir_ / "missing.txt").string();
  expect_error_parts([&] { load_text_file(missing); }, {"load_text_file: cannot open '" + missing + "'"});
  expect_error_parts([&] { load_text_file(dir_.string()); }, {dir_.string() + "' is a folder, not a file"});
}

// A fortunes folder in miniature: plain files sorted by name, the .dat
// indexes and .u8 links skipped, empty fortunes dropped, and every fortune
// followed by "%", also the last of a file that lacks it.
TEST_F(TextCorpusFiles, FortunesAreReadInNameOrderWithSeparators) {
  write("b", "%\nthree\n%\n%\nfour");
  write("a", "one\n%\ntwo\n\nlines\n%\n");
  write("a.dat", "\x01\x02\x03 binary index");
  fs::create_symlink(dir_ / "a", dir_ / "a.u8");
  EXPECT_EQ(fortunes_files(dir_.string()), (std::vector<std::string>{(dir_ / "a").string(), (dir_ / "b").string()}));
  EXPECT_EQ(load_fortunes(dir_.string()), "one\n%\ntwo\n\nlines\n%\nthree\n%\nfour\n%\n");
}

TEST_F(TextCorpusFiles, MissingFortunesNameThePackages) {
  const std::string missing = (dir_ / "nowhere").string();
  expect_error_parts([&] { load_fortunes(missing); },
                     {"the fortunes folder '" + missing + "' does not exist", "'fortunes' and 'fortunes-min'"});
  write("only.dat", "index");
  expect_error_parts([&] { fortunes_files(dir_.string()); },
                     {"the folder '" + dir_.string() + "' holds no fortune files", "'fortunes-min'"});
  const std::string bad = write("zz", "fine\n%\nnot \xff utf-8\n");
  expect_error_parts([&] { load_fortunes(dir_.string()); }, {"load_fortunes: '" + bad + "' is not UTF-8: byte 11"});
}

TEST(TextCorpus, TheFortunesPackageCorpus) {
  std::string corpus;
  try {
    corpus = load_fortunes();
  } catch (const Error& e) {
    GTEST_SKIP() << "the fortunes corpus is not installed: " << e.message();
  }
  // fortunes-min's files are part of it; the corpus is a few MB of text.
  const std::vector<std::string> files = fortunes_files();
  EXPECT_NE(std::find(files.begin(), files.end(), std::string(kFortunesDir) + "/riddles"), files.end());
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
  EXPECT_GT(corpus.size(), 1000000u);
  EXPECT_TRUE(corpus.ends_with("\n%\n"));
  EXPECT_EQ(corpus.find("\n%\n%\n"), std::string::npos);  // no empty fortunes
}

// ---- the split ----------------------------------------------------------------------------

TEST(SplitTokens, FirstNinetyPercentTrainTheRestValidation) {
  std::vector<int64_t> tokens(1001);
  std::iota(tokens.begin(), tokens.end(), 0);
  const TokenSplit split = split_tokens(tokens);
  ASSERT_EQ(split.train.shape(), (Shape{900}));  // floor(1001 * 0.9) = 900, as nanoGPT's int(n * 0.9)
  ASSERT_EQ(split.val.shape(), (Shape{101}));
  EXPECT_EQ(split.train.dtype(), DType::Int64);
  EXPECT_EQ(values_of(split.train).back(), 899);
  EXPECT_EQ(values_of(split.val).front(), 900);
  EXPECT_EQ(values_of(split.val).back(), 1000);
  EXPECT_EQ(split_tokens(tokens, 0.5).train.size(0), 500);
  expect_error_parts([&] { split_tokens(tokens, 1.0); }, {"split_tokens: train_fraction must be in (0, 1), got 1"});
  expect_error_parts([&] { split_tokens(tokens, 0.0); }, {"got 0"});
}

// ---- windows ------------------------------------------------------------------------------

TEST(TokenWindowDataset, WindowsAreXAndXShiftedByOne) {
  const TokenWindowDataset ds(iota_tokens(100, 1000), 8, "train");
  EXPECT_EQ(ds.size(), 92);  // starts 0 .. 91: the last y ends at token 99
  EXPECT_EQ(ds.name(), "TokenWindowDataset(train)");
  const Example e = ds.get(91);
  EXPECT_EQ(values_of(e.data), (std::vector<int64_t>{1091, 1092, 1093, 1094, 1095, 1096, 1097, 1098}));
  EXPECT_EQ(values_of(e.target), (std::vector<int64_t>{1092, 1093, 1094, 1095, 1096, 1097, 1098, 1099}));
  const Batch b = ds.get_batch({5, 0, 91});
  ASSERT_EQ(b.data.shape(), (Shape{3, 8}));
  ASSERT_EQ(b.target.shape(), (Shape{3, 8}));
  EXPECT_EQ(b.data.dtype(), DType::Int64);
  const std::vector<int64_t> x = values_of(b.data), y = values_of(b.target);
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t start = std::vector<int64_t>{5, 0, 91}[static_cast<size_t>(r)];
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(x[static_cast<size_t>(r * 8 + t)], 1000 + start + t);
      EXPECT_EQ(y[static_cast<size_t>(r * 8 + t)], 1000 + start + t + 1);
    }
  }
  expect_error_parts([&] { ds.get(92); }, {"TokenWindowDataset(train): index 92 is out of range for a dataset of size 92"});
  expect_error_parts([&] { ds.get_batch({0, -1}); }, {"index -1 is out of range"});
}

TEST(TokenWindowDataset, RejectsTooShortCorporaAndBadTokens) {
  expect_error_parts([] { TokenWindowDataset(iota_tokens(8), 8, "val"); },
                     {"TokenWindowDataset(val): 8 tokens are too few for block_size 8: a window needs 9 tokens"});
  EXPECT_EQ(TokenWindowDataset(iota_tokens(9), 8, "val").size(), 1);
  expect_error_parts([] { TokenWindowDataset(iota_tokens(9), 0, "val"); }, {"block_size must be >= 1, got 0"});
  expect_error_parts([] { TokenWindowDataset(from_vector<float>({1, 2, 3}, {3}), 1, "val"); },
                     {"tokens must be a 1-d Int64 CPU tensor, got [3] float32"});
  expect_error_parts([] { TokenWindowDataset(Tensor(), 1, "val"); }, {"got an undefined tensor"});
}

TEST(RandomWindowStarts, DependOnlyOnSeedAndBatchIndex) {
  const std::vector<int64_t> a = random_window_starts(1000, 16, 42, 7);
  EXPECT_EQ(random_window_starts(1000, 16, 42, 7), a);
  EXPECT_NE(random_window_starts(1000, 16, 43, 7), a);
  EXPECT_NE(random_window_starts(1000, 16, 42, 8), a);
  // A larger batch extends the smaller one.
  const std::vector<int64_t> wide = random_window_starts(1000, 33, 42, 7);
  EXPECT_EQ(std::vector<int64_t>(wide.begin(), wide.begin() + 16), a);
  // Uniform over [0, n): every value in range, the mean near (n - 1) / 2 and
  // every start drawn (60,000 draws over 100 starts: each ~600 times).
  std::vector<int64_t> hits(100, 0);
  double sum = 0;
  for (int64_t i = 0; i < 1000; ++i)
    for (int64_t s : random_window_starts(100, 60, 1, i)) {
      ASSERT_TRUE(s >= 0 && s < 100) << s;
      ++hits[static_cast<size_t>(s)];
      sum += static_cast<double>(s);
    }
  EXPECT_NEAR(sum / 60000, 49.5, 0.5);  // the standard error is 0.12
  EXPECT_GT(*std::min_element(hits.begin(), hits.end()), 450);
  EXPECT_LT(*std::max_element(hits.begin(), hits.end()), 750);
  expect_error_parts([] { random_window_starts(0, 1, 0, 0); }, {"num_windows must be >= 1, got 0"});
  expect_error_parts([] { random_window_starts(5, 1, 0, -1); }, {"batch_index must be >= 0, got -1"});
}

// Batch i is the same read directly, through a loader of any worker count,
// and through a loader resumed at i.
TEST(RandomWindowBatches, IdenticalForAnyWorkerCountAndResumable) {
  auto ds = std::make_shared<TokenWindowDataset>(iota_tokens(5000), 16, "train");
  const RandomWindowBatches batches(ds, 8, 1234);
  for (int64_t workers : {0, 1, 3}) {
    SCOPED_TRACE(workers);
    std::unique_ptr<DataLoader> loader = batches.loader(0, 10, workers);
    int64_t i = 0;
    for (Batch& b : *loader) {
      ASSERT_EQ(b.data.shape(), (Shape{8, 16}));
      expect_same_batch(b, batches.batch(i));
      ++i;
    }
    EXPECT_EQ(i, 10);
    // The next pass continues the stream: batches 10 .. 19.
    i = 10;
    for (Batch& b : *loader) expect_same_batch(b, batches.batch(i++));
    EXPECT_EQ(i, 20);
  }
  std::unique_ptr<DataLoader> resumed = batches.loader(6, 4, 2);
  int64_t i = 6;
  for (Batch& b : *resumed) expect_same_batch(b, batches.batch(i++));
  EXPECT_EQ(i, 10);
  // y is x shifted by one in every row.
  const Batch b = batches.batch(3);
  const std::vector<int64_t> x = values_of(b.data), y = values_of(b.target);
  for (size_t k = 0; k < x.size(); ++k) EXPECT_EQ(y[k], x[k] + 1);
  // Another seed gives other windows.
  EXPECT_NE(values_of(RandomWindowBatches(ds, 8, 1235).batch(3).data), x);
}

TEST(FixedWindowBatches, EveryDisjointWindowOrAnEvenSpread) {
  auto ds = std::make_shared<TokenWindowDataset>(iota_tokens(100), 8, "val");
  const FixedWindowBatches all(ds, 5);
  // (100 - 1) / 8 = 12 windows: starts 0, 8, ..., 88 (the last y ends at token 96).
  EXPECT_EQ(all.num_windows(), 12);
  EXPECT_EQ(all.starts().back(), 88);
  ASSERT_EQ(all.num_batches(), 3);
  EXPECT_EQ(all.batch(2).data.shape(), (Shape{2, 8}));  // the short last batch
  EXPECT_EQ(values_of(all.batch(1).data)[0], 40);
  expect_same_batch(all.batch(1), all.batch(1));
  // Four windows spread from the first start (0) to the last (91).
  const FixedWindowBatches four(ds, 3, 4);
  EXPECT_EQ(four.starts(), (std::vector<int64_t>{0, 30, 60, 91}));
  EXPECT_EQ(values_of(four.batch(1).target).back(), 99);
  EXPECT_EQ(FixedWindowBatches(ds, 3, 1).starts(), std::vector<int64_t>{0});
  EXPECT_EQ(FixedWindowBatches(ds, 3, 50).num_windows(), 12);  // capped by the disjoint ones
  expect_error_parts([&] { all.batch(3); }, {"FixedWindowBatches: batch 3 is out of range [0, 3)"});
  expect_error_parts([&] { FixedWindowBatches(ds, 0); }, {"batch_size must be >= 1, got 0"});
}

}  // namespace
}  // namespace kiln::data
