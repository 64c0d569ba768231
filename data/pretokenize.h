// The pre-split of byte-level BPE: text into "words" that merges never cross,
// as GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// splits it: contractions, letter runs, digit runs and runs of other
// characters, each taking one preceding space (U+0020) with it, and runs of
// whitespace, of which the last character is left to the next word when a
// word follows ("a  b" -> "a", " ", " b").
//
// Note [Pre-split character classes]
// GPT-2 classifies code points with Unicode's tables (\p{L}, \p{N}, and \s
// as the White_Space property, which the `regex` module GPT-2 uses applies:
// U+001C..U+001F are not whitespace there, though Python's str.isspace says
// so). Kiln carries no Unicode database, so the classes are exact for ASCII,
// Latin-1 and Latin Extended-A/B and approximated by block above: whitespace
// (U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000); combining marks, general punctuation, symbols, arrows, box
// drawing, CJK punctuation, private use and emoji blocks as "other"; every
// remaining code point as a letter (most of them are letters of some
// script). Against Python's `regex` the split agrees on every Latin-1 and
// Latin Extended code point and on all but about 2.5% of the assigned ones
// (symbols, marks and digits of other scripts). Bytes that are not
// well-formed UTF-8 are "other", one byte each. The split is deterministic
// and covers its input: the words concatenate back to the text, whatever
// bytes it holds.
//
//   split_words("Hello world's  end")  // "Hello", " world", "'s", " ", " end"
#pragma once

#include <string_view>
#include <vector>

namespace kiln::data {

// The words of `text`, in order, as views into it; empty for empty text.
std::vector<std::string_view> split_words(std::string_view text);

}  // namespace kiln::data
