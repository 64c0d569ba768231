// The tokenizers: the pre-split against GPT-2's regex, BPE merges against
// hand-computed ones and a naive reference trainer, round trips of arbitrary
// bytes and of the fortunes corpus, the files (save, load, malformed input,
// interrupted saves) and the character tokenizer's errors.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "data/data_test_util.h"
#include "data/pretokenize.h"
#include "data/text_dataset.h"
#include "data/tokenizer.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using Merge = ByteBpeTokenizer::Merge;
using Words = std::vector<std::string_view>;

// A fresh folder per test, removed afterwards.
class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_tokenizer_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& contents) const {
    std::ofstream(path(name), std::ios::binary) << contents;
    return path(name);
  }

  fs::path dir_;
};

// ---- the pre-split ----------------------------------------------------------------------

// The expected words are what Python's `regex` module gives for GPT-2's pattern.
TEST(SplitWords, MatchesGpt2Pattern) {
  EXPECT_EQ(split_words("Hello world's  end"), (Words{"Hello", " world", "'s", " ", " end"}));
  EXPECT_EQ(split_words("I'll say: \"don't!\"\n\n  x42 y"),
            (Words{"I", "'ll", " say", ":", " \"", "don", "'t", "!\"", "\n\n ", " x", "42", " y"}));
  EXPECT_EQ(split_words("tab\tnew\nline  "), (Words{"tab", "\t", "new", "\n", "line", "  "}));
  EXPECT_EQ(split_words("na\u00efve caf\u00e9 \u00bd \u201cq\u201d"),
            (Words{"na\u00efve", " caf\u00e9", " \u00bd", " \u201c", "q", "\u201d"}));
  EXPECT_EQ(split_words(" 's 'S x'"), (Words{" '", "s", " '", "S", " x", "'"}));
  EXPECT_EQ(split_words("a\u00a0b\u3000c"), (Words{"a", "\u00a0", "b", "\u3000", "c"}));
  EXPECT_EQ(split_words("\x1c\x1d a"), (Words{"\x1c\x1d", " a"}));  // not whitespace for `regex`
  EXPECT_TRUE(split_words("").empty());
}

// Bytes that are not UTF-8 form runs of "other" characters, and NUL is one too.
TEST(SplitWords, CoversBytesThatAreNotUtf8) {
  using namespace std::string_view_literals;
  EXPECT_EQ(split_words("ab\xff\xfe cd"sv), (Words{"ab", "\xff\xfe", " cd"}));
  EXPECT_EQ(split_words("x\0\0y \xc3"sv), (Words{"x", "\0\0"sv, "y", " \xc3"}));
}

// ---- byte-level BPE: training ----------------------------------------------------------------

// "low lower lowest low": words "low", " lower", " lowest", " low". By hand:
// (l,o) and (o,w) both occur 4 times, the tie goes to the smaller pair
// (108,111) -> 256 "lo"; then (256,w) 4 -> 257 "low"; (' ',257) 3 -> 258
// " low"; (258,e) 2 -> 259 " lowe"; then (259,r), (259,s), (s,t) once each:
// the smallest, (115,116) -> 260 "st"; (259,114) -> 261 " lower"; (259,260)
// -> 262 " lowest". Then every word is one token and training stops.
TEST(ByteBpe, TrainsTheHandComputedMerges) {
  const std::vector<Merge> expected{{108, 111}, {256, 119}, {32, 257}, {258, 101}, {115, 116}, {259, 114}, {259, 260}};
  const ByteBpeTokenizer all = ByteBpeTokenizer::train("low lower lowest low", 1000);
  EXPECT_EQ(all.merges(), expected);
  EXPECT_EQ(all.vocab_size(), 263);  // stopped early: no pair left
  EXPECT_EQ(all.token_bytes(262), " lowest");
  EXPECT_EQ(all.encode("low lower lowest low"), (std::vector<int64_t>{257, 261, 262, 258}));
  // " lowst": lo, low, " low", then st (rank 4); never " lowe".
  EXPECT_EQ(all.encode(" lowst"), (std::vector<int64_t>{258, 260}));

  const ByteBpeTokenizer four = ByteBpeTokenizer::train("low lower lowest low", 260);
  EXPECT_EQ(four.merges(), std::vector<Merge>(expected.begin(), expected.begin() + 4));
  EXPECT_EQ(four.vocab_size(), 260);
}

