// TensorDict: named tensors in insertion order, the currency of state
// dicts (model and optimizer) and of safetensors files.
//
//   TensorDict d;
//   d.insert("fc.weight", w);
//   Tensor w2 = d.at("fc.weight");
//   for (const auto& [name, t] : d) ...
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace kiln {

class TensorDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  TensorDict() = default;
  TensorDict(std::initializer_list<Entry> entries);

  // Adds `name`; throws if it is already present or the tensor is undefined.
  void insert(std::string name, Tensor tensor);
  // Adds `name`, or replaces the tensor stored under it (keeping its position).
  void insert_or_assign(std::string name, Tensor tensor);
  bool contains(std::string_view name) const { return index_.count(std::string(name)) != 0; }
  // The tensor stored under `name`; throws naming it (and some present names) when absent.
  const Tensor& at(std::string_view name) const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<std::string> keys() const;
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace kiln
