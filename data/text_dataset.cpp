// Text corpora, the token split and token windows (Note [Token windows] in
// data/text_dataset.h).
#include "data/text_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "data/text_file.h"
#include "data/utf8.h"
#include "tensor/error.h"
#include "tensor/random.h"

namespace kiln::data {
namespace {

constexpr const char* kFortunesPackages =
    "install the Debian packages 'fortunes' and 'fortunes-min' (scripts/install-deps.sh does), or give a text file";

// Throws naming `what` and the offset of the first byte of `text` that is not UTF-8.
void check_utf8(std::string_view text, const char* op, const std::string& what) {
  const size_t bad = utf8::first_invalid(text);
  KILN_CHECK(bad == std::string_view::npos, op, ": ", what, " is not UTF-8: byte ", bad, " (0x", std::hex,
             static_cast<unsigned>(static_cast<uint8_t>(text[bad])), std::dec,
             ") does not start a well-formed sequence");
}

// Appends the fortunes of one fortune file (lines "%" between them) to
// `corpus`, each followed by the line "%".
void append_fortunes(std::string_view file, std::string& corpus) {
  std::string fortune;
  const auto flush = [&] {
    if (!fortune.empty()) corpus += fortune + "%\n";
    fortune.clear();
  };
  size_t i = 0;
  while (i < file.size()) {
    size_t end = file.find('\n', i);
    if (end == std::string_view::npos) end = file.size();
    const std::string_view line = file.substr(i, end - i);
    if (line == "%") {
      flush();
    } else {
      fortune += line;
      fortune += '\n';
    }
    i = end + 1;
  }
  flush();
}

}  // namespace

// ---- corpora ------------------------------------------------------------------------------

std::vector<std::string> fortunes_files(const std::string& dir) {
  std::error_code error;
  KILN_CHECK(std::filesystem::is_directory(dir, error), "fortunes_files: the fortunes folder '", dir,
             "' does not exist; ", kFortunesPackages);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::filesystem::path& path = entry.path();
    if (path.has_extension() || !entry.is_regular_file()) continue;
    files.push_back(path.string());
  }
  KILN_CHECK(!error, "fortunes_files: cannot list '", dir, "': ", error.message());
  KILN_CHECK(!files.empty(), "fortunes_files: the folder '", dir, "' holds no fortune files; ", kFortunesPackages);
  std::sort(files.begin(), files.end());
  return files;
}

std::string load_fortunes(const std::string& dir) {
  std::string corpus;
  for (const std::string& path : fortunes_files(dir)) {
    const std::string file = read_file_bytes(path, "load_fortunes");
    check_utf8(file, "load_fortunes", "'" + path + "'");
    append_fortunes(file, corpus);
  }
  return corpus;
}

std::string load_text_file(const std::string& path) {
  std::string text = read_file_bytes(path, "load_text_file");
  KILN_CHECK(!text.empty(), "load_text_file: '", path, "' is empty");
  check_utf8(text, "load_text_file", "'" + path + "'");
  return text;
}

// ---- tokens -------------------------------------------------------------------------------

TokenSplit split_tokens(const std::vector<int64_t>& tokens, double train_fraction) {
  KILN_CHECK(train_fraction > 0 && train_fraction < 1, "split_tokens: train_fraction must be in (0, 1), got ",
             train_fraction);
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_train = static_cast<int64_t>(std::floor(static_cast<double>(n) * train_fraction));
  TokenSplit split{Tensor::empty({n_train}, DType::Int64), Tensor::empty({n - n_train}, DType::Int64)};
  std::copy(tokens.begin(), tokens.begin() + n_train, split.train.data<int64_t>());
  std::copy(tokens.begin() + n_train, tokens.end(), split.val.data<int64_t>());
  return split;
}

// ---- windows ------------------------------------------------------------------------------

TokenWindowDataset::TokenWindowDataset(Tensor tokens, int64_t block_size, std::string name)
    : block_size_(block_size), name_(std::move(name)) {
  KILN_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.dtype() == DType::Int64 && tokens.device().is_cpu(),
             "TokenWindowDataset(", name_, "): tokens must be a 1-d Int64 CPU tensor, got ",
             tokens.defined() ? detail::str(tokens.shape(), " ", tokens.dtype()) : std::string("an undefined tensor"));
  KILN_CHECK(block_size >= 1, "TokenWindowDataset(", name_, "): block_size must be >= 1, got ", block_size);
  KILN_CHECK(tokens.size(0) >= block_size + 1, "TokenWindowDataset(", name_, "): ", tokens.size(0),
             " tokens are too few for block_size ", block_size, ": a window needs ", block_size + 1,
             " tokens (x and y = x shifted by one)");
  tokens_ = tokens.contiguous();
}

Example TokenWindowDataset::get(int64_t start) const {
  check_index(start);
  return {tokens_.narrow(0, start, block_size_), tokens_.narrow(0, start + 1, block_size_)};
}

Batch TokenWindowDataset::get_batch(const std::vector<int64_t>& starts) const {
  KILN_CHECK(!starts.empty(), name(), ": get_batch needs at least one window start");
  const auto batch_size = static_cast<int64_t>(starts.size());
  Batch batch{Tensor::empty({batch_size, block_size_}, DType::Int64),
              Tensor::empty({batch_size, block_size_}, DType::Int64)};
  const int64_t* tokens = tokens_.data<int64_t>();
  int64_t* x = batch.data.data<int64_t>();    // (B, T)
  int64_t* y = batch.target.data<int64_t>();  // (B, T)
  const size_t row_bytes = static_cast<size_t>(block_size_) * sizeof(int64_t);
  for (int64_t b = 0; b < batch_size; ++b) {
    check_index(starts[static_cast<size_t>(b)]);
    std::memcpy(x + b * block_size_, tokens + starts[static_cast<size_t>(b)], row_bytes);
    std::memcpy(y + b * block_size_, tokens + starts[static_cast<size_t>(b)] + 1, row_bytes);
  }
  return batch;
}

