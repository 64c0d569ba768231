// Adam8bit's step: block by block, dequantize the moments into a
// per-thread scratch block, update them and the parameter in float32, and
// quantize them back (Note [Block-wise 8-bit optimizer state]).
#include "quant/adam8bit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "autograd/grad_mode.h"
#include "tensor/cpu/parallel.h"
#include "tensor/factory.h"

namespace kiln::quant {

namespace {

// The per-step numbers of the update, rounded to float32 once.
struct StepConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size;    // -lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  float eps_hat;      // eps * sqrt(1 - beta2^t)
  float l2_decay;     // g += l2_decay * p: Adam8bit's weight decay, else 0
  float param_decay;  // p *= param_decay: 1 - lr * weight_decay for AdamW8bit, else 1
  bool maximize;
};

StepConstants constants_for(const Adam8bitOptions& o, double step) {
  const double correction1 = 1.0 - std::pow(o.beta1(), step);
  const double correction2 = std::sqrt(1.0 - std::pow(o.beta2(), step));
  const bool decoupled = o.decoupled_weight_decay();
  return {.beta1 = static_cast<float>(o.beta1()),
          .beta2 = static_cast<float>(o.beta2()),
          .one_minus_beta1 = static_cast<float>(1.0 - o.beta1()),
          .one_minus_beta2 = static_cast<float>(1.0 - o.beta2()),
          .step_size = static_cast<float>(-o.lr() * correction2 / correction1),
          .eps_hat = static_cast<float>(o.eps() * correction2),
          .l2_decay = decoupled ? 0.0f : static_cast<float>(o.weight_decay()),
          .param_decay = decoupled ? static_cast<float>(1.0 - o.lr() * o.weight_decay()) : 1.0f,
          .maximize = o.maximize()};
}

// Adam's update of n elements with float32 moments m and v, in place.
void adam_elements(float* p, const float* g, float* m, float* v, int64_t n, const StepConstants& k) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = k.maximize ? -g[i] : g[i];
    if (!std::isfinite(grad)) {
      m[i] = 0.0f;
      v[i] = 0.0f;
      continue;
    }
    if (k.l2_decay != 0.0f) grad += k.l2_decay * p[i];
    m[i] = m[i] * k.beta1 + k.one_minus_beta1 * grad;
    v[i] = v[i] * k.beta2 + k.one_minus_beta2 * grad * grad;
    p[i] = p[i] * k.param_decay + k.step_size * (m[i] / (std::sqrt(v[i]) + k.eps_hat));
  }
}

// Blocks (or, for float32 state, elements / block_size) per thread chunk:
// a parallel region pays only above some tens of thousands of elements.
int64_t block_grain(int64_t block_size) { return std::max<int64_t>(1, 32768 / block_size); }

// A parameter's 8-bit moments, updated block by block in parallel. Each
// thread dequantizes a block into its own scratch m and v (2 * block_size
// floats, allocated once per thread), so the block is read and written once.
void update_quantized(float* p, const float* g, uint8_t* m_codes, float* m_absmax, uint8_t* v_codes, float* v_absmax,
                      int64_t n, int64_t block_size, const StepConstants& k) {
  const DynamicMap& m_map = signed_dynamic_map();
  const DynamicMap& v_map = unsigned_dynamic_map();
  const int64_t blocks = num_blocks(n, block_size);
  cpu::parallel_for(0, blocks, block_grain(block_size), [&](int64_t first, int64_t last) {
    std::vector<float> scratch(2 * static_cast<size_t>(block_size));
    float* m = scratch.data();               // m: (block_size,)
    float* v = scratch.data() + block_size;  // v: (block_size,)
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block_size;
      const int64_t len = std::min(n, begin + block_size) - begin;
      dequantize_block(m_codes + begin, len, m_absmax[b], m_map, m);
      dequantize_block(v_codes + begin, len, v_absmax[b], v_map, v);
      adam_elements(p + begin, g + begin, m, v, len, k);
      m_absmax[b] = quantize_block(m, len, m_map, m_codes + begin);
      v_absmax[b] = quantize_block(v, len, v_map, v_codes + begin);
    }
  });
}

void update_float32(float* p, const float* g, float* m, float* v, int64_t n, int64_t block_size,
                    const StepConstants& k) {
  cpu::parallel_for(0, n, block_grain(block_size) * block_size, [&](int64_t begin, int64_t end) {
    adam_elements(p + begin, g + begin, m + begin, v + begin, end - begin, k);
  });
}

// uint8 codes of a moment of 0: the code of the map's entry 0.
Tensor zero_codes(const Tensor& param, const DynamicMap& map) {
  return full(param.shape(), static_cast<int64_t>(map.nearest(0.0f)), {DType::UInt8, param.device()});
}