// "aa bb": words "aa" and " bb", every pair once. Ties go to the smallest
// pair: (32,98) " b", then (97,97) "aa", then (256,98) " bb". Had a merge
// crossed the word boundary, (97,32) "a " (smaller than (97,97)) would be second.
TEST(ByteBpe, BreaksTiesBySmallestPairAndNeverCrossesWords) {
  EXPECT_EQ(ByteBpeTokenizer::train("aa bb", 300).merges(), (std::vector<Merge>{{32, 98}, {97, 97}, {256, 98}}));
}

// "aaa" holds (a,a) twice, overlapping: merged left to right it becomes
// "aa"+"a", and "aaaaa" encodes as "aa", "aaa" as GPT-2's bpe() does.
TEST(ByteBpe, MergesOverlappingPairsLeftToRight) {
  const ByteBpeTokenizer bpe = ByteBpeTokenizer::train("aaa", 300);
  EXPECT_EQ(bpe.merges(), (std::vector<Merge>{{97, 97}, {256, 97}}));
  EXPECT_EQ(bpe.encode("aaaaa"), (std::vector<int64_t>{256, 257}));
  EXPECT_EQ(bpe.encode("aaaa"), (std::vector<int64_t>{256, 256}));
}

// The plain algorithm, recounting every pair before each merge.
std::vector<Merge> naive_bpe(std::string_view corpus, int64_t vocab_size) {
  std::map<std::string, int64_t> counts;
  for (std::string_view w : split_words(corpus)) ++counts[std::string(w)];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) words.push_back({std::vector<int32_t>(w.begin(), w.end()), c});
  for (auto& [tokens, c] : words)
    for (int32_t& t : tokens) t = static_cast<uint8_t>(t);
  std::vector<Merge> merges;
  while (256 + static_cast<int64_t>(merges.size()) < vocab_size) {
    std::map<Merge, int64_t> pairs;
    for (const auto& [tokens, c] : words)
      for (size_t i = 0; i + 1 < tokens.size(); ++i) pairs[{tokens[i], tokens[i + 1]}] += c;
    if (pairs.empty()) break;
    Merge best = pairs.begin()->first;  // the map is ordered: the first maximum is the smallest pair
    for (const auto& [p, c] : pairs)
      if (c > pairs[best]) best = p;
    const int32_t merged = 256 + static_cast<int32_t>(merges.size());
    merges.push_back(best);
    for (auto& [tokens, c] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i + 1 < tokens.size() && Merge{tokens[i], tokens[i + 1]} == best) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(tokens[i]);
        }
      }
      tokens = out;
    }
  }
  return merges;
}

// Random text over a small alphabet has many ties and many words that each
// merge changes: the incremental counts must agree with recounting.
TEST(ByteBpe, IncrementalTrainingMatchesNaiveRecounting) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "aab  bcd\n.'\xc3\xa9\xff";
  for (int trial = 0; trial < 3; ++trial) {
    std::string corpus;
    for (int i = 0; i < 3000; ++i) corpus += alphabet[rng() % alphabet.size()];
    SCOPED_TRACE(trial);
    EXPECT_EQ(ByteBpeTokenizer::train(corpus, 400).merges(), naive_bpe(corpus, 400));
  }
}

TEST(ByteBpe, RejectsBadVocabSizesAndMerges) {
  expect_error_parts([] { ByteBpeTokenizer::train("abc", 255); },
                     {"ByteBpeTokenizer::train: vocab_size must be in [256, 2^31 - 1]", "got 255"});
  expect_error_parts([] { ByteBpeTokenizer(std::vector<Merge>{{97, 98}, {97, 258}}); },
                     {"merge 1 joins tokens 97 and 258", "only join tokens below 257"});
  expect_error_parts([] { ByteBpeTokenizer(std::vector<Merge>{{97, 98}, {97, 98}}); },
                     {"merge 1 (97 98) repeats merge 0"});
  expect_error_parts([] { ByteBpeTokenizer().decode({97, 256}); },
                     {"ByteBpeTokenizer::decode: id 256 at position 1 is outside the vocabulary [0, 256)"});
  expect_error_parts([] { ByteBpeTokenizer().decode({-1}); }, {"id -1 at position 0"});
}

// ---- byte-level BPE: round trips ----------------------------------------------------------------

