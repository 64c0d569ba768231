#include "autograd/custom_function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace kiln::autograd {

void AutogradContext::save_for_backward(const TensorList& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t);
}

TensorList AutogradContext::get_saved_variables() const {
  TensorList out;
  out.reserve(saved_.size());
  for (const SavedTensor& s : saved_) out.push_back(s.get());
  return out;
}

std::string function_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? std::string(demangled.get()) : std::string(type.name());
  // "ns::(anonymous namespace)::Cube" -> "Cube": grad_fn names are short, as torch's.
  size_t template_start = name.find('<');
  size_t last_scope = name.rfind("::", template_start);
  return last_scope == std::string::npos ? name : name.substr(last_scope + 2);
}

}  // namespace kiln::autograd