void init_state(TensorDict& state, const Tensor& param, const Adam8bitOptions& o) {
  state.insert("step", scalar_tensor(0.0, DType::Float64));
  if (quantizes_state(o, param)) {
    const int64_t blocks = num_blocks(param.numel(), o.block_size());
    state.insert("exp_avg", zero_codes(param, signed_dynamic_map()));
    state.insert("exp_avg_absmax", zeros({blocks}, DType::Float32));
    state.insert("exp_avg_sq", zero_codes(param, unsigned_dynamic_map()));
    state.insert("exp_avg_sq_absmax", zeros({blocks}, DType::Float32));
  } else {
    state.insert("exp_avg", zeros(param.shape(), DType::Float32));
    state.insert("exp_avg_sq", zeros(param.shape(), DType::Float32));
  }
}

// The state entries of `param` under `o`, with the form each must have.
std::vector<optim::StateEntry> entries_for(const Adam8bitOptions& o, const Tensor& param) {
  std::vector<optim::StateEntry> entries = {{"step", /*per_element=*/false, /*required=*/true}};
  if (quantizes_state(o, param)) {
    const Shape blocks = {num_blocks(param.numel(), o.block_size())};
    entries.push_back({"exp_avg", true, true, optim::StateEntry::Form{param.shape(), DType::UInt8}});
    entries.push_back({"exp_avg_absmax", true, true, optim::StateEntry::Form{blocks, DType::Float32}});
    entries.push_back({"exp_avg_sq", true, true, optim::StateEntry::Form{param.shape(), DType::UInt8}});
    entries.push_back({"exp_avg_sq_absmax", true, true, optim::StateEntry::Form{blocks, DType::Float32}});
  } else {
    entries.push_back({"exp_avg", true, true, optim::StateEntry::Form{param.shape(), DType::Float32}});
    entries.push_back({"exp_avg_sq", true, true, optim::StateEntry::Form{param.shape(), DType::Float32}});
  }
  return entries;
}

// Throws unless `state` has exactly the entries and forms that `o` gives
// `param` (a block_size or min_8bit_size changed after the first step).
void check_state(const TensorDict& state, const Tensor& param, const Adam8bitOptions& o, std::string_view op,
                 const std::function<std::string()>& who) {
  const std::vector<optim::StateEntry> entries = entries_for(o, param);
  KILN_CHECK(state.size() == entries.size(), op, ": ", who(), " has ", state.size(), " state entries but block_size ",
             o.block_size(), " and min_8bit_size ", o.min_8bit_size(), " give it ", entries.size(),
             " (were they changed after its first step?)");
  for (const optim::StateEntry& entry : entries) {
    KILN_CHECK(state.contains(entry.name), op, ": ", who(), " has no '", entry.name, "' state");
    if (!entry.form) continue;
    const Tensor& t = state.at(entry.name);
    KILN_CHECK(t.shape() == entry.form->shape && t.dtype() == entry.form->dtype, op, ": ", who(), "'s '", entry.name,
               "' is ", t.dtype(), " of shape ", t.shape(), " but block_size ", o.block_size(), " and min_8bit_size ",
               o.min_8bit_size(), " need ", entry.form->dtype, " of shape ", entry.form->shape,
               " (were they changed after its first step?)");
  }
}

void update_parameter(const Tensor& param, const Tensor& grad, TensorDict& state, const Adam8bitOptions& o,
                      std::string_view op, const std::function<std::string()>& who) {
  KILN_CHECK(grad.shape() == param.shape(), op, ": ", who(), " has shape ", param.shape(), " but its grad has shape ",
             grad.shape());
  if (state.empty()) init_state(state, param, o);
  check_state(state, param, o, op, who);

  double& step = state.at("step").data<double>()[0];
  step += 1.0;
  const StepConstants k = constants_for(o, step);

  // The update runs on contiguous float32 data: the parameter itself when it
  // is that already, else a copy that is written back.
  const bool in_place = param.dtype() == DType::Float32 && param.is_contiguous();
  Tensor p32 = in_place ? param : param.to(DType::Float32).contiguous();
  const Tensor g32 = grad.to(DType::Float32).contiguous();
  const int64_t n = param.numel();
  float* p = p32.data<float>();         // p: (n,)
  const float* g = g32.data<float>();   // g: (n,)
  if (quantizes_state(o, param)) {
    update_quantized(p, g, state.at("exp_avg").data<uint8_t>(), state.at("exp_avg_absmax").data<float>(),
                     state.at("exp_avg_sq").data<uint8_t>(), state.at("exp_avg_sq_absmax").data<float>(), n,
                     o.block_size(), k);
  } else {
    update_float32(p, g, state.at("exp_avg").data<float>(), state.at("exp_avg_sq").data<float>(), n, o.block_size(), k);
  }
  if (in_place) {
    param.bump_version();
  } else {
    Tensor target = param;
    target.copy_(p32);
  }
}

