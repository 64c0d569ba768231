// Byte-level BPE: training, encoding, decoding and the merges file
// (Note [Byte-level BPE] and Note [Tokenizer files] in data/tokenizer.h).
#include <algorithm>
#include <limits>
#include <queue>

#include "data/pretokenize.h"
#include "data/text_file.h"
#include "data/tokenizer.h"
#include "tensor/error.h"

namespace kiln::data {
namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t key_first(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t key_second(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

// A distinct word of the training corpus: its current tokens and how often it occurs.
struct TrainingWord {
  std::vector<int32_t> tokens;
  int64_t count;
};

// A heap entry: pair `key` had `count` occurrences when it was pushed. The
// heap's top is the most frequent pair, the smallest key among equals.
struct PairEntry {
  int64_t count;
  uint64_t key;
};
struct LowerPriority {
  bool operator()(const PairEntry& x, const PairEntry& y) const {
    return x.count < y.count || (x.count == y.count && x.key > y.key);
  }
};

// The corpus's distinct words with their counts, sorted by their bytes so
// that everything after is independent of hash-table order.
std::vector<TrainingWord> count_words(std::string_view corpus) {
  std::unordered_map<std::string_view, int64_t> counts;
  for (std::string_view word : split_words(corpus)) ++counts[word];
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<TrainingWord> words;
  words.reserve(sorted.size());
  for (const auto& [bytes, count] : sorted) {
    TrainingWord word{{}, count};
    for (char c : bytes) word.tokens.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(word));
  }
  return words;
}

// Replaces every occurrence of (a, b) in `tokens` by `merged`, left to right.
// Returns false (and leaves `tokens` alone) when there is none.
bool merge_in_word(std::vector<int32_t>& tokens, int32_t a, int32_t b, int32_t merged) {
  size_t out = 0;
  bool found = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i + 1 < tokens.size() && tokens[i] == a && tokens[i + 1] == b) {
      tokens[out++] = merged;
      ++i;
      found = true;
    } else {
      tokens[out++] = tokens[i];
    }
  }
  tokens.resize(out);
  return found;
}

}  // namespace

// ---- construction -----------------------------------------------------------------------

ByteBpeTokenizer::ByteBpeTokenizer(std::vector<Merge> merges) : merges_(std::move(merges)) {
  bytes_.reserve(256 + merges_.size());
  for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, static_cast<char>(b));
  ranks_.reserve(merges_.size());
  for (size_t k = 0; k < merges_.size(); ++k) {
    const auto [a, b] = merges_[k];
    const int64_t limit = 256 + static_cast<int64_t>(k);
    KILN_CHECK(a >= 0 && a < limit && b >= 0 && b < limit, "ByteBpeTokenizer: merge ", k, " joins tokens ", a,
               " and ", b, ", but merge ", k, " may only join tokens below ", limit, " (those that exist before it)");
    const auto [it, inserted] = ranks_.emplace(pair_key(a, b), static_cast<int32_t>(k));
    KILN_CHECK(inserted, "ByteBpeTokenizer: merge ", k, " (", a, " ", b, ") repeats merge ", it->second);
    bytes_.push_back(bytes_[static_cast<size_t>(a)] + bytes_[static_cast<size_t>(b)]);
  }
}

const std::string& ByteBpeTokenizer::token_bytes(int64_t id) const {
  KILN_CHECK(id >= 0 && id < vocab_size(), "ByteBpeTokenizer::token_bytes: id ", id,
             " is outside the vocabulary [0, ", vocab_size(), ")");
  return bytes_[static_cast<size_t>(id)];
}

int32_t ByteBpeTokenizer::rank_of(int32_t a, int32_t b) const {
  const auto it = ranks_.find(pair_key(a, b));
  return it == ranks_.end() ? -1 : it->second;
}

// ---- training ---------------------------------------------------------------------------

