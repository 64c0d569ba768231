// The scheduler base and the schedules with a closed form. Each get_lr() is
// PyTorch's, operation for operation (Note [Chainable schedulers]), so the
// float64 results agree to the last bit.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>
#include <set>

#include "tensor/factory.h"

namespace kiln::optim {

namespace {

Tensor to_tensor(const std::vector<double>& values) {
  return from_vector<double>(values, {static_cast<int64_t>(values.size())});
}

// `dict[key]` as float64 values, one per param group.
std::vector<double> per_group_values(const TensorDict& dict, const std::string& key, size_t groups,
                                     const std::string& op) {
  KILN_CHECK(dict.contains(key), op, ": missing key '", key, "'");
  Tensor t = dict.at(key).to(DType::Float64).cpu().contiguous();
  KILN_CHECK(t.dim() == 1 && t.numel() == static_cast<int64_t>(groups), op, ": '", key, "' has shape ", t.shape(),
             " but the optimizer has ", groups, " param groups");
  const double* p = t.data<double>();
  return std::vector<double>(p, p + groups);
}

int64_t epoch_value(const TensorDict& dict, const std::string& key, const std::string& op) {
  KILN_CHECK(dict.contains(key), op, ": missing key '", key, "'");
  const Tensor& t = dict.at(key);
  KILN_CHECK(t.numel() == 1, op, ": '", key, "' must hold one number, got shape ", t.shape());
  return t.item<int64_t>();
}

// Splits a SequentialLR state dict into its own keys (into `own`) and each
// scheduler's, with "schedulers.<i>." taken off.
std::vector<TensorDict> split_scheduler_keys(const TensorDict& dict, size_t count, const std::string& op,
                                             TensorDict& own) {
  const std::string prefix = "schedulers.";
  std::vector<TensorDict> parts(count);
  for (const auto& [key, t] : dict) {
    if (key.compare(0, prefix.size(), prefix) != 0) {
      own.insert(key, t);
      continue;
    }
    size_t i = 0;
    size_t dot = key.find('.', prefix.size());
    const char* first = key.data() + prefix.size();
    const char* last = key.data() + (dot == std::string::npos ? key.size() : dot);
    auto [end, ec] = std::from_chars(first, last, i);
    KILN_CHECK(dot != std::string::npos && ec == std::errc() && end == last && i < count, op, ": unexpected key '", key,
               "' (there are ", count, " schedulers)");
    parts[i].insert(key.substr(dot + 1), t);
  }
  return parts;
}

void check_no_other_keys(const TensorDict& dict, const std::set<std::string>& expected, const std::string& op) {
  for (const auto& [key, t] : dict) KILN_CHECK(expected.count(key) != 0, op, ": unexpected key '", key, "'");
}

}  // namespace

// ---- LRScheduler -------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    if (!optimizer_.initial_lr(g)) optimizer_.set_initial_lr(g, optimizer_.lr(g));
    base_lrs_.push_back(*optimizer_.initial_lr(g));
  }
}

void LRScheduler::step() {
  check_groups();
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  check_groups();
  last_epoch_ = epoch;
  std::optional<std::vector<double>> closed = closed_form_lr();
  apply(closed ? *closed : get_lr());
}

void LRScheduler::check_groups() const {
  KILN_CHECK(base_lrs_.size() == optimizer_.num_param_groups(), name(), ": the optimizer has ",
             optimizer_.num_param_groups(), " param groups but the scheduler was made for ", base_lrs_.size(),
             " (make the scheduler after adding the groups)");
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) lrs.push_back(optimizer_.lr(g));
  return lrs;
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(g, lrs[g]);
  last_lr_ = current_lrs();
}

TensorDict LRScheduler::state_dict() const {
  TensorDict dict;
  dict.insert("last_epoch", scalar_tensor(last_epoch_, DType::Int64));
  dict.insert("base_lrs", to_tensor(base_lrs_));
  dict.insert("last_lr", to_tensor(last_lr_));
  return dict;
}

