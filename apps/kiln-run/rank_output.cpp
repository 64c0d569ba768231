#include "apps/kiln-run/rank_output.h"

namespace kiln::apps::run {

RankOutput::RankOutput(int rank) : rank_(rank), prefix_("[rank " + std::to_string(rank) + "] ") {}

std::string RankOutput::emit(const std::string& line) {
  // A CRLF line keeps its text without the carriage return in the tail, so
  // that the failure message does not jump back to column 0.
  std::string shown = line;
  if (!shown.empty() && shown.back() == '\r') shown.pop_back();
  tail_.push_back(std::move(shown));
  if (tail_.size() > kTailLines) tail_.pop_front();
  return prefix_ + line + "\n";
}

std::string RankOutput::feed(Stream stream, const char* data, size_t size) {
  std::string& partial = partial_[static_cast<size_t>(stream)];
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') continue;
    partial.append(data + start, i - start);
    out += emit(partial);
    partial.clear();
    start = i + 1;
  }
  partial.append(data + start, size - start);
  while (partial.size() >= kMaxLineBytes) {
    out += emit(partial.substr(0, kMaxLineBytes));
    partial.erase(0, kMaxLineBytes);
  }
  return out;
}

std::string RankOutput::finish(Stream stream) {
  std::string& partial = partial_[static_cast<size_t>(stream)];
  if (partial.empty()) return "";
  std::string out = emit(partial);
  partial.clear();
  return out;
}

std::vector<std::string> RankOutput::tail() const { return {tail_.begin(), tail_.end()}; }

}  // namespace kiln::apps::run
