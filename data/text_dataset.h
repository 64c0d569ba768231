// Text corpora for language models: loading, the train/validation split, and
// batches of contiguous token windows, as nanoGPT's data preparation and
// get_batch.
//
//   std::string text = load_fortunes();                    // or load_text_file(path)
//   ByteBpeTokenizer tok = ByteBpeTokenizer::train(text, 1024);
//   TokenSplit split = split_tokens(tok.encode(text));     // 90% train, 10% validation
//   auto train = std::make_shared<TokenWindowDataset>(split.train, 128, "train");
//   RandomWindowBatches batches(train, 32, seed);
//   Batch b = batches.batch(step);                         // data = x (32, 128), target = y (32, 128)
//
// Note [Token windows]
// An example is a window of T + 1 consecutive tokens starting anywhere in
// the split: x = tokens[s, s + T) and y = tokens[s + 1, s + T + 1), the next
// token at every position. Training batches draw B window starts uniformly
// (with replacement, as nanoGPT's torch.randint) from Philox keyed by the
// seed with batch index i as the counter, so batch i is a pure function of
// (seed, i, B): a run resumed at batch i reads exactly the batches the
// uninterrupted run would have, and batch i's first windows are the same for
// every B.
// This fits Kiln's pipeline as a Dataset and a Sampler rather than as a
// separate iterator: TokenWindowDataset's examples are the windows (index =
// start token), and RandomWindowSampler yields the starts of batches i0,
// i0 + 1, ... in order. A DataLoader with batch_size B over them therefore
// builds batch i0 + b as its b-th batch, and the DataLoader already
// guarantees the same batches for any number of workers (Note [Loader
// workers] in data/dataloader.h) while prefetching them on other threads.
// RandomWindowBatches packs the three together, with batch(i) for direct
// access and loader() for prefetching. Validation uses fixed windows instead
// (FixedWindowBatches): the same windows at every evaluation, so validation
// losses of different steps and runs compare.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "tensor/tensor.h"

namespace kiln::data {

// ---- corpora ------------------------------------------------------------------------------

// Where the Debian packages fortunes and fortunes-min install their files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The plain-text fortune files of `dir`, sorted by name: every regular file
// whose name has no extension (the .dat files are strfile indexes, the .u8
// names links to the plain files). Throws kiln::Error naming the folder and
// the packages to install when it is missing or holds no such file.
std::vector<std::string> fortunes_files(const std::string& dir = kFortunesDir);

// The fortunes corpus: the fortunes of fortunes_files(dir), file after file,
// each fortune's lines followed by the separator line "%" (the files' own
// format, with empty fortunes dropped and the separator after every fortune,
// also the last of a file). Throws kiln::Error as fortunes_files, or naming
// the file and byte offset of text that is not UTF-8.
std::string load_fortunes(const std::string& dir = kFortunesDir);

// The bytes of a UTF-8 text file. Throws kiln::Error naming the file and the
// byte offset of the first byte that is not well-formed UTF-8, or when the
// file is empty or cannot be read.
std::string load_text_file(const std::string& path);

// ---- tokens -------------------------------------------------------------------------------

// A corpus's tokens split for training and validation.
struct TokenSplit {
  Tensor train;  // (N_train) Int64: the first tokens
  Tensor val;    // (N - N_train) Int64: the rest
};

// N_train = floor(N * train_fraction), as nanoGPT's prepare.py; requires
// 0 < train_fraction < 1.
TokenSplit split_tokens(const std::vector<int64_t>& tokens, double train_fraction = 0.9);

// ---- windows ------------------------------------------------------------------------------

// The windows of a token sequence (Note [Token windows]): example s is
// data = x = tokens[s, s + T), target = y = tokens[s + 1, s + T + 1), both
// (T) Int64, for s in [0, N - T). Read-only, so safe for loader workers.
class TokenWindowDataset : public Dataset {
 public:
  // tokens: (N) Int64 on the CPU. Requires block_size >= 1 and N >= block_size + 1;
  // `name` names the dataset in errors ("train", "val").
  TokenWindowDataset(Tensor tokens, int64_t block_size, std::string name);

