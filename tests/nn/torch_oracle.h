// A layer against PyTorch on the same weights and inputs: Kiln runs the
// layer, then one /usr/bin/python3 process (Debian's python3-torch) builds
// the torch layer, loads Kiln's state dict into it (strictly, so the keys
// and shapes must agree), runs the same call and backpropagates the same
// upstream gradients. Outputs, the gradients of the inputs and parameters,
// the buffers after the call and the state-dict keys and shapes are then
// compared. All in float64, so the tolerance can be a few ulps of the
// computation rather than of float32.
//
//   OracleCase c{.name = "GroupNorm", .module = gn, .torch_module = "nn.GroupNorm(2, 6)",
//                .inputs = {x}, .python = "outs = [m(in0)]"};
//   expect_matches_torch({c});
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autograd_test_util.h"
#include "nn/module.h"

namespace kiln::nn::testing {

using autograd::TensorList;

inline bool torch_available() {
  static const bool available = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  return available;
}

#define SKIP_WITHOUT_TORCH() \
  if (!::kiln::nn::testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (install python3-torch)"

// A Python expression rebuilding t exactly (repr-precision doubles, or int64).
inline std::string py_tensor(const Tensor& t) {
  std::ostringstream os;
  os.precision(17);
  const bool integral = !t.is_floating_point();
  os << "torch.tensor([";
  for (double v : gradtest::values(t)) os << (integral ? static_cast<double>(static_cast<int64_t>(v)) : v) << ",";
  os << "], dtype=" << (integral ? "torch.int64" : "torch.float64") << ").reshape([";
  for (int64_t s : t.shape()) os << s << ",";
  os << "])";
  return os.str();
}

// "weight:[6] bias:[6]": the keys and shapes of a state dict, in order.
inline std::string keys_and_shapes(const TensorDict& state) {
  std::string out;
  for (const auto& [key, t] : state) {
    if (!out.empty()) out += ' ';
    out += key;
    out += ":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d) out += ',';
      out += std::to_string(t.size(d));
    }
    out += ']';
  }
  return out;
}

struct OracleCase {
  std::string name{};
  // The Kiln layer (float64), or null for a functional case.
  std::shared_ptr<Module> module{};
  // A Python expression building the same torch layer, bound to `m`.
  std::string torch_module{};
  bool training = true;
  // Bound to in0, in1, ... in Python; those that require grad get gradients compared.
  TensorList inputs{};
  // Python statements defining `outs`, a list of tensors, from m and in0, ...
  std::string python{};
  // Kiln's computation; defaults to (*module)(inputs).
  std::function<TensorList(const TensorList&)> kiln{};
  double rtol = 1e-10;
  double atol = 1e-12;
};

// The case of a layer on one input x: torch's `m(in0)` against Kiln's
// module(x), named by the torch expression and the input's shape.
inline OracleCase layer_case(const std::string& torch, std::shared_ptr<Module> module, Tensor x) {
  return {.name = torch + " on " + gradtest::shape_str(x.shape()),
          .module = std::move(module),
          .torch_module = torch,
          .inputs = {x},
          .python = "outs = [m(in0)]"};
}

namespace detail {

// "c3.": the prefix of case 3's labels in the script's output.
inline std::string case_prefix(size_t k) {
  std::string p = "c";
  p += std::to_string(k);
  p += '.';
  return p;
}

// Compares `got` with torch's values under `label`, failing the test on a
// missing label, a size mismatch or any element out of tolerance.
inline void compare(const std::map<std::string, std::vector<double>>& torch, const std::string& label,
                    const std::vector<double>& got, const OracleCase& c) {
  auto it = torch.find(label);
  if (it == torch.end()) {
    ADD_FAILURE() << c.name << ": torch printed nothing for " << label;
    return;
  }
  const std::vector<double>& want = it->second;
  ASSERT_EQ(got.size(), want.size()) << c.name << ": " << label;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    if (std::abs(got[i] - want[i]) > c.rtol * std::abs(want[i]) + c.atol) {
      ADD_FAILURE() << c.name << ": " << label << " element " << i << ": kiln " << got[i] << ", torch " << want[i];
      ++reported;
    }
  }
}

}  // namespace detail