std::vector<int64_t> random_window_starts(int64_t num_windows, int64_t batch_size, uint64_t seed,
                                          int64_t batch_index) {
  KILN_CHECK(num_windows >= 1, "random_window_starts: num_windows must be >= 1, got ", num_windows);
  KILN_CHECK(batch_size >= 1, "random_window_starts: batch_size must be >= 1, got ", batch_size);
  KILN_CHECK(batch_index >= 0, "random_window_starts: batch_index must be >= 0, got ", batch_index);
  // Draw j of batch i is the 64-bit half j % 2 of the Philox block at counter
  // (i, j / 2): no generator state, so any batch can be drawn first.
  std::vector<int64_t> starts(static_cast<size_t>(batch_size));
  std::array<uint32_t, 4> block{};
  for (int64_t j = 0; j < batch_size; ++j) {
    if (j % 2 == 0) block = Philox4x32::block(static_cast<uint64_t>(batch_index), static_cast<uint64_t>(j / 2), seed);
    const size_t half = 2 * static_cast<size_t>(j % 2);
    const uint64_t r = (static_cast<uint64_t>(block[half + 1]) << 32) | block[half];
    // Uniform in [0, num_windows) by Lemire's multiply-shift; its bias,
    // num_windows / 2^64, is far below anything observable.
    starts[static_cast<size_t>(j)] =
        static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(num_windows)) >> 64);
  }
  return starts;
}

RandomWindowSampler::RandomWindowSampler(int64_t num_windows, int64_t batch_size, int64_t num_batches, uint64_t seed,
                                         int64_t first_batch)
    : num_windows_(num_windows),
      batch_size_(batch_size),
      num_batches_(num_batches),
      seed_(seed),
      first_batch_(first_batch) {
  KILN_CHECK(num_windows >= 1 && batch_size >= 1 && num_batches >= 0 && first_batch >= 0,
             "RandomWindowSampler: needs num_windows >= 1, batch_size >= 1, num_batches >= 0 and first_batch >= 0, "
             "got ",
             num_windows, ", ", batch_size, ", ", num_batches, " and ", first_batch);
}

std::vector<int64_t> RandomWindowSampler::indices() const {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(size()));
  const int64_t first = first_batch_ + epoch() * num_batches_;
  for (int64_t b = 0; b < num_batches_; ++b) {
    const std::vector<int64_t> starts = random_window_starts(num_windows_, batch_size_, seed_, first + b);
    order.insert(order.end(), starts.begin(), starts.end());
  }
  return order;
}

RandomWindowBatches::RandomWindowBatches(std::shared_ptr<TokenWindowDataset> dataset, int64_t batch_size,
                                         uint64_t seed)
    : dataset_(std::move(dataset)), batch_size_(batch_size), seed_(seed) {
  KILN_CHECK(dataset_ != nullptr, "RandomWindowBatches: the dataset is null");
  KILN_CHECK(batch_size >= 1, "RandomWindowBatches: batch_size must be >= 1, got ", batch_size);
}

Batch RandomWindowBatches::batch(int64_t index) const {
  return dataset_->get_batch(random_window_starts(dataset_->size(), batch_size_, seed_, index));
}

std::unique_ptr<DataLoader> RandomWindowBatches::loader(int64_t first_batch, int64_t num_batches,
                                                        int64_t num_workers) const {
  DataLoaderOptions options;
  options.batch_size = batch_size_;
  options.num_workers = num_workers;
  options.sampler =
      std::make_shared<RandomWindowSampler>(dataset_->size(), batch_size_, num_batches, seed_, first_batch);
  return std::make_unique<DataLoader>(dataset_, options);
}

FixedWindowBatches::FixedWindowBatches(std::shared_ptr<TokenWindowDataset> dataset, int64_t batch_size,
                                       int64_t max_windows)
    : dataset_(std::move(dataset)), batch_size_(batch_size) {
  KILN_CHECK(dataset_ != nullptr, "FixedWindowBatches: the dataset is null");
  KILN_CHECK(batch_size >= 1, "FixedWindowBatches: batch_size must be >= 1, got ", batch_size);
  KILN_CHECK(max_windows >= 0, "FixedWindowBatches: max_windows must be >= 0 (0: all), got ", max_windows);
  const int64_t T = dataset_->block_size();
  // Window k of the non-overlapping ones ends with token k * T + T, so there
  // are (N - 1) / T of them (at least one: the dataset holds N >= T + 1).
  const int64_t disjoint = (dataset_->num_tokens() - 1) / T;
  if (max_windows == 0 || max_windows >= disjoint) {
    for (int64_t k = 0; k < disjoint; ++k) starts_.push_back(k * T);
  } else {
    const int64_t last = dataset_->size() - 1;  // the last valid start
    for (int64_t k = 0; k < max_windows; ++k)
      starts_.push_back(max_windows == 1 ? 0 : static_cast<int64_t>(static_cast<__int128>(k) * last / (max_windows - 1)));
  }
}

Batch FixedWindowBatches::batch(int64_t index) const {
  KILN_CHECK(index >= 0 && index < num_batches(), "FixedWindowBatches: batch ", index, " is out of range [0, ",
             num_batches(), ")");
  const auto first = starts_.begin() + index * batch_size_;
  const auto last = starts_.begin() + std::min(num_windows(), (index + 1) * batch_size_);
  return dataset_->get_batch(std::vector<int64_t>(first, last));
}

}  // namespace kiln::data
