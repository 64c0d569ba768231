// Module holders: a module you call as `model(x)`, as LibTorch's
// TORCH_MODULE holders are called.
//
//   auto fc = nn::make<nn::Linear>(784, 10);  // nn::ModuleHolder<nn::Linear>
//   Tensor y = fc(x);                         // rather than (*fc)(x)
//   fc->weight;                               // the module's members
//   register_module("fc", fc);                // a holder is a shared_ptr
//
//   struct NetImpl : nn::Module { ... Tensor forward(const Tensor& x) override; };
//   KILN_MODULE(Net);                         // LibTorch's naming: Net holds a NetImpl
//   Net net(10);                              // NetImpl(10), made on the heap
//   Tensor out = net(x);
//
// Note [Module holders]
// Kiln passes modules as std::shared_ptr<M> (register_module, Sequential,
// the strategies in distributed/), and a shared_ptr can only be called as
// (*m)(x). LibTorch's answer is a holder class per module (Linear holding a
// LinearImpl); Kiln's modules already carry the plain names, so here the
// holder is one template, ModuleHolder<M>, and it *is* a std::shared_ptr<M>
// (public inheritance, no members of its own): everything that takes a
// module takes a holder unchanged, template deduction included
// (register_module("fc", holder) deduces M from the base), copies share the
// module as shared_ptrs do, and -> and * reach it. What it adds is the call:
// holder(x) and holder({x, mask}) run the module with its hooks, as (*m)(x)
// does, and any other call operator M has is forwarded too. Calling an
// empty holder (made from nullptr, or moved from) throws kiln::Error naming
// the module type instead of dereferencing null.
//
// As LibTorch's, a holder built from arguments makes the module: Net(10) is
// std::make_shared<NetImpl>(10), and a default-constructed Net makes a
// default NetImpl when NetImpl has a default constructor (an empty holder
// otherwise; nullptr always gives an empty one).
#pragma once

#include <concepts>
#include <cstddef>
#include <typeinfo>
#include <memory>
#include <type_traits>
#include <utility>

#include "nn/module.h"
#include "tensor/error.h"

namespace kiln::nn {

template <class M>
class ModuleHolder : public std::shared_ptr<M> {
  static_assert(std::is_base_of_v<Module, M>, "ModuleHolder: M must derive from kiln::nn::Module");

 public:
  using module_type = M;

  // A default M when M has a default constructor, else empty.
  ModuleHolder() : std::shared_ptr<M>(make_default()) {}
  // Empty.
  ModuleHolder(std::nullptr_t) {}  // NOLINT: implicit, as shared_ptr's
  // An existing module (implicit, so a std::shared_ptr<M> converts).
  ModuleHolder(std::shared_ptr<M> module) : std::shared_ptr<M>(std::move(module)) {}  // NOLINT
  // M made from `args` (not a holder or shared_ptr: those are the copies above).
  template <class First, class... Rest>
    requires(!std::convertible_to<First, std::shared_ptr<M>> && std::constructible_from<M, First, Rest...>)
  explicit ModuleHolder(First&& first, Rest&&... rest)
      : std::shared_ptr<M>(std::make_shared<M>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  // The module's forward through its hooks: (*module)(input).
  Tensor operator()(const Tensor& input) const { return module()(input); }
  TensorList operator()(const TensorList& inputs) const { return module()(inputs); }
  // Any other call operator of M.
  template <class... Args>
    requires std::invocable<M&, Args...>
  decltype(auto) operator()(Args&&... args) const {
    return module()(std::forward<Args>(args)...);
  }

  // The module; throws kiln::Error when the holder is empty.
  M& module() const {
    KILN_CHECK(this->get() != nullptr, "ModuleHolder<", type_name(typeid(M)),
               ">: called while empty (made from nullptr or moved from); give it a module first");
    return *this->get();
  }

 private:
  static std::shared_ptr<M> make_default() {
    if constexpr (std::is_default_constructible_v<M>) {
      return std::make_shared<M>();
    } else {
      return nullptr;
    }
  }
};

// A module made from `args`, in a holder: auto fc = nn::make<nn::Linear>(784, 10).
template <class M, class... Args>
ModuleHolder<M> make(Args&&... args) {
  return ModuleHolder<M>(std::make_shared<M>(std::forward<Args>(args)...));
}

}  // namespace kiln::nn

// LibTorch's TORCH_MODULE: KILN_MODULE(Net) declares Net, the holder of a
// module class NetImpl (defined before it).
#define KILN_MODULE(Name)                                   \
  class Name : public ::kiln::nn::ModuleHolder<Name##Impl> { \
   public:                                                  \
    using ::kiln::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