// Runs every case in Kiln and in one Python process and compares them.
inline void expect_matches_torch(const std::vector<OracleCase>& cases) {
  std::ostringstream script;
  script << "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
         << "torch.set_default_dtype(torch.float64)\n"
         << "def emit(label, t):\n"
         << "    print(label, ' '.join(repr(float(v)) for v in t.detach().flatten().tolist()))\n";
  std::vector<TensorList> kiln_outs(cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const OracleCase& c = cases[k];
    const std::string p = detail::case_prefix(k);
    script << "# " << c.name << "\n";
    // The state before the call: the call may change buffers (running statistics).
    if (c.module) {
      script << "m = " << c.torch_module << ".double()\n"
             << "m.load_state_dict({";
      for (const auto& [key, t] : c.module->state_dict()) script << "'" << key << "': " << py_tensor(t) << ",\n";
      script << "}, strict=True)\nm.train(" << (c.training ? "True" : "False") << ")\n"
             << "print('" << p << "keys', ' '.join(k + ':[' + ','.join(str(s) for s in v.shape) + ']' "
             << "for k, v in m.state_dict().items()))\n";
    }
    // Gradients from an earlier case (a shared input or layer) would add up.
    for (const Tensor& input : c.inputs)
      if (input.requires_grad()) input.set_grad(Tensor());
    if (c.module) {
      c.module->zero_grad();
      c.module->train(c.training);
    }
    kiln_outs[k] = c.kiln ? c.kiln(c.inputs) : (*c.module)(c.inputs);
    // Upstream gradients, one per output, the same in both.
    Tensor loss;
    TensorList upstream;
    for (size_t o = 0; o < kiln_outs[k].size(); ++o) {
      upstream.push_back(gradtest::uniform64(kiln_outs[k][o].shape(), 1000 + 17 * k + o));
      Tensor term = kiln::sum(kiln::mul(kiln_outs[k][o], upstream.back()));
      loss = loss.defined() ? kiln::add(loss, term) : term;
    }
    if (loss.defined() && loss.requires_grad()) loss.backward();

    for (size_t i = 0; i < c.inputs.size(); ++i) {
      script << "in" << i << " = " << py_tensor(c.inputs[i]) << (c.inputs[i].requires_grad() ? ".requires_grad_()" : "")
             << "\n";
    }
    script << c.python << "\nloss = 0\n";
    for (size_t o = 0; o < upstream.size(); ++o)
      script << "loss = loss + (outs[" << o << "] * " << py_tensor(upstream[o]) << ").sum()\n";
    script << "if torch.is_tensor(loss) and loss.requires_grad: loss.backward()\n";
    for (size_t o = 0; o < upstream.size(); ++o) script << "emit('" << p << "out" << o << "', outs[" << o << "])\n";
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (c.inputs[i].requires_grad()) script << "emit('" << p << "grad_in" << i << "', in" << i << ".grad)\n";
    if (c.module) {
      script << "for k, v in m.named_parameters(): emit('" << p << "grad:' + k, v.grad)\n"
             << "for k, v in m.named_buffers(): emit('" << p << "buffer:' + k, v)\n";
    }
  }
  const std::string path = ::testing::TempDir() + "kiln_nn_torch_oracle_" + std::to_string(getpid()) + ".py";
  std::ofstream(path) << script.str();
  FILE* pipe = popen(("/usr/bin/python3 " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::map<std::string, std::vector<double>> torch;
  std::map<std::string, std::string> torch_keys;
  std::string all, line;
  char buffer[1 << 16];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    line += buffer;
    if (line.empty() || line.back() != '\n') continue;
    all += line;
    std::istringstream in(line.substr(0, line.size() - 1));
    std::string label, word;
    in >> label;
    if (label.size() > 5 && label.substr(label.size() - 5) == ".keys") {
      std::getline(in >> std::ws, torch_keys[label]);
    } else {
      std::vector<double>& v = torch[label];
      while (in >> word) v.push_back(std::strtod(word.c_str(), nullptr));
    }
    line.clear();
  }
  const int status = pclose(pipe);
  ASSERT_EQ(status, 0) << "python failed:\n" << all << "\nscript: " << path;
  std::remove(path.c_str());  // kept above for reading when python failed

  for (size_t k = 0; k < cases.size(); ++k) {
    const OracleCase& c = cases[k];
    const std::string p = detail::case_prefix(k);
    for (size_t o = 0; o < kiln_outs[k].size(); ++o)
      detail::compare(torch, p + "out" + std::to_string(o), gradtest::values(kiln_outs[k][o]), c);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i].requires_grad()) continue;
      ASSERT_TRUE(c.inputs[i].grad().defined()) << c.name << ": input " << i << " got no gradient";
      detail::compare(torch, p + "grad_in" + std::to_string(i), gradtest::values(c.inputs[i].grad()), c);
    }
    if (!c.module) continue;
    EXPECT_EQ(keys_and_shapes(c.module->state_dict()), torch_keys[p + "keys"]) << c.name << ": state-dict keys";
    for (const auto& [key, param] : c.module->named_parameters()) {
      ASSERT_TRUE(param.grad().defined()) << c.name << ": parameter " << key << " got no gradient";
      detail::compare(torch, p + "grad:" + key, gradtest::values(param.grad()), c);
    }
    for (const auto& [key, buffer] : c.module->named_buffers())
      detail::compare(torch, p + "buffer:" + key, gradtest::values(buffer), c);
  }
}

}  // namespace kiln::nn::testing
