// User-defined differentiable functions, as torch::autograd::Function.
//
//   struct ScaledTanh : kiln::autograd::Function<ScaledTanh> {
//     static Tensor forward(AutogradContext* ctx, const Tensor& x, double scale) {
//       Tensor y = ops::tanh(x);
//       ctx->save_for_backward({y});
//       ctx->saved_data["scale"] = scale;
//       return ops::mul(y, scale);
//     }
//     static TensorList backward(AutogradContext* ctx, const TensorList& grad_outputs) {
//       Tensor y = ctx->get_saved_variables()[0];
//       double scale = std::any_cast<double>(ctx->saved_data["scale"]);
//       return {grad_outputs[0] * scale * (1 - y * y), Tensor()};  // one per forward argument
//     }
//   };
//   Tensor out = ScaledTanh::apply(x, 2.0);
//
// forward runs with grad mode off and may return a Tensor or a TensorList.
// backward gets one gradient per output (zeros where none flowed) and
// returns one entry per forward argument after ctx, in order; entries for
// non-tensor arguments, or inputs that need no gradient, are undefined.
#pragma once

#include <any>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "autograd/function.h"
#include "autograd/grad_mode.h"

namespace kiln::autograd {

class AutogradContext {
 public:
  // Tensors needed by backward; checked for in-place modification when read.
  void save_for_backward(const TensorList& tensors);
  TensorList get_saved_variables() const;
  // Whether forward argument `i` (counting every argument) needs a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  // Anything else backward needs.
  std::unordered_map<std::string, std::any> saved_data;

 private:
  template <class T>
  friend class Function;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
};

// The readable name of a Function class, for its grad_fn name.
std::string function_name(const std::type_info& type);

namespace detail {

template <class T>
void collect_input(TensorList& inputs, std::vector<bool>& is_tensor, const T& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    inputs.push_back(arg);
    is_tensor.push_back(true);
  } else {
    inputs.emplace_back();
    is_tensor.push_back(false);
  }
}

inline TensorList as_list(const Tensor& t) { return {t}; }
inline TensorList as_list(const TensorList& ts) { return ts; }

}  // namespace detail

template <class Derived>
class Function {
 public:
  template <class... Args>
  static auto apply(Args&&... args) {
    auto ctx = std::make_shared<AutogradContext>();
    TensorList inputs;
    std::vector<bool> is_tensor;
    (detail::collect_input(inputs, is_tensor, args), ...);
    for (const Tensor& in : inputs) ctx->needs_input_grad_.push_back(in.defined() && in.requires_grad());

    using Result = decltype(Derived::forward(ctx.get(), std::forward<Args>(args)...));
    Result result = [&] {
      NoGradGuard no_grad;
      return Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }();
    TensorList outputs = detail::as_list(result);
    // An output that is an input (or shares its TensorImpl) would get its
    // history overwritten; give it its own handle.
    for (Tensor& out : outputs) {
      for (const Tensor& in : inputs) {
        if (in.defined() && out.is_same(in)) out = out.detach();
      }
    }
    if (needs_grad(inputs)) {
      record(function_name(typeid(Derived)), inputs, outputs, [ctx](const TensorList& grads) -> TensorList {
        TensorList input_grads = Derived::backward(ctx.get(), grads);
        KILN_CHECK(input_grads.size() == ctx->needs_input_grad_.size(), "custom Function backward returned ",
                   input_grads.size(), " gradients for ", ctx->needs_input_grad_.size(), " forward arguments");
        return input_grads;
      });
    }
    if constexpr (std::is_same_v<Result, Tensor>) {
      return outputs[0];
    } else {
      return outputs;
    }
  }
};

}  // namespace kiln::autograd
