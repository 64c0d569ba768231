#include "quant/fuse.h"

#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/functional_modules.h"

namespace kiln::quant {

void check_padded_by_params(std::string_view op, std::string_view name, const nn::Conv2d& conv) {
  KILN_CHECK(conv.padded_by_params(), op, ": ", name, " pads ",
             conv.padding_mode != nn::PaddingMode::Zeros ? "with a padding_mode other than zeros"
                                                         : "unevenly (padding='same' with an even kernel span)",
             ", which a quantized convolution cannot: it pads both sides of each dim with the input's zero point; ",
             "leave this layer in float32 (a null qconfig) or give it explicit, even padding");
}

ConvBnReLU2d::ConvBnReLU2d(std::shared_ptr<nn::Conv2d> conv_in, std::shared_ptr<nn::BatchNorm2d> bn_in,
                           bool with_relu)
    : relu(with_relu) {
  conv = register_module("0", std::move(conv_in));
  if (bn_in) bn = register_module("1", std::move(bn_in));
  if (relu) register_module(bn ? "2" : "1", std::make_shared<nn::ReLU>());
}

Tensor ConvBnReLU2d::forward(const Tensor& x) {
  Tensor y = (*conv)(x);
  if (bn) y = (*bn)(y);
  return relu ? nn::functional::relu(y) : y;
}

LinearReLU::LinearReLU(std::shared_ptr<nn::Linear> linear_in) {
  linear = register_module("0", std::move(linear_in));
  register_module("1", std::make_shared<nn::ReLU>());
}

Tensor LinearReLU::forward(const Tensor& x) { return nn::functional::relu((*linear)(x)); }

nn::TensorList AddReLU::forward_many(const nn::TensorList& inputs) {
  KILN_CHECK(inputs.size() == 2, name(), ": takes two tensors, got ", inputs.size());
  return {nn::functional::relu(inputs[0] + inputs[1])};
}

std::pair<Tensor, Tensor> fold_batch_norm(const Tensor& weight, const Tensor& bias, const nn::BatchNorm2d& bn) {
  KILN_CHECK(weight.dim() == 4 && weight.size(0) == bn.num_features, "fold_batch_norm: a conv weight of shape ",
             weight.shape(), " cannot take a BatchNorm2d of ", bn.num_features, " channels");
  KILN_CHECK(bn.track_running_stats, "fold_batch_norm: the BatchNorm2d keeps no running statistics to fold");
  Tensor inv_std = rsqrt(bn.running_var + bn.eps);                       // (O)
  Tensor gamma = bn.affine ? bn.weight : ones_like(bn.running_var);
  Tensor beta = bn.affine ? bn.bias : zeros_like(bn.running_var);
  Tensor factor = gamma * inv_std;                                       // (O)
  Tensor w = weight * factor.reshape({-1, 1, 1, 1});                     // (O, C, kh, kw)
  Tensor b = bias.defined() ? bias : zeros_like(bn.running_mean);
  return {w, (b - bn.running_mean) * factor + beta};
}

namespace {

std::string group_text(const std::vector<std::string>& group) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < group.size(); ++i) os << (i ? ", " : "") << "'" << group[i] << "'";
  os << "]";
  return os.str();
}

void replace_at(nn::Module& root, const std::string& path, std::shared_ptr<nn::Module> module) {
  size_t dot = path.rfind('.');
  if (dot == std::string::npos) {
    root.replace_module(path, std::move(module));
  } else {
    root.get_submodule(path.substr(0, dot))->replace_module(path.substr(dot + 1), std::move(module));
  }
}