ByteBpeTokenizer ByteBpeTokenizer::train(std::string_view corpus, int64_t vocab_size) {
  KILN_CHECK(vocab_size >= 256 && vocab_size <= std::numeric_limits<int32_t>::max(),
             "ByteBpeTokenizer::train: vocab_size must be in [256, 2^31 - 1] (256 byte tokens plus the merges), got ",
             vocab_size);
  std::vector<TrainingWord> words = count_words(corpus);

  // counts[p]: occurrences of pair p over the corpus; where[p]: the words
  // that held p when it was indexed (stale and repeated ids are skipped when read).
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    const std::vector<int32_t>& t = words[w].tokens;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      const uint64_t key = pair_key(t[i], t[i + 1]);
      counts[key] += words[w].count;
      std::vector<int32_t>& ids = where[key];
      if (ids.empty() || ids.back() != static_cast<int32_t>(w)) ids.push_back(static_cast<int32_t>(w));
    }
  }
  std::priority_queue<PairEntry, std::vector<PairEntry>, LowerPriority> heap;
  for (const auto& [key, count] : counts) heap.push({count, key});

  std::vector<Merge> merges;
  std::vector<int64_t> visited(words.size(), -1);  // the last merge that visited each word
  std::unordered_map<uint64_t, int64_t> delta;     // this merge's change to each pair's count
  while (static_cast<int64_t>(merges.size()) < vocab_size - 256 && !heap.empty()) {
    const PairEntry top = heap.top();
    heap.pop();
    const auto current = counts.find(top.key);
    if (current == counts.end() || current->second != top.count) continue;  // a stale entry
    const int32_t a = key_first(top.key), b = key_second(top.key);
    const auto merged = static_cast<int32_t>(256 + merges.size());
    const auto merge_index = static_cast<int64_t>(merges.size());
    merges.emplace_back(a, b);

    delta.clear();
    std::vector<int32_t> holders = std::move(where[top.key]);
    where.erase(top.key);
    for (int32_t w : holders) {
      if (visited[static_cast<size_t>(w)] == merge_index) continue;
      visited[static_cast<size_t>(w)] = merge_index;
      TrainingWord& word = words[static_cast<size_t>(w)];
      std::vector<int32_t> before = word.tokens;
      if (!merge_in_word(word.tokens, a, b, merged)) continue;
      for (size_t i = 0; i + 1 < before.size(); ++i) delta[pair_key(before[i], before[i + 1])] -= word.count;
      const std::vector<int32_t>& after = word.tokens;
      for (size_t i = 0; i + 1 < after.size(); ++i) {
        const uint64_t key = pair_key(after[i], after[i + 1]);
        delta[key] += word.count;
        // Pairs without the new token were in the word already, and indexed.
        if (after[i] == merged || after[i + 1] == merged) {
          std::vector<int32_t>& ids = where[key];
          if (ids.empty() || ids.back() != w) ids.push_back(w);
        }
      }
    }
    for (const auto& [key, change] : delta) {
      if (change == 0) continue;
      int64_t& count = counts[key];
      count += change;
      if (count > 0) {
        heap.push({count, key});
      } else {
        counts.erase(key);
      }
    }
  }
  return ByteBpeTokenizer(std::move(merges));
}

// ---- encoding and decoding ----------------------------------------------------------------

void ByteBpeTokenizer::encode_word(std::string_view word, std::vector<int64_t>& out) const {
  const size_t n = word.size();
  if (n == 1 || merges_.empty()) {
    for (char c : word) out.push_back(static_cast<uint8_t>(c));
    return;
  }
  // The word's symbols as a linked list over byte positions; a merged-away
  // position holds -1. Candidates are merges of adjacent symbols, popped by
  // lowest rank and then leftmost position: the order of the training's
  // merges (a merge only creates pairs of higher rank than its own), so
  // every word splits as training left it.
  std::vector<int32_t> symbol(n), next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    symbol[i] = static_cast<uint8_t>(word[i]);
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  struct Candidate {
    int32_t rank, position, left, right;
    bool operator>(const Candidate& o) const {
      return rank > o.rank || (rank == o.rank && position > o.position);
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](int32_t position) {
    if (position < 0 || next[position] < 0) return;
    const int32_t left = symbol[position], right = symbol[next[position]];
    const int32_t rank = rank_of(left, right);
    if (rank >= 0) heap.push({rank, position, left, right});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.position];
    if (symbol[c.position] != c.left || right < 0 || symbol[right] != c.right) continue;  // stale
    symbol[c.position] = 256 + c.rank;
    symbol[right] = -1;
    next[c.position] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.position;
    consider(prev[c.position]);
    consider(c.position);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(symbol[i]);
}

std::vector<int64_t> ByteBpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 2);
  for (std::string_view word : split_words(text)) encode_word(word, ids);
  return ids;
}