// Random byte strings: mostly text-like bytes, so that merges apply, and
// uniform bytes (NUL, invalid UTF-8, lone continuation bytes) in between.
std::string random_bytes(std::mt19937_64& rng, size_t max_length) {
  static const std::string text_like = "the quick brown fox  jumps\n\t'sll \xc3\xa9\xe2\x80\x9c";
  std::string s(rng() % (max_length + 1), '\0');
  for (char& c : s) c = rng() % 3 == 0 ? static_cast<char>(rng() % 256) : text_like[rng() % text_like.size()];
  return s;
}

TEST(ByteBpe, RoundTripsRandomByteStrings) {
  std::mt19937_64 rng(2024);
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += random_bytes(rng, 200);
  const ByteBpeTokenizer bpe = ByteBpeTokenizer::train(corpus, 600);
  ASSERT_EQ(bpe.vocab_size(), 600);
  int64_t merged_tokens = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::string s = random_bytes(rng, 64);
    const std::vector<int64_t> ids = bpe.encode(s);
    ASSERT_EQ(bpe.decode(ids), s) << "string " << i;
    ASSERT_LE(ids.size(), s.size());
    merged_tokens += std::count_if(ids.begin(), ids.end(), [](int64_t id) { return id >= 256; });
  }
  EXPECT_GT(merged_tokens, 1000);  // the merges did apply
  // Every single byte alone, and all 256 in a row.
  std::string all;
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(bpe.encode(one), std::vector<int64_t>{b});
    all += one;
  }
  EXPECT_EQ(bpe.decode(bpe.encode(all)), all);
}

// Encoding runs in O(n log n) per word: a single 200,000-letter word is no problem.
TEST(ByteBpe, EncodesAVeryLongWord) {
  const ByteBpeTokenizer bpe = ByteBpeTokenizer::train("aaaa abab", 300);
  const std::string word(200000, 'a');
  const std::vector<int64_t> ids = bpe.encode(word);
  EXPECT_EQ(bpe.decode(ids), word);
  EXPECT_LT(ids.size(), word.size() / 3);
}

TEST(ByteBpe, RoundTripsTheFortunesCorpus) {
  std::string corpus;
  try {
    corpus = load_fortunes();
  } catch (const Error& e) {
    GTEST_SKIP() << "the fortunes corpus is not installed: " << e.message();
  }
  const ByteBpeTokenizer bpe = ByteBpeTokenizer::train(corpus, 1024);
  EXPECT_EQ(bpe.vocab_size(), 1024);
  const std::vector<int64_t> ids = bpe.encode(corpus);
  EXPECT_EQ(bpe.decode(ids), corpus);
  EXPECT_LT(ids.size(), corpus.size() / 2);  // English compresses to well under 2 bytes a token at 1024
  const CharTokenizer chars = CharTokenizer::from_corpus(corpus);
  EXPECT_EQ(chars.decode(chars.encode(corpus)), corpus);
}

// ---- files ---------------------------------------------------------------------------------

TEST_F(TokenizerFiles, BpeSaveAndLoadGiveIdenticalEncodings) {
  std::mt19937_64 rng(5);
  std::string corpus;
  for (int i = 0; i < 100; ++i) corpus += random_bytes(rng, 100);
  const ByteBpeTokenizer bpe = ByteBpeTokenizer::train(corpus, 500);
  bpe.save(path("merges.txt"));
  const ByteBpeTokenizer loaded = ByteBpeTokenizer::load(path("merges.txt"));
  EXPECT_EQ(loaded.merges(), bpe.merges());
  const std::unique_ptr<Tokenizer> any = load_tokenizer(path("merges.txt"));
  EXPECT_EQ(any->name(), "bpe");
  EXPECT_EQ(any->vocab_size(), 500);
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_bytes(rng, 80);
    EXPECT_EQ(loaded.encode(s), bpe.encode(s));
    EXPECT_EQ(any->encode(s), bpe.encode(s));
  }
  // The documented format: a header, then one merge per line.
  std::ifstream in(path("merges.txt"));
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  EXPECT_EQ(header, "kiln-byte-bpe v1 merges 244");
  EXPECT_EQ(first, std::to_string(bpe.merges()[0].first) + " " + std::to_string(bpe.merges()[0].second));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temporary file left
}