void fuse(nn::Module& root, const std::vector<std::vector<std::string>>& groups, bool qat) {
  const char* op = qat ? "fuse_modules_qat" : "fuse_modules";
  KILN_CHECK(root.is_training() == qat, op, ": the model must be in ", qat ? "training" : "eval",
             " mode (", qat ? "QAT fusion keeps the BatchNorm to train it" : "eval fusion folds the BatchNorm's running statistics",
             "); call ", qat ? "train()" : "eval()", " first");
  for (const auto& group : groups) {
    KILN_CHECK(group.size() == 2 || group.size() == 3, op, ": group ", group_text(group),
               " must name 2 or 3 modules (Conv2d+BatchNorm2d[+ReLU], Conv2d+ReLU, Linear+ReLU or Add+ReLU)");
    std::vector<std::shared_ptr<nn::Module>> mods;
    for (const auto& path : group) {
      std::shared_ptr<nn::Module> m;
      try {
        m = root.get_submodule(path);
      } catch (const Error& e) {
        KILN_FAIL(op, ": group ", group_text(group), ": no module '", path, "' (", e.what(), ")");
      }
      mods.push_back(std::move(m));
    }
    auto conv = std::dynamic_pointer_cast<nn::Conv2d>(mods[0]);
    auto linear = std::dynamic_pointer_cast<nn::Linear>(mods[0]);
    auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(mods[1]);
    bool relu_last = std::dynamic_pointer_cast<nn::ReLU>(mods.back()) != nullptr;
    std::shared_ptr<nn::Module> fused;
    if (conv) check_padded_by_params(op, detail::str("group ", group_text(group), ": '", group[0], "'"), *conv);
    if (conv && bn && (group.size() == 2 || relu_last)) {
      KILN_CHECK(bn->num_features == conv->out_channels, op, ": group ", group_text(group), ": '", group[1],
                 "' normalises ", bn->num_features, " channels but '", group[0], "' gives ", conv->out_channels);
      bool relu = group.size() == 3;
      if (qat) {
        fused = std::make_shared<ConvBnReLU2d>(conv, bn, relu);
      } else {
        // A new Conv2d with the folded weight and bias (always with a bias).
        const Conv2dParams& p = conv->params;
        auto folded = std::make_shared<nn::Conv2d>(conv->in_channels, conv->out_channels, conv->kernel_size, p.stride,
                                                   p.padding, p.dilation, p.groups, true);
        NoGradGuard no_grad;
        auto [w, b] = fold_batch_norm(conv->weight, conv->bias, *bn);
        folded->weight.copy_(w);
        folded->bias.copy_(b);
        fused = relu ? std::shared_ptr<nn::Module>(std::make_shared<ConvBnReLU2d>(folded, nullptr, true))
                     : std::shared_ptr<nn::Module>(folded);
      }
    } else if (conv && group.size() == 2 && relu_last) {
      fused = std::make_shared<ConvBnReLU2d>(conv, nullptr, true);
    } else if (linear && group.size() == 2 && relu_last) {
      fused = std::make_shared<LinearReLU>(linear);
    } else if (std::dynamic_pointer_cast<nn::Add>(mods[0]) && group.size() == 2 && relu_last) {
      fused = std::make_shared<AddReLU>();
    } else {
      std::ostringstream kinds;
      for (size_t i = 0; i < mods.size(); ++i) kinds << (i ? ", " : "") << mods[i]->name();
      KILN_FAIL(op, ": group ", group_text(group), " is (", kinds.str(),
                "); the patterns that fuse are Conv2d+BatchNorm2d, Conv2d+BatchNorm2d+ReLU, Conv2d+ReLU, "
                "Linear+ReLU and Add+ReLU");
    }
    fused->train(qat);
    replace_at(root, group[0], fused);
    for (size_t i = 1; i < group.size(); ++i) replace_at(root, group[i], std::make_shared<nn::Identity>());
  }
}

}  // namespace

void fuse_modules(nn::Module& root, const std::vector<std::vector<std::string>>& groups) { fuse(root, groups, false); }
void fuse_modules_qat(nn::Module& root, const std::vector<std::vector<std::string>>& groups) { fuse(root, groups, true); }

}  // namespace kiln::quant
