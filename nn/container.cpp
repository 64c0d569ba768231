// Sequential, ModuleList and ModuleDict.
#include "nn/container.h"

namespace kiln::nn {

namespace {

// Python-style index into a container of `size` modules.
size_t checked_index(int64_t index, size_t size, const char* container) {
  int64_t n = static_cast<int64_t>(size);
  KILN_CHECK(index >= -n && index < n, container, ": index ", index, " is out of range for ", n, " modules");
  return static_cast<size_t>(index < 0 ? index + n : index);
}

}  // namespace

// ---- Sequential ----

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& module : modules) push_back(module);
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& module : modules) push_back(module);
}

Sequential::Sequential(const std::vector<NamedModule>& modules) {
  for (const auto& [name, module] : modules) push_back(name, module);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  push_back(std::to_string(modules_.size()), std::move(module));
}

void Sequential::push_back(const std::string& name, std::shared_ptr<Module> module) {
  modules_.push_back(register_module(name, std::move(module)));
}

const std::shared_ptr<Module>& Sequential::operator[](int64_t index) const {
  return modules_[checked_index(index, modules_.size(), "Sequential")];
}

Tensor Sequential::forward(const Tensor& input) {
  TensorList out = forward_many({input});
  KILN_CHECK(out.size() == 1, "Sequential: its last module, ", modules_.back()->name(), ", returned ", out.size(),
             " tensors; call the Sequential with a TensorList to receive them all");
  return std::move(out[0]);
}

TensorList Sequential::forward_many(const TensorList& inputs) {
  TensorList x = inputs;
  // Through operator(), so that hooks on the inner modules run.
  for (const auto& module : modules_) x = (*module)(x);
  return x;
}

// ---- ModuleList ----

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& module : modules) push_back(module);
}

ModuleList::ModuleList(const std::vector<std::shared_ptr<Module>>& modules) { extend(modules); }

void ModuleList::push_back(std::shared_ptr<Module> module) {
  modules_.push_back(register_module(std::to_string(modules_.size()), std::move(module)));
}

void ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& module : modules) push_back(module);
}

const std::shared_ptr<Module>& ModuleList::operator[](int64_t index) const {
  return modules_[checked_index(index, modules_.size(), "ModuleList")];
}

Tensor ModuleList::forward(const Tensor&) {
  KILN_FAIL("ModuleList has no forward: iterate over it and call its modules (for (auto& m : *list) x = (*m)(x))");
}

// ---- ModuleDict ----

ModuleDict::ModuleDict(const std::vector<NamedModule>& modules) {
  for (const auto& [name, module] : modules) insert(name, module);
}

void ModuleDict::insert(const std::string& name, std::shared_ptr<Module> module) {
  items_.emplace_back(name, register_module(name, std::move(module)));
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& item : items_) {
    if (item.first == name) return true;
  }
  return false;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& name) const {
  for (const auto& item : items_) {
    if (item.first == name) return item.second;
  }
  KILN_FAIL("ModuleDict: no module named '", name, "' (keys: ", keys(), ")");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& item : items_) out.push_back(item.first);
  return out;
}

Tensor ModuleDict::forward(const Tensor&) {
  KILN_FAIL("ModuleDict has no forward: look up its modules by name and call them");
}

}  // namespace kiln::nn