TEST_F(TokenizerFiles, MalformedMergesFilesNameFileAndLine) {
  struct Case {
    std::string contents;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases{
      {"", {"is empty; expected the header 'kiln-byte-bpe v1 merges <count>'"}},
      {"hello\n97 98\n", {"line 1: the header is 'hello'; expected 'kiln-byte-bpe v1 merges <count>'"}},
      {"kiln-byte-bpe v2 merges 1\n97 98\n", {"line 1: unsupported header 'kiln-byte-bpe v2 merges 1'"}},
      {"kiln-byte-bpe v1 merges x\n", {"line 1: the count 'x' in the header is not a decimal number"}},
      {"kiln-byte-bpe v1 merges 2\n97 98\n97 x\n", {"line 3: '97 x' is not a merge written as two token ids"}},
      {"kiln-byte-bpe v1 merges 1\n-1 98\n", {"line 2: '-1 98' is not a merge"}},
      {"kiln-byte-bpe v1 merges 1\n97  98\n", {"line 2: '97  98' is not a merge"}},
      {"kiln-byte-bpe v1 merges 1\n97 98 99\n", {"line 2: '97 98 99' is not a merge"}},
      {"kiln-byte-bpe v1 merges 2\n97 98\n256 257\n",
       {"line 3: merge 1 joins tokens 256 and 257, but only tokens below 257 exist before it"}},
      {"kiln-byte-bpe v1 merges 2\n97 98\n97 98\n", {"line 3: merge '97 98' repeats line 2"}},
      {"kiln-byte-bpe v1 merges 3\n97 98\n99 100\n",
       {"line 3: the header declares 3 merges but the file ends after 2 (a truncated file?)"}},
      {"kiln-byte-bpe v1 merges 2\n97 98\n99 1", {"line 3: the line does not end with a newline (a truncated file?)"}},
      {"kiln-byte-bpe v1 merges 1\n97 98\n99 100\n", {"line 3: the header declares 1 merges but more lines follow"}},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].contents);
    const std::string file = write("bad" + std::to_string(k) + ".txt", cases[k].contents);
    std::vector<std::string> parts = cases[k].parts;
    parts.push_back("ByteBpeTokenizer::load: '" + file + "'");
    expect_error_parts([&] { ByteBpeTokenizer::load(file); }, parts);
  }
  expect_error_parts([&] { load_tokenizer(write("other.txt", "hello\n")); },
                     {"load_tokenizer: '" + path("other.txt") + "' is not a Kiln tokenizer file", "'hello'"});
  expect_error_parts([&] { load_tokenizer(path("missing.txt")); },
                     {"load_tokenizer: cannot open '" + path("missing.txt") + "'"});
}

// Limits the size of files this process writes to `bytes` (RLIMIT_FSIZE),
// with SIGXFSZ ignored so that a write past it fails with EFBIG instead of
// killing the process; restores both on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : old_handler_(std::signal(SIGXFSZ, SIG_IGN)) {
    ::getrlimit(RLIMIT_FSIZE, &old_limit_);
    rlimit limit = old_limit_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_limit_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_limit_{};
  void (*old_handler_)(int);
};

// A save interrupted half-way leaves the previous file whole: killed by a
// signal (SIGXFSZ: the file size limit stops the process in its first
// write), or failing with a write error (the same limit with the signal
// ignored), or failing to rename.
TEST_F(TokenizerFiles, AnInterruptedSaveLeavesTheOldFileIntact) {
  const std::string file = path("merges.txt");
  const ByteBpeTokenizer old_bpe = ByteBpeTokenizer::train("low lower lowest low", 1000);
  old_bpe.save(file);
  std::string corpus;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100; ++i) corpus += random_bytes(rng, 100);
  const ByteBpeTokenizer new_bpe = ByteBpeTokenizer::train(corpus, 800);

  // "fast": the child is forked at the statement, so it writes into this
  // test's folder (the "threadsafe" style would rerun SetUp in a new process).
  GTEST_FLAG_SET(death_test_style, "fast");
  EXPECT_EXIT(
      {
        rlimit limit;
        ::getrlimit(RLIMIT_FSIZE, &limit);
        limit.rlim_cur = 16;
        ::setrlimit(RLIMIT_FSIZE, &limit);
        new_bpe.save(file);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGXFSZ), "");
  EXPECT_EQ(ByteBpeTokenizer::load(file).merges(), old_bpe.merges());
  // The killed child's temporary file stays behind, cut at 16 bytes.
  int64_t leftovers = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename() == "merges.txt") continue;
    EXPECT_TRUE(entry.path().filename().string().starts_with("merges.txt.tmp.")) << entry.path();
    EXPECT_EQ(fs::file_size(entry.path()), 16u);
    fs::remove(entry.path());
    ++leftovers;
  }
  EXPECT_EQ(leftovers, 1);

  {
    FileSizeLimit limit(16);
    expect_error_parts([&] { new_bpe.save(file); },
                       {"Tokenizer::save: cannot write '" + file + ".tmp.", "at byte 16: File too large"});
  }
  EXPECT_EQ(ByteBpeTokenizer::load(file).merges(), old_bpe.merges());

  fs::create_directories(path("folder"));
  expect_error_parts([&] { new_bpe.save(path("folder")); },
                     {"Tokenizer::save: cannot rename '" + path("folder") + ".tmp.", "' to '" + path("folder")});
  // Failed saves remove their temporary files.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2);  // merges.txt, folder
}

