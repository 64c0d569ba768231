// RankOutput: turns the bytes one process writes to its stdout and stderr
// into whole lines prefixed with its rank, and remembers its last lines for
// the message kiln-run prints when the process fails.
//
//   RankOutput out(/*rank=*/3);
//   std::string text = out.feed(Stream::Out, bytes, n);  // "[rank 3] ...\n" lines, maybe none
//   write(1, text.data(), text.size());
//   text = out.finish(Stream::Out);                      // the unterminated last line, if any
//
// Lines of the processes interleave at line boundaries only: kiln-run writes
// each prefixed line with one write(), and holds back a partial line until
// its newline arrives (or the stream ends). A line longer than
// kMaxLineBytes is passed on in pieces of that size, each prefixed, so that
// a process writing without newlines cannot make kiln-run hold unbounded
// memory.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace kiln::apps::run {

enum class Stream { Out, Err };

class RankOutput {
 public:
  static constexpr size_t kMaxLineBytes = 64 * 1024;
  static constexpr size_t kTailLines = 20;

  explicit RankOutput(int rank);

  // The complete lines that `data` finishes, each with its prefix and a
  // newline, ready to write to the stream's own file descriptor.
  std::string feed(Stream stream, const char* data, size_t size);

  // The stream ended: its unterminated last line with a prefix and a
  // newline, or "" if it ended on a newline.
  std::string finish(Stream stream);

  // The last kTailLines lines of both streams in the order they arrived,
  // without prefixes; lines from stderr carry no mark of it.
  std::vector<std::string> tail() const;

  int rank() const { return rank_; }

 private:
  std::string emit(const std::string& line);

  int rank_;
  std::string prefix_;                  // "[rank R] "
  std::array<std::string, 2> partial_;  // per stream: bytes after the last newline
  std::deque<std::string> tail_;
};

}  // namespace kiln::apps::run
