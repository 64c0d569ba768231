// Optimizer: the base of SGD, Adam and AdamW. It owns the param groups, the
// per-parameter state (momentum buffers, Adam moments, step counts) and the
// state dict; each optimizer adds its update rule and its Options struct.
//
//   SGD opt(model.parameters(), SGDOptions(0.1).momentum(0.9));
//   opt.add_param_group({head_params, {{"lr", 0.01}}});   // the rest from the defaults
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
//
// Note [Hyperparameters by name]
// Each optimizer reads its hyperparameters from a typed Options class
// (SGDOptions, AdamOptions; Note [Option builders] in tensor/arg.h), one per
// param group. Everything that does not
// know which optimizer it holds reaches the same values by name: param
// group overrides ({"lr", 0.01}), the state dict ("param_groups.0.lr") and
// the schedulers (OneCycleLR cycles "momentum" or "beta1"). Each Options
// class lists its fields once, in `fields()`, as name and pointer to the
// member behind the getter (&SGDOptions::lr_);
// bool fields read as 0 and 1. set_hyperparameters changes a group's values
// all together and then validates them, so that rules which tie fields
// together (nesterov needs momentum) hold after every change. Two writers
// skip the range checks, as PyTorch has none there: set_lr, through which
// schedulers write, and load_state_dict.
//
// Note [Optimizer state dict]
// state_dict() follows torch.optim.Optimizer.state_dict, flattened into
// named tensors so that it can go to a safetensors file:
//   param_groups.<g>.params      int64 (n,): the indices of the group's parameters
//   param_groups.<g>.<name>      float64 0-dim: each hyperparameter ("lr", "momentum", ...)
//   param_groups.<g>.initial_lr  float64 0-dim: only once a scheduler has set it
//   state.<i>.<name>             the state of parameter i ("momentum_buffer", "exp_avg", "step"),
//                                in the parameter's shape and dtype unless the optimizer says
//                                otherwise (StateEntry::form: quant::Adam8bit's uint8 codes)
// Parameters are numbered across the groups in order. The state tensors are
// the optimizer's own (as in PyTorch): the next step() changes them, so
// save or clone the dict before stepping again. load_state_dict copies what
// it loads and checks everything before changing anything.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::optim {

// Parameters that share hyperparameters. `options` names the ones this
// group sets differently from the optimizer's defaults, as PyTorch's
// {'params': [...], 'lr': 0.01}; the others come from the defaults.
struct ParamGroup {
  std::vector<Tensor> params;
  std::map<std::string, double> options = {};
};

// nanoGPT's grouping for weight decay: group 0 holds the parameters of two
// or more dims (matmul and embedding weights) and decays them by
// `weight_decay`; group 1 holds the others (biases, norm weights and
// biases) with weight_decay 0. Parameters that do not require grad are
// left out, as nanoGPT's configure_optimizers; a group may be empty.
//   AdamW opt(weight_decay_groups(model->parameters(), 0.1), AdamWOptions(6e-4));
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay);

// An optimizer state dict's entries (Note [Optimizer state dict]) by
// number: groups[g]["lr"], groups[g]["params"], state[i]["exp_avg"]. Throws
// naming `op` and the key on a key that is neither. (Optimizer and
// distributed::ZeroRedundancyOptimizer read state dicts through it.)
struct StateDictEntries {
  std::map<int64_t, std::map<std::string, Tensor>> groups;
  std::map<int64_t, std::map<std::string, Tensor>> state;
};
StateDictEntries split_state_dict(const TensorDict& dict, std::string_view op);

// Sets every grad of `params` to undefined (set_to_none) or to zeros in
// place; a grad that carries a graph (backward with create_graph) is first
// detached from it, as PyTorch does. What Optimizer::zero_grad does to its
// groups.
void zero_grads(const std::vector<Tensor>& params, bool set_to_none = true);

// One hyperparameter of an Options struct, reachable by name
// (Note [Hyperparameters by name]).
template <class Options>
struct OptionField {
  std::string name;
  std::variant<double Options::*, bool Options::*> member;

