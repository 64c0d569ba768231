#include "tensor/tensor_dict.h"

#include <algorithm>
#include <sstream>

namespace kiln {

TensorDict::TensorDict(std::initializer_list<Entry> entries) {
  for (const auto& [name, tensor] : entries) insert(name, tensor);
}

void TensorDict::insert(std::string name, Tensor tensor) {
  KILN_CHECK(tensor.defined(), "TensorDict::insert: the tensor for '", name, "' is undefined");
  KILN_CHECK(!contains(name), "TensorDict::insert: the name '", name, "' is already present (",
             "use insert_or_assign to replace it)");
  index_.emplace(name, entries_.size());
  entries_.emplace_back(std::move(name), std::move(tensor));
}

void TensorDict::insert_or_assign(std::string name, Tensor tensor) {
  KILN_CHECK(tensor.defined(), "TensorDict::insert_or_assign: the tensor for '", name, "' is undefined");
  auto it = index_.find(name);
  if (it == index_.end()) {
    insert(std::move(name), std::move(tensor));
  } else {
    entries_[it->second].second = std::move(tensor);
  }
}

const Tensor& TensorDict::at(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it != index_.end()) return entries_[it->second].second;
  // A checkpoint may hold thousands of names; a few are enough to show a
  // prefix mismatch such as "model.fc1.weight" vs "fc1.weight".
  constexpr size_t kShown = 8;
  std::ostringstream names;
  for (size_t i = 0; i < std::min(entries_.size(), kShown); ++i)
    names << (i ? ", " : "") << "'" << entries_[i].first << "'";
  if (entries_.size() > kShown) names << ", ...";
  KILN_FAIL("TensorDict::at: no tensor named '", name, "' (the dict holds ", entries_.size(), " names: ", names.str(),
            ")");
}

std::vector<std::string> TensorDict::keys() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& entry : entries_) names.push_back(entry.first);
  return names;
}

}  // namespace kiln