// ---- the character tokenizer ----------------------------------------------------------------

TEST(CharTokenizer, VocabularyIsTheSortedCodePoints) {
  const CharTokenizer chars = CharTokenizer::from_corpus("hello, world\n");
  EXPECT_EQ(chars.code_points(), (std::vector<char32_t>{'\n', ' ', ',', 'd', 'e', 'h', 'l', 'o', 'r', 'w'}));
  EXPECT_EQ(chars.name(), "char");
  EXPECT_EQ(chars.encode("hello"), (std::vector<int64_t>{5, 4, 6, 6, 7}));
  EXPECT_EQ(chars.decode({9, 7, 8, 6, 3}), "world");
  // Code points, not bytes: é is one token, and ∑ (U+2211) sorts after it.
  const CharTokenizer unicode = CharTokenizer::from_corpus("h\u00e9llo \u2211");
  EXPECT_EQ(unicode.code_points(), (std::vector<char32_t>{' ', 'h', 'l', 'o', 0xE9, 0x2211}));
  EXPECT_EQ(unicode.encode("\u2211\u00e9h"), (std::vector<int64_t>{5, 4, 1}));
}

TEST(CharTokenizer, RoundTripsEveryTextOfItsVocabulary) {
  const std::string corpus = "abc \n\t\u00e9\u00df\u4e2d\U0001F600\x7f\x01";
  const CharTokenizer chars = CharTokenizer::from_corpus(corpus);
  ASSERT_EQ(chars.vocab_size(), 12);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::vector<int64_t> ids(rng() % 40);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % 12);
    const std::string text = chars.decode(ids);
    ASSERT_EQ(chars.encode(text), ids);
    ASSERT_EQ(chars.decode(chars.encode(text)), text);
  }
}

TEST(CharTokenizer, ErrorsNameTheCharacterAndOffset) {
  const CharTokenizer chars = CharTokenizer::from_corpus("h\u00e9\u2211 ");
  expect_error_parts([&] { chars.encode("\u00e9\u2211x"); },
                     {"CharTokenizer::encode: the character U+0078 'x' at byte 5 is not in the vocabulary of 4 "
                      "characters"});
  expect_error_parts([&] { chars.encode("h\n"); }, {"the character U+000A at byte 1 is not in the vocabulary"});
  expect_error_parts([&] { chars.encode("h\xff"); },
                     {"CharTokenizer::encode: the text is not UTF-8: byte 1 (0xff) does not start"});
  expect_error_parts([&] { chars.encode("\xe2\x88"); }, {"byte 0 (0xe2)"});  // truncated sequence
  expect_error_parts([&] { chars.decode({0, 4}); },
                     {"CharTokenizer::decode: id 4 at position 1 is outside the vocabulary [0, 4)"});
  expect_error_parts([] { CharTokenizer::from_corpus("ok\xc0\xaf"); },  // an overlong '/'
                     {"CharTokenizer::from_corpus: the corpus is not UTF-8: byte 2 (0xc0)"});
  expect_error_parts([] { CharTokenizer::from_corpus(""); }, {"CharTokenizer::from_corpus: the corpus is empty"});
  expect_error_parts([] { CharTokenizer(std::vector<char32_t>{'b', 'a'}); },
                     {"the code points must increase, but 0 is U+0062 'b' and 1 is U+0061 'a'"});
  expect_error_parts([] { CharTokenizer(std::vector<char32_t>{0xD800}); },
                     {"code point 0 (U+D800) is not a Unicode scalar value"});
  expect_error_parts([] { CharTokenizer(std::vector<char32_t>{}); }, {"CharTokenizer: the vocabulary is empty"});
}