  int64_t size() const override { return num_tokens() - block_size_; }
  Example get(int64_t start) const override;
  // data = x (B, T), target = y (B, T) for the window starts given.
  Batch get_batch(const std::vector<int64_t>& starts) const override;
  std::string name() const override { return "TokenWindowDataset(" + name_ + ")"; }

  int64_t block_size() const { return block_size_; }
  int64_t num_tokens() const { return tokens_.size(0); }
  const Tensor& tokens() const { return tokens_; }

 private:
  Tensor tokens_;  // (N) Int64, contiguous
  int64_t block_size_;
  std::string name_;
};

// The window starts of training batch `batch_index`: batch_size draws,
// uniform in [0, num_windows), from Philox keyed by `seed` (Note [Token
// windows]). Deterministic in its arguments; draw j is the same for every
// batch_size > j.
std::vector<int64_t> random_window_starts(int64_t num_windows, int64_t batch_size, uint64_t seed,
                                          int64_t batch_index);

// The starts of num_batches consecutive training batches per epoch, for a
// DataLoader of the same batch_size: epoch e yields the starts of batches
// first_batch + e * num_batches + b for b = 0 .. num_batches - 1, so epochs
// continue the stream rather than repeat it.
class RandomWindowSampler : public Sampler {
 public:
  RandomWindowSampler(int64_t num_windows, int64_t batch_size, int64_t num_batches, uint64_t seed,
                      int64_t first_batch = 0);

  int64_t size() const override { return num_batches_ * batch_size_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t num_windows_;
  int64_t batch_size_;
  int64_t num_batches_;
  uint64_t seed_;
  int64_t first_batch_;
};

// Training batches of random windows (Note [Token windows]).
class RandomWindowBatches {
 public:
  RandomWindowBatches(std::shared_ptr<TokenWindowDataset> dataset, int64_t batch_size, uint64_t seed);

  // Batch `index` (>= 0): data = x (B, T), target = y (B, T). Thread safe.
  Batch batch(int64_t index) const;
  // A loader over batches first_batch .. first_batch + num_batches - 1, in
  // order, built by num_workers threads ahead of the consumer (0: on the
  // caller's thread); its b-th batch equals batch(first_batch + b).
  std::unique_ptr<DataLoader> loader(int64_t first_batch, int64_t num_batches, int64_t num_workers = 0) const;

  const TokenWindowDataset& dataset() const { return *dataset_; }
  int64_t batch_size() const { return batch_size_; }
  uint64_t seed() const { return seed_; }

 private:
  std::shared_ptr<TokenWindowDataset> dataset_;
  int64_t batch_size_;
  uint64_t seed_;
};

// Fixed windows for evaluation, batched in order: every non-overlapping
// window (starts 0, T, 2T, ...), or, when max_windows is smaller than their
// number, max_windows starts spread evenly from the first window to the
// last. The same windows every time; the last batch may be short.
//   FixedWindowBatches val(val_dataset, 32, 200);
//   for (int64_t k = 0; k < val.num_batches(); ++k) { Batch b = val.batch(k); ... }
class FixedWindowBatches {
 public:
  // max_windows = 0: no limit.
  FixedWindowBatches(std::shared_ptr<TokenWindowDataset> dataset, int64_t batch_size, int64_t max_windows = 0);

  int64_t num_windows() const { return static_cast<int64_t>(starts_.size()); }
  int64_t num_batches() const { return (num_windows() + batch_size_ - 1) / batch_size_; }
  // Batch `index` in [0, num_batches()): windows [index * B, min((index + 1) * B, num_windows())).
  Batch batch(int64_t index) const;
  const std::vector<int64_t>& starts() const { return starts_; }

 private:
  std::shared_ptr<TokenWindowDataset> dataset_;
  int64_t batch_size_;
  std::vector<int64_t> starts_;
};

}  // namespace kiln::data
