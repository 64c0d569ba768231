// The losses against PyTorch itself: the same float64 inputs go to a Python
// script run by /usr/bin/python3 (Debian's python3-torch), which prints the
// loss and the gradient of sum(loss * g) with respect to each input; Kiln
// must agree to rounding. Skipped when torch is not installed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "autograd/autograd_test_util.h"
#include "nn/functional.h"

namespace kiln::gradtest {
namespace {

namespace F = kiln::nn::functional;
using F::Reduction;

bool torch_available() {
  static const bool available = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  return available;
}

// A Python expression rebuilding t exactly (repr-precision doubles).
std::string py_tensor(const Tensor& t) {
  std::ostringstream os;
  os.precision(17);
  const bool integral = !t.is_floating_point();
  os << "torch.tensor([";
  for (double v : values(t)) os << (integral ? static_cast<double>(static_cast<int64_t>(v)) : v) << ",";
  os << "], dtype=" << (integral ? "torch.int64" : "torch.float64") << ").reshape([";
  for (int64_t s : t.shape()) os << s << ",";
  os << "])";
  return os.str();
}

const char* py_reduction(Reduction r) {
  return r == Reduction::None ? "'none'" : r == Reduction::Mean ? "'mean'" : "'sum'";
}

// One comparison: Python statements that define `out` from tensors named
// in0, in1, ... (the inputs that require grad, rebuilt there), and Kiln's
// computation of the same loss.
struct TorchCase {
  std::string name;
  TensorList inputs;                                          // differentiated
  std::string python;                                         // defines out from in0, in1, ...
  std::function<Tensor(const TensorList& inputs)> kiln_loss;  // the same in Kiln
};

// Runs every case in one Python process; returns, per case, the loss values
// followed by the gradients of each input, as flat lists.
std::vector<std::vector<std::vector<double>>> run_torch(const std::vector<TorchCase>& cases,
                                                        const std::vector<Tensor>& upstream) {
  std::ostringstream script;
  script << "import torch\nimport torch.nn.functional as F\n"
         << "def emit(t):\n    print(' '.join(repr(v) for v in t.detach().flatten().tolist()))\n";
  for (size_t k = 0; k < cases.size(); ++k) {
    for (size_t i = 0; i < cases[k].inputs.size(); ++i) {
      script << "in" << i << " = " << py_tensor(cases[k].inputs[i]) << ".requires_grad_()\n";
    }
    script << cases[k].python << "\n";
    script << "g = " << py_tensor(upstream[k]) << ".reshape(out.shape)\n(out * g).sum().backward()\nemit(out)\n";
    for (size_t i = 0; i < cases[k].inputs.size(); ++i) script << "emit(in" << i << ".grad)\n";
  }
  const std::string path = ::testing::TempDir() + "kiln_loss_torch_test_" + std::to_string(getpid()) + ".py";
  std::ofstream(path) << script.str();
  FILE* pipe = popen(("/usr/bin/python3 " + path + " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::vector<std::string> lines;
  char buffer[1 << 16];
  std::string line;
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    line += buffer;
    if (!line.empty() && line.back() == '\n') {
      lines.push_back(line.substr(0, line.size() - 1));
      line.clear();
    }
  }
  EXPECT_EQ(pclose(pipe), 0) << "python failed:\n"
                             << [&] {
                                  std::string all;
                                  for (const auto& l : lines) all += l + "\n";
                                  return all;
                                }();
  std::vector<std::vector<std::vector<double>>> results;
  size_t at = 0;
  for (const TorchCase& c : cases) {
    std::vector<std::vector<double>> one;
    for (size_t i = 0; i <= c.inputs.size() && at < lines.size(); ++i, ++at) {
      std::istringstream in(lines[at]);
      std::vector<double> v;
      std::string word;
      while (in >> word) v.push_back(std::strtod(word.c_str(), nullptr));
      one.push_back(v);
    }
    results.push_back(one);
  }
  return results;
}

TEST(LossesVsTorch, ValuesAndGradientsAgree) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (install python3-torch)";

  Tensor logits = leaf({6, 5}, 1, -3, 3);
  Tensor target = from_vector<int64_t>({4, 0, 2, 2, -100, 1}, {6});
  Tensor target_ignore_2 = from_vector<int64_t>({4, 0, 2, 2, 3, 1}, {6});
  Tensor weight = uniform64({5}, 2, 0.2, 2.0);
  Tensor spatial = leaf({2, 3, 2, 3}, 3, -2, 2);
  Tensor spatial_target = from_vector<int64_t>({0, 1, 2, 2, 1, 0, 1, 1, -100, 0, 2, 2}, {2, 2, 3});
  Tensor soft = kiln::softmax(uniform64({6, 5}, 4), 1);
  Tensor logp = leaf({6, 5}, 5, -3, -0.1);
  Tensor bce_x = leaf({4, 5}, 6, -6, 6);
  Tensor bce_y = leaf({4, 5}, 7, 0, 1);
  Tensor bce_w = uniform64({4, 1}, 8, 0.5, 2);
  Tensor bce_pw = uniform64({5}, 9, 0.5, 3);

  std::vector<TorchCase> cases;
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    const std::string red = py_reduction(r);
    cases.push_back({"cross_entropy",
                     {logits},
                     "out = F.cross_entropy(in0, " + py_tensor(target) + ", reduction=" + red + ")",
                     [=](const TensorList& in) { return F::cross_entropy(in[0], target, {.reduction = r}); }});
    cases.push_back({"cross_entropy weight ignore_index=2 label_smoothing=0.2",
                     {logits},
                     "out = F.cross_entropy(in0, " + py_tensor(target_ignore_2) + ", weight=" + py_tensor(weight) +
                         ", ignore_index=2, reduction=" + red + ", label_smoothing=0.2)",
                     [=](const TensorList& in) {
                       return F::cross_entropy(
                           in[0], target_ignore_2,
                           {.weight = weight, .ignore_index = 2, .reduction = r, .label_smoothing = 0.2});
                     }});
    cases.push_back({"cross_entropy weight -100 label_smoothing=0.35",
                     {logits},
                     "out = F.cross_entropy(in0, " + py_tensor(target) + ", weight=" + py_tensor(weight) +
                         ", reduction=" + red + ", label_smoothing=0.35)",
                     [=](const TensorList& in) {
                       return F::cross_entropy(in[0], target,
                                               {.weight = weight, .reduction = r, .label_smoothing = 0.35});
                     }});
    cases.push_back(
        {"cross_entropy spatial weight smoothing",
         {spatial},
         "out = F.cross_entropy(in0, " + py_tensor(spatial_target) + ", weight=" + py_tensor(weight.slice(0, 0, 3)) +
             ", reduction=" + red + ", label_smoothing=0.1)",
         [=](const TensorList& in) {
           return F::cross_entropy(in[0], spatial_target,
                                   {.weight = weight.slice(0, 0, 3), .reduction = r, .label_smoothing = 0.1});
         }});
    cases.push_back({"cross_entropy probabilities weight smoothing",
                     {logits},
                     "out = F.cross_entropy(in0, " + py_tensor(soft) + ", weight=" + py_tensor(weight) +
                         ", reduction=" + red + ", label_smoothing=0.25)",
                     [=](const TensorList& in) {
                       return F::cross_entropy(in[0], soft,
                                               {.weight = weight, .reduction = r, .label_smoothing = 0.25});
                     }});
    cases.push_back({"nll_loss weight ignore_index=2",
                     {logp},
                     "out = F.nll_loss(in0, " + py_tensor(target_ignore_2) + ", weight=" + py_tensor(weight) +
                         ", ignore_index=2, reduction=" + red + ")",
                     [=](const TensorList& in) {
                       return F::nll_loss(in[0], target_ignore_2,
                                          {.weight = weight, .ignore_index = 2, .reduction = r});
                     }});
    cases.push_back(
        {"binary_cross_entropy_with_logits",
         {bce_x, bce_y},
         "out = F.binary_cross_entropy_with_logits(in0, in1, reduction=" + red + ")",
         [=](const TensorList& in) { return F::binary_cross_entropy_with_logits(in[0], in[1], {.reduction = r}); }});
    cases.push_back({"binary_cross_entropy_with_logits weight pos_weight",
                     {bce_x, bce_y},
                     "out = F.binary_cross_entropy_with_logits(in0, in1, weight=" + py_tensor(bce_w) +
                         ", pos_weight=" + py_tensor(bce_pw) + ", reduction=" + red + ")",
                     [=](const TensorList& in) {
                       return F::binary_cross_entropy_with_logits(
                           in[0], in[1], {.weight = bce_w, .pos_weight = bce_pw, .reduction = r});
                     }});
  }