  double get(const Options& o) const {
    if (auto* d = std::get_if<double Options::*>(&member)) return o.*(*d);
    return o.*std::get<bool Options::*>(member) ? 1.0 : 0.0;
  }
  // Throws for a bool field given anything but 0 or 1; `op` names the caller.
  void set(Options& o, double value, std::string_view op) const {
    if (auto* d = std::get_if<double Options::*>(&member)) {
      o.*(*d) = value;
      return;
    }
    KILN_CHECK(value == 0.0 || value == 1.0, op, ": '", name, "' is a flag and must be 0 or 1, got ", value);
    o.*std::get<bool Options::*>(member) = value != 0.0;
  }
};

// One kind of per-parameter state, for load_state_dict's checks.
struct StateEntry {
  std::string name;
  bool per_element;  // true: the parameter's shape; false: a single number (a step count)
  bool required;     // a parameter that has any state must have this entry
  // For state whose form the optimizer chooses rather than the parameter
  // (quant::Adam8bit's uint8 codes and float32 block scales): a loaded
  // tensor must have exactly this shape and dtype, and keeps them (on the
  // parameter's device); `per_element` is then not read.
  struct Form {
    Shape shape;
    DType dtype;
  };
  std::optional<Form> form = std::nullopt;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", ...: names the optimizer in error messages.
  virtual std::string name() const = 0;

  // One update of every parameter that has a grad; parameters without one
  // are skipped and their state is left as it was.
  virtual void step() = 0;

  // Sets every grad to undefined (set_to_none, as PyTorch 2) or to zeros in
  // place. Zeroing a grad that carries a graph (backward with create_graph)
  // first detaches it from the graph, as PyTorch does.
  void zero_grad(bool set_to_none = true);

  // Adds parameters with their own hyperparameters. Throws if a parameter is
  // undefined, not floating point, not a leaf, or already in a group, or if
  // an option is unknown or out of range.
  void add_param_group(const ParamGroup& group);

  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;

  // ---- hyperparameters by name (Note [Hyperparameters by name]) ----
  // The names this optimizer's Options struct has, in a fixed order.
  virtual std::vector<std::string> hyperparameter_names() const = 0;
  bool has_hyperparameter(std::string_view name) const;
  virtual double hyperparameter(size_t group, std::string_view name) const = 0;
  // Changes the named values of one group together, then validates them;
  // on error nothing changes.
  void set_hyperparameters(size_t group, const std::map<std::string, double>& values);
  void set_hyperparameter(size_t group, std::string_view name, double value);
  double lr(size_t group) const { return hyperparameter(group, "lr"); }
  // Writes the lr without the range check, as assigning group['lr'] does in
  // PyTorch: schedulers write through it, and a schedule may pass through
  // values no one would configure (OneCycleLR's linear form ends below 0
  // one step after its last used lr).
  void set_lr(size_t group, double lr);

