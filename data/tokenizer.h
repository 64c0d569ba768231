// Tokenizers: text to token ids and back, for language models.
//
// Two kinds, as nanoGPT uses them: a character-level tokenizer whose
// vocabulary is the distinct characters of a corpus (shakespeare_char), and a
// GPT-2-style byte-level BPE tokenizer whose vocabulary is the 256 bytes plus
// merges learned from a corpus. Both save to a small text file, and
// load_tokenizer() reads either back.
//
//   ByteBpeTokenizer bpe = ByteBpeTokenizer::train(corpus, 1024);
//   std::vector<int64_t> ids = bpe.encode("Hello world");
//   bpe.save("run/tokenizer.txt");
//   std::unique_ptr<Tokenizer> again = load_tokenizer("run/tokenizer.txt");
//   again->decode(ids) == "Hello world";
//
// Note [Byte-level BPE]
// Training (Sennrich et al. 2016, on bytes as GPT-2): the corpus is pre-split
// into words (split_words, data/pretokenize.h) so that a merge never joins
// the end of one word and the start of the next; each distinct word is
// counted once with its frequency. Every word starts as its bytes, tokens
// 0..255. Each step merges the most frequent adjacent pair (a, b) into the
// new token 256 + k, replacing its occurrences in every word left to right
// ("aaa" with (a, a) gives "Aa"). Ties between equally frequent pairs go to
// the smallest (a, b), comparing a first, so training is deterministic.
// Pair counts are updated incrementally: a merge visits only the words that
// hold its pair (an index from pair to words), subtracts their old pairs and
// adds their new ones, and the most frequent pair comes from a heap whose
// stale entries are skipped when popped. Training stops early when no pair
// is left (every word a single token); vocab_size() then says how many
// tokens it learned.
// Encoding pre-splits the same way and, in every word, merges the adjacent
// pair of lowest rank (the earliest merge) until none of its pairs is a
// merge: the merges training made, in the order it made them. A word's
// tokens' bytes concatenate to the word, so decode(encode(s)) == s for EVERY
// byte string s, invalid UTF-8 and NUL bytes included.
//
// Note [Tokenizer files]
// Line-based text, the first line naming the format and its version:
//   kiln-byte-bpe v1 merges <N>       then N lines "<a> <b>": merge k (0-based)
//                                      makes token 256 + k from tokens a and b,
//                                      both < 256 + k (decimal ids)
//   kiln-char-tokenizer v1 chars <N>  then N lines "U+XXXX": token k is that
//                                      code point; strictly increasing
// Lines end with "\n"; nothing follows the last entry. A file is written to a
// temporary file in the same folder, flushed to disk and renamed over the
// target, so an interrupted save leaves the previous file whole. Loading
// checks everything and names the file and line of the first problem.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The token ids of `text`. Throws kiln::Error for text the tokenizer
  // cannot represent (the character tokenizer's unknown characters).
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // The text of `ids`; throws kiln::Error naming the position and value of
  // an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // Ids are 0..vocab_size() - 1.
  virtual int64_t vocab_size() const = 0;
  // The tokenizer file's text (Note [Tokenizer files]), which
  // tokenizer_from_text() reads back: what save() writes, and what a
  // checkpoint holds.
  virtual std::string to_text() const = 0;
  // Writes to_text() to `path` atomically.
  void save(const std::string& path) const;
  // "char" or "bpe".
  virtual std::string name() const = 0;
};

// A tokenizer of Unicode code points: token k is the k-th smallest code
// point of its vocabulary.
class CharTokenizer : public Tokenizer {
 public:
  // `code_points` must be strictly increasing Unicode scalar values, at least one.
  explicit CharTokenizer(std::vector<char32_t> code_points);
  // The distinct code points of `corpus`, sorted. Throws kiln::Error naming
  // the byte offset when the corpus is not well-formed UTF-8, or is empty.
  static CharTokenizer from_corpus(std::string_view corpus);
  // Reads a kiln-char-tokenizer file; errors name the file and line.
  static CharTokenizer load(const std::string& path);
  // The same from the file's text; errors name `source` and the line.
  static CharTokenizer from_text(std::string text, std::string source);

  // Throws kiln::Error naming the byte offset of invalid UTF-8, or the
  // character (U+XXXX) and its byte offset when it is not in the vocabulary.
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(code_points_.size()); }
  std::string to_text() const override;
  std::string name() const override { return "char"; }

  const std::vector<char32_t>& code_points() const { return code_points_; }

 private:
  // The id of `c`, or -1.
  int64_t id_of(char32_t c) const;

  std::vector<char32_t> code_points_;  // (vocab_size), increasing
  std::vector<int32_t> ascii_ids_;     // (128): the id of each ASCII character, or -1
};

// Byte-level BPE (Note [Byte-level BPE]).
class ByteBpeTokenizer : public Tokenizer {
 public:
  // Token 256 + k is merges[k].first followed by merges[k].second.
  using Merge = std::pair<int32_t, int32_t>;

  // The 256 byte tokens and no merges.
  ByteBpeTokenizer() : ByteBpeTokenizer(std::vector<Merge>{}) {}
  // Requires both tokens of merges[k] < 256 + k; throws kiln::Error naming k otherwise.
  explicit ByteBpeTokenizer(std::vector<Merge> merges);
  // Learns vocab_size - 256 merges from `corpus` (fewer if it runs out of
  // pairs). Requires 256 <= vocab_size <= 2^31 - 1.
  static ByteBpeTokenizer train(std::string_view corpus, int64_t vocab_size);
  // Reads a kiln-byte-bpe file; errors name the file and line.
  static ByteBpeTokenizer load(const std::string& path);
  // The same from the file's text; errors name `source` and the line.
  static ByteBpeTokenizer from_text(std::string text, std::string source);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return 256 + static_cast<int64_t>(merges_.size()); }
  std::string to_text() const override;
  std::string name() const override { return "bpe"; }

  const std::vector<Merge>& merges() const { return merges_; }
  // The bytes token `id` stands for; requires 0 <= id < vocab_size().
  const std::string& token_bytes(int64_t id) const;

 private:
  // Appends the tokens of one pre-split word to `out`.
  void encode_word(std::string_view word, std::vector<int64_t>& out) const;
  // The rank (merge index) of pair (a, b), or -1.
  int32_t rank_of(int32_t a, int32_t b) const;

  std::vector<Merge> merges_;
  std::vector<std::string> bytes_;                  // (vocab_size): each token's bytes
  std::unordered_map<uint64_t, int32_t> ranks_;     // (a << 32 | b) -> merge index
};

// Reads a tokenizer file of either kind (Note [Tokenizer files]); throws
// kiln::Error naming the file when its first line names no known format.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The same from a tokenizer file's text (Tokenizer::to_text()); errors name
// `source`, e.g. "checkpoint 'run.ckpt' (its tokenizer)".
std::unique_ptr<Tokenizer> tokenizer_from_text(std::string text, std::string source);

}  // namespace kiln::data