  // Kiln first: the loss and sum(loss * g)'s gradients.
  std::vector<Tensor> upstream;
  std::vector<std::vector<std::vector<double>>> kiln_results;
  uint64_t seed = 100;
  for (const TorchCase& c : cases) {
    Tensor out = c.kiln_loss(c.inputs);
    Tensor g = uniform64(out.shape(), seed++, 0.5, 1.5);
    upstream.push_back(g);
    TensorList grads = autograd::grad({out}, c.inputs, {g});
    std::vector<std::vector<double>> one{values(out)};
    for (const Tensor& grad : grads) one.push_back(values(grad));
    kiln_results.push_back(one);
  }
  auto torch_results = run_torch(cases, upstream);
  ASSERT_EQ(torch_results.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].name + " (case " + std::to_string(k) + ")");
    ASSERT_EQ(torch_results[k].size(), kiln_results[k].size());
    for (size_t i = 0; i < kiln_results[k].size(); ++i) {
      SCOPED_TRACE(i == 0 ? "loss" : "gradient of input " + std::to_string(i - 1));
      ASSERT_EQ(torch_results[k][i].size(), kiln_results[k][i].size());
      for (size_t e = 0; e < kiln_results[k][i].size(); ++e) {
        EXPECT_NEAR(kiln_results[k][i][e], torch_results[k][i][e], 1e-12 * (1 + std::abs(torch_results[k][i][e])))
            << "element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::gradtest