Adam8bitOptions as_adam8bit_options(const AdamW8bitOptions& o) {
  Adam8bitOptions options = Adam8bitOptions(o.lr())
                                .beta1(o.beta1())
                                .beta2(o.beta2())
                                .eps(o.eps())
                                .weight_decay(o.weight_decay())
                                .maximize(o.maximize())
                                .decoupled_weight_decay(true)
                                .block_size(o.block_size())
                                .min_8bit_size(o.min_8bit_size());
  options.validate("AdamW8bit");
  return options;
}

}  // namespace

std::vector<optim::OptionField<Adam8bitOptions>> Adam8bitOptions::fields() {
  using Options = Adam8bitOptions;
  return {{"lr", &Options::lr_},
          {"beta1", &Options::beta1_},
          {"beta2", &Options::beta2_},
          {"eps", &Options::eps_},
          {"weight_decay", &Options::weight_decay_},
          {"maximize", &Options::maximize_}};
}

void Adam8bitOptions::validate(std::string_view op) const {
  KILN_CHECK(lr_ >= 0.0, op, ": invalid learning rate ", lr_, " (must be >= 0)");
  KILN_CHECK(eps_ >= 0.0, op, ": invalid eps ", eps_, " (must be >= 0)");
  KILN_CHECK(beta1_ >= 0.0 && beta1_ < 1.0, op, ": invalid beta1 ", beta1_, " (must be in [0, 1))");
  KILN_CHECK(beta2_ >= 0.0 && beta2_ < 1.0, op, ": invalid beta2 ", beta2_, " (must be in [0, 1))");
  KILN_CHECK(weight_decay_ >= 0.0, op, ": invalid weight_decay ", weight_decay_, " (must be >= 0)");
  KILN_CHECK(block_size_ >= 1, op, ": invalid block_size ", block_size_, " (must be >= 1)");
  KILN_CHECK(min_8bit_size_ >= 0, op, ": invalid min_8bit_size ", min_8bit_size_, " (must be >= 0; 0 quantizes all)");
}

Adam8bit::Adam8bit(const std::vector<Tensor>& params, Adam8bitOptions defaults)
    : Adam8bit(std::vector<optim::ParamGroup>{{params, {}}}, defaults) {}

Adam8bit::Adam8bit(const std::vector<optim::ParamGroup>& groups, Adam8bitOptions defaults)
    : Adam8bit(groups, defaults, "Adam8bit") {}

// The name is set before the groups are added, so that their errors name
// AdamW8bit as such.
Adam8bit::Adam8bit(const std::vector<optim::ParamGroup>& groups, Adam8bitOptions defaults, std::string name)
    : OptimizerWithOptions(defaults), name_(std::move(name)) {
  add_initial_groups(groups);
}

void Adam8bit::step() {
  NoGradGuard no_grad;
  const std::string op = name_ + "::step";
  for (size_t g = 0; g < num_param_groups(); ++g) {
    for (size_t j = 0; j < params(g).size(); ++j) {
      const Tensor& param = params(g)[j];
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      auto who = [&] { return describe_param(g, j); };
      KILN_CHECK(param.device().is_cpu() && grad.device().is_cpu(), op, ": ", who(), " is on ", param.device(),
                 " (its grad on ", grad.device(), "); ", name_,
                 " has no CUDA implementation and updates CPU parameters only");
      update_parameter(param, grad, mutable_state(param), options(g), op, who);
    }
  }
}

int64_t Adam8bit::state_bytes() const { return optimizer_state_bytes(*this); }

std::vector<optim::StateEntry> Adam8bit::state_entries(size_t) const {
  return {{"step", false, true},
          {"exp_avg", true, true},
          {"exp_avg_sq", true, true},
          {"exp_avg_absmax", true, false},
          {"exp_avg_sq_absmax", true, false}};
}

std::vector<optim::StateEntry> Adam8bit::param_state_entries(size_t group, const Tensor& param) const {
  return entries_for(options(group), param);
}

AdamW8bit::AdamW8bit(const std::vector<Tensor>& params, AdamW8bitOptions defaults)
    : AdamW8bit(std::vector<optim::ParamGroup>{{params, {}}}, defaults) {}

AdamW8bit::AdamW8bit(const std::vector<optim::ParamGroup>& groups, AdamW8bitOptions defaults)
    : Adam8bit(groups, as_adam8bit_options(defaults), "AdamW8bit") {}

int64_t optimizer_state_bytes(const optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, t] : optimizer.state_dict())
    if (key.rfind("state.", 0) == 0) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace kiln::quant