std::string ByteBpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (size_t k = 0; k < ids.size(); ++k) {
    KILN_CHECK(ids[k] >= 0 && ids[k] < vocab_size(), "ByteBpeTokenizer::decode: id ", ids[k], " at position ", k,
               " is outside the vocabulary [0, ", vocab_size(), ")");
    text += bytes_[static_cast<size_t>(ids[k])];
  }
  return text;
}

// ---- the merges file ----------------------------------------------------------------------

namespace {

ByteBpeTokenizer read_merges(LineReader& lines);

}  // namespace

std::string ByteBpeTokenizer::to_text() const {
  std::string contents = "kiln-byte-bpe v1 merges " + std::to_string(merges_.size()) + "\n";
  for (const auto& [a, b] : merges_) contents += std::to_string(a) + " " + std::to_string(b) + "\n";
  return contents;
}

ByteBpeTokenizer ByteBpeTokenizer::load(const std::string& path) {
  LineReader lines(path, "ByteBpeTokenizer::load");
  return read_merges(lines);
}

ByteBpeTokenizer ByteBpeTokenizer::from_text(std::string text, std::string source) {
  LineReader lines = LineReader::of_text(std::move(text), std::move(source), "ByteBpeTokenizer::from_text");
  return read_merges(lines);
}

namespace {

ByteBpeTokenizer read_merges(LineReader& lines) {
  const int64_t count = read_counted_header(lines, "kiln-byte-bpe", "merges");
  std::vector<ByteBpeTokenizer::Merge> merges;
  merges.reserve(static_cast<size_t>(count));
  std::unordered_map<uint64_t, int64_t> seen;  // pair -> the line that made it
  std::string_view line;
  while (lines.next(line)) {
    const int64_t k = static_cast<int64_t>(merges.size());
    if (k == count) lines.fail("the header declares " + std::to_string(count) + " merges but more lines follow");
    const size_t space = line.find(' ');
    const std::optional<int64_t> a = space == std::string_view::npos ? std::nullopt : parse_decimal(line.substr(0, space));
    const std::optional<int64_t> b = space == std::string_view::npos ? std::nullopt : parse_decimal(line.substr(space + 1));
    if (!a || !b) lines.fail("'" + std::string(line) + "' is not a merge written as two token ids '<a> <b>'");
    const int64_t limit = 256 + k;
    if (*a >= limit || *b >= limit)
      lines.fail("merge " + std::to_string(k) + " joins tokens " + std::to_string(*a) + " and " + std::to_string(*b) +
                 ", but only tokens below " + std::to_string(limit) + " exist before it");
    const auto [it, inserted] = seen.emplace(pair_key(static_cast<int32_t>(*a), static_cast<int32_t>(*b)),
                                             lines.line_number());
    if (!inserted) lines.fail("merge '" + std::string(line) + "' repeats line " + std::to_string(it->second));
    merges.emplace_back(static_cast<int32_t>(*a), static_cast<int32_t>(*b));
  }
  if (static_cast<int64_t>(merges.size()) != count)
    lines.fail("the header declares " + std::to_string(count) + " merges but the file ends after " +
               std::to_string(merges.size()) + " (a truncated file?)");
  return ByteBpeTokenizer(std::move(merges));
}

}  // namespace

}  // namespace kiln::data