void LRScheduler::load_state_dict(const TensorDict& dict) {
  const std::string op = name() + "::load_state_dict";
  const size_t groups = optimizer_.num_param_groups();
  check_no_other_keys(dict, {"last_epoch", "base_lrs", "last_lr"}, op);
  int64_t last_epoch = epoch_value(dict, "last_epoch", op);
  std::vector<double> base_lrs = per_group_values(dict, "base_lrs", groups, op);
  std::vector<double> last_lr = per_group_values(dict, "last_lr", groups, op);
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
}

// ---- StepLR --------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return lrs;
}

// ---- MultiStepLR -------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  auto [first, last] = std::equal_range(milestones_.begin(), milestones_.end(), last_epoch_);
  if (first == last) return lrs;
  for (double& lr : lrs) lr = lr * std::pow(gamma_, static_cast<double>(last - first));
  return lrs;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

// ---- LinearLR ---------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  KILN_CHECK(start_factor > 0.0 && start_factor <= 1.0, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  KILN_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  KILN_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  // The ratio of this epoch's factor to the previous one.
  const double delta = end_factor_ - start_factor_;
  const double ratio =
      1.0 + delta / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * delta);
  for (double& lr : lrs) lr = lr * ratio;
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

// ---- CosineAnnealingLR ------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  const double T = static_cast<double>(T_max_);
  const double epoch = static_cast<double>(last_epoch_);
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) return lrs;
  if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0) {
    // The step after a minimum, where the ratio below would divide by
    // 1 + cos(pi) = 0: add the first step's increment instead.
    for (size_t g = 0; g < lrs.size(); ++g)
      lrs[g] = lrs[g] + (base_lrs_[g] - eta_min_) * (1.0 - std::cos(pi / T)) / 2.0;
    return lrs;
  }
  const double ratio = (1.0 + std::cos(pi * epoch / T)) / (1.0 + std::cos(pi * (epoch - 1.0) / T));
  for (double& lr : lrs) lr = ratio * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  constexpr double pi = std::numbers::pi;
  const double cosine = 1.0 + std::cos(pi * static_cast<double>(last_epoch_) / static_cast<double>(T_max_));
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * cosine / 2.0);
  return lrs;
}

// ---- SequentialLR -------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty(), "SequentialLR: needs at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    KILN_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    KILN_CHECK(&schedulers_[i]->optimizer() == &optimizer, "SequentialLR: scheduler ", i, " (", schedulers_[i]->name(),
               ") drives another optimizer than the one given");
  }
  KILN_CHECK(milestones_.size() + 1 == schedulers_.size(),
             "SequentialLR: expects one milestone fewer than schedulers, got ", schedulers_.size(), " schedulers and ",
             milestones_.size(), " milestones");
  for (size_t i = 0; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]), "SequentialLR: milestones must be positive and ",
               "increasing, got ", milestones_);

  // Each scheduler already took its epoch-0 step when it was made; undo
  // those and start over from the initial lrs with the first one.
  last_epoch_ = 0;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) optimizer_.set_lr(g, *optimizer_.initial_lr(g));
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& scheduler = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) {
    scheduler.step_to(0);
  } else {
    scheduler.step();
  }
  last_lr_ = scheduler.get_last_lr();
}

TensorDict SequentialLR::state_dict() const {
  TensorDict dict = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i)
    for (const auto& [key, t] : schedulers_[i]->state_dict())
      dict.insert("schedulers." + std::to_string(i) + "." + key, t);
  return dict;
}

void SequentialLR::load_state_dict(const TensorDict& dict) {
  const std::string op = "SequentialLR::load_state_dict";
  auto load = [&](const TensorDict& d) {
    TensorDict own;
    std::vector<TensorDict> parts = split_scheduler_keys(d, schedulers_.size(), op, own);
    LRScheduler::load_state_dict(own);
    for (size_t i = 0; i < parts.size(); ++i) {
      try {
        schedulers_[i]->load_state_dict(parts[i]);
      } catch (const Error& e) {
        KILN_FAIL(op, ": in 'schedulers.", i, ".*': ", e.message());
      }
    }
  };
  // The schedulers load one after another; if one refuses its part, all
  // are put back as they were.
  const TensorDict before = state_dict();
  try {
    load(dict);
  } catch (...) {
    load(before);
    throw;
  }
}

}  // namespace kiln::optim