  // The lr a scheduler started the group from (PyTorch's group['initial_lr']);
  // schedulers set it once and share it, so that SequentialLR's schedulers
  // agree on where each group started.
  std::optional<double> initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);

  // ---- state dict (Note [Optimizer state dict]) ----
  TensorDict state_dict() const;
  // Restores hyperparameters and per-parameter state saved by an optimizer
  // of the same kind over parameters of the same shapes. Throws naming the
  // key on a missing or unexpected key, a different number of groups or of
  // parameters in a group, or a state tensor of the wrong shape. As in
  // PyTorch, the hyperparameter values themselves are taken as saved (a
  // schedule may have written an lr no constructor would accept).
  void load_state_dict(const TensorDict& dict);

  // The state of a parameter (empty before its first update).
  const TensorDict& state(const Tensor& param) const;

 protected:
  Optimizer() = default;

  // Called by the derived constructors (add_param_group needs the virtual
  // functions, which are not ready inside the base constructor).
  void add_initial_groups(const std::vector<ParamGroup>& groups);

  // The state entries a parameter of `group` may have.
  virtual std::vector<StateEntry> state_entries(size_t group) const = 0;
  // The state entries `param`, a parameter of `group`, may have; those of
  // state_entries(group) unless the optimizer's state depends on the
  // parameter (quant::Adam8bit keeps 8-bit state for large ones only).
  virtual std::vector<StateEntry> param_state_entries(size_t group, const Tensor& param) const {
    (void)param;
    return state_entries(group);
  }
  // Appends defaults-with-overrides options for a new group, or throws.
  virtual void append_options(const std::map<std::string, double>& overrides) = 0;
  // Sets the named values of a group; with `validate`, checks their ranges
  // (and changes nothing if one is out). Unknown names, and flags other
  // than 0 and 1, are refused either way. `op` names the caller in errors.
  virtual void write_hyperparameters(size_t group, const std::map<std::string, double>& values, bool validate,
                                     std::string_view op) = 0;

  // The state of a parameter, created empty on first use.
  TensorDict& mutable_state(const Tensor& param);
  // "parameter 3 (group 1)": names a parameter in step()'s errors.
  std::string describe_param(size_t group, size_t index_in_group) const;

 private:
  struct GroupRecord {
    std::vector<Tensor> params;
    std::optional<double> initial_lr;
  };
  std::vector<GroupRecord> groups_;
  std::unordered_map<const TensorImpl*, TensorDict> state_;
};

// The typed half: groups whose hyperparameters are an `Options` struct that
// names its optimizer, lists its fields (Note [Hyperparameters by name]) and
// validates itself:
//   static constexpr const char* kOptimizerName = "SGD";
//   static std::vector<OptionField<Options>> fields();
//   void validate(std::string_view op) const;   // throws naming op and the field
template <class Options>
class OptimizerWithOptions : public Optimizer {
 public:
  std::string name() const override { return Options::kOptimizerName; }

  const Options& defaults() const { return defaults_; }
  // Typed access to a group's hyperparameters; options(g).lr(0.01) changes
  // it without validation, as assigning group['lr'] does in PyTorch.
  Options& options(size_t group) {
    check_group(group);
    return options_[group];
  }
  const Options& options(size_t group) const {
    check_group(group);
    return options_[group];
  }

  std::vector<std::string> hyperparameter_names() const override {
    std::vector<std::string> names;
    for (const auto& field : Options::fields()) names.push_back(field.name);
    return names;
  }

  double hyperparameter(size_t group, std::string_view field_name) const override {
    return find_field(field_name, "hyperparameter").get(options(group));
  }

 protected:
  explicit OptimizerWithOptions(Options defaults) : defaults_(std::move(defaults)) {
    defaults_.validate(Options::kOptimizerName);
  }

  void write_hyperparameters(size_t group, const std::map<std::string, double>& values, bool validate,
                             std::string_view op) override {
    Options changed = options(group);
    apply(changed, values, validate, op);
    options_[group] = changed;
  }

  void append_options(const std::map<std::string, double>& overrides) override {
    Options group_options = defaults_;
    apply(group_options, overrides, /*validate=*/true, "add_param_group");
    options_.push_back(group_options);
  }

 private:
  void check_group(size_t group) const {
    KILN_CHECK(group < options_.size(), name(), ": no param group ", group, " (there are ", options_.size(), ")");
  }

  const OptionField<Options>& find_field(std::string_view field_name, std::string_view op) const {
    static const std::vector<OptionField<Options>> fields = Options::fields();
    for (const auto& field : fields)
      if (field.name == field_name) return field;
    std::string known;
    for (const auto& field : fields) known += (known.empty() ? "" : ", ") + field.name;
    KILN_FAIL(name(), "::", op, ": unknown hyperparameter '", field_name, "' (", name(), " has: ", known, ")");
  }

  // Sets `values` on `o`, then validates the result if asked.
  void apply(Options& o, const std::map<std::string, double>& values, bool validate, std::string_view op) const {
    std::string where = name() + "::" + std::string(op);
    for (const auto& [field_name, value] : values) find_field(field_name, op).set(o, value, where);
    if (validate) o.validate(where);
  }

  Options defaults_;
  std::vector<Options> options_;
};

}  // namespace kiln::optim