TEST_F(TokenizerFiles, CharSaveAndLoad) {
  const CharTokenizer chars = CharTokenizer::from_corpus("Hi \u00e9\U0001F600\n");
  chars.save(path("chars.txt"));
  std::ifstream in(path("chars.txt"));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, "kiln-char-tokenizer v1 chars 6\nU+000A\nU+0020\nU+0048\nU+0069\nU+00E9\nU+1F600\n");
  EXPECT_EQ(CharTokenizer::load(path("chars.txt")).code_points(), chars.code_points());
  const std::unique_ptr<Tokenizer> any = load_tokenizer(path("chars.txt"));
  EXPECT_EQ(any->name(), "char");
  EXPECT_EQ(any->encode("Hi \u00e9"), chars.encode("Hi \u00e9"));
}

TEST_F(TokenizerFiles, MalformedCharFilesNameFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"kiln-char-tokenizer v1 chars 0\n", "line 1: the header declares 0 characters"},
      {"kiln-char-tokenizer v1 chars 2\nU+0061\nU+0061\n", "line 3: U+0061 'a' does not come after U+0061 'a'"},
      {"kiln-char-tokenizer v1 chars 1\nU+D800\n", "line 2: 'U+D800' is not a code point written U+XXXX"},
      {"kiln-char-tokenizer v1 chars 1\nU+110000\n", "line 2: 'U+110000' is not a code point"},
      {"kiln-char-tokenizer v1 chars 1\nu+0061\n", "line 2: 'u+0061' is not a code point"},
      {"kiln-char-tokenizer v1 chars 1\na\n", "line 2: 'a' is not a code point"},
      {"kiln-char-tokenizer v1 chars 2\nU+0061\n", "line 2: the header declares 2 characters but the file ends after 1"},
      {"kiln-char-tokenizer v1 chars 1\nU+0061", "line 2: the line does not end with a newline"},
      {"kiln-char-tokenizer v9 chars 1\nU+0061\n", "line 1: unsupported header"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].first);
    const std::string file = write("bad" + std::to_string(k) + ".txt", cases[k].first);
    expect_error_parts([&] { CharTokenizer::load(file); },
                       {"CharTokenizer::load: '" + file + "' " + cases[k].second});
  }
}

// A tokenizer carried as text (a checkpoint's metadata) reads back as its
// file would, and a broken text is named by the source it was given.
TEST(TokenizerText, RoundTripsBothKindsAndNamesTheSourceInErrors) {
  const std::string corpus = "the cat sat on the mat; the cat ate";
  const ByteBpeTokenizer bpe = ByteBpeTokenizer::train(corpus, 270);
  const CharTokenizer chars = CharTokenizer::from_corpus(corpus);
  for (const Tokenizer* t : std::vector<const Tokenizer*>{&bpe, &chars}) {
    std::unique_ptr<Tokenizer> back = tokenizer_from_text(t->to_text(), "a test string");
    EXPECT_EQ(back->name(), t->name());
    EXPECT_EQ(back->encode(corpus), t->encode(corpus));
    EXPECT_EQ(back->to_text(), t->to_text());
  }
  expect_error_parts([] { tokenizer_from_text("kiln-byte-bpe v1 merges 2\n97 98\n", "the tokenizer in x"); },
                     {"ByteBpeTokenizer::from_text", "the tokenizer in x line", "truncated"});
  expect_error_parts([] { tokenizer_from_text("kiln-char-tokenizer v1 chars 1\nU+zz\n", "the tokenizer in y"); },
                     {"CharTokenizer::from_text", "the tokenizer in y line 2", "U+zz"});
  expect_error_parts([] { tokenizer_from_text("not a tokenizer\n", "the tokenizer in z"); },
                     {"the tokenizer in z is not a Kiln tokenizer file", "'not a tokenizer'"});
}

}  // namespace
}  // namespace kiln::data
