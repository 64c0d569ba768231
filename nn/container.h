// Containers of modules, as torch.nn.Sequential, ModuleList and ModuleDict.
//
//   auto net = std::make_shared<Sequential>(std::make_shared<Linear>(784, 128), std::make_shared<ReLU>(),
//                                           std::make_shared<Linear>(128, 10));
//   Tensor logits = (*net)(x);            // each module's output feeds the next
//   auto fc2 = net->at<Linear>(2);        // typed access, throws if module 2 is not a Linear
//
// The modules are registered as submodules named "0", "1", ... (or by the
// names given), so parameters read "0.weight", "2.bias" and a state dict
// from the equivalent torch.nn.Sequential loads as is.
#pragma once

#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace kiln::nn {

namespace container_internal {

// Module `key` of `container` cast to M, or an error naming both types.
template <class M>
std::shared_ptr<M> module_as(const std::shared_ptr<Module>& module, const std::string& container,
                             const std::string& key) {
  auto typed = std::dynamic_pointer_cast<M>(module);
  KILN_CHECK(typed != nullptr, container, ": module ", key, " is a ", module->name(), ", not a ",
             type_name(typeid(M)));
  return typed;
}

}  // namespace container_internal

// Runs its modules in order, each on the outputs of the one before, as
// tensor lists (Note [Modules of several tensors]): a module returning
// (y, bias) feeds one taking two inputs. An empty Sequential returns its
// input, as torch.
//   auto block = std::make_shared<Sequential>(attention, split_bias, add_bias);
//   TensorList out = (*block)({x, mask});
class Sequential : public Module {
 public:
  Sequential() = default;
  template <std::derived_from<Module>... M>
  explicit Sequential(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);
  // Named submodules, as torch.nn.Sequential(OrderedDict(...)).
  explicit Sequential(const std::vector<NamedModule>& modules);

  // Appends `module` under the name str(size()), or under `name`.
  void push_back(std::shared_ptr<Module> module);
  void push_back(const std::string& name, std::shared_ptr<Module> module);

  // Negative indices count from the end, as in Python.
  const std::shared_ptr<Module>& operator[](int64_t index) const;
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    return container_internal::module_as<M>((*this)[index], "Sequential", std::to_string(index));
  }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

  // Throws naming the module if the last one returns several tensors.
  Tensor forward(const Tensor& input) override;
  TensorList forward_many(const TensorList& inputs) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Holds modules in a list, registered as "0", "1", ...; it has no forward:
// the owning module iterates over it.
//   for (const auto& block : *blocks) x = (*block)(x);
class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <std::derived_from<Module>... M>
  explicit ModuleList(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules);

  void push_back(std::shared_ptr<Module> module);
  void extend(const std::vector<std::shared_ptr<Module>>& modules);

  // Negative indices count from the end, as in Python.
  const std::shared_ptr<Module>& operator[](int64_t index) const;
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    return container_internal::module_as<M>((*this)[index], "ModuleList", std::to_string(index));
  }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

  // Throws: a list has no single computation.
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Holds modules by name in insertion order; no forward.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(const std::vector<NamedModule>& modules);

  // Adds `module` under `name`; names follow register_module's rules.
  void insert(const std::string& name, std::shared_ptr<Module> module);
  bool contains(const std::string& name) const;
  // Throws naming the missing key and the keys present.
  const std::shared_ptr<Module>& operator[](const std::string& name) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& name) const {
    return container_internal::module_as<M>((*this)[name], "ModuleDict", "'" + name + "'");
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  std::vector<NamedModule>::const_iterator begin() const { return items_.begin(); }
  std::vector<NamedModule>::const_iterator end() const { return items_.end(); }

  // Throws: a dict has no single computation.
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<NamedModule> items_;
};

}  // namespace kiln::nn
