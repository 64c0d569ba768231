#include "optim/training_checkpoint.h"

#include <charconv>

#include "tensor/random.h"
#include "tensor/safetensors.h"

namespace kiln::optim {

namespace {

constexpr const char* kFormat = "kiln-training-checkpoint-1";
constexpr const char* kExtraPrefix = "extra.";

void add_prefixed(TensorDict& out, const std::string& prefix, const TensorDict& in) {
  for (const auto& [name, t] : in) out.insert(prefix + name, t);
}

// The entries of `all` under `prefix`, with the prefix removed.
TensorDict take_prefixed(const TensorDict& all, const std::string& prefix) {
  TensorDict out;
  for (const auto& [name, t] : all) {
    if (name.rfind(prefix, 0) == 0) out.insert(name.substr(prefix.size()), t);
  }
  return out;
}

uint64_t parse_u64(const std::string& path, const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  KILN_CHECK(it != meta.end(), "load_training_checkpoint: ", path, ": metadata lacks '", key, "'");
  uint64_t value = 0;
  const std::string& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  KILN_CHECK(ec == std::errc() && end == s.data() + s.size(), "load_training_checkpoint: ", path, ": metadata '",
             key, "' is not an unsigned integer: '", s, "'");
  return value;
}

}  // namespace

void save_training_checkpoint(const std::string& path, const TrainingState& state) {
  save_training_checkpoint(
      path, TrainingStateDicts{state.model.state_dict(), state.optimizer.state_dict(), state.optimizer.name(),
                               state.scheduler, state.step, state.extra, state.grad_scaler});
}

void save_training_checkpoint(const std::string& path, const TrainingStateDicts& state) {
  TensorDict all;
  add_prefixed(all, "model.", state.model);
  add_prefixed(all, "optimizer.", state.optimizer);
  if (state.scheduler != nullptr) add_prefixed(all, "scheduler.", state.scheduler->state_dict());
  if (state.grad_scaler != nullptr) add_prefixed(all, "grad_scaler.", state.grad_scaler->state_dict());
  Generator& gen = default_generator();
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"step", std::to_string(state.step)},
      {"rng_seed", std::to_string(gen.seed())},
      {"rng_offset", std::to_string(gen.offset())},
      {"optimizer", state.optimizer_name},
      {"scheduler", state.scheduler ? state.scheduler->name() : std::string()},
  };
  for (const auto& [key, value] : state.extra) meta[kExtraPrefix + key] = value;
  save_safetensors(path, all, meta);
}

LoadedCheckpoint load_training_checkpoint(const std::string& path, const TrainingState& state) {
  std::map<std::string, std::string> meta;
  TensorDict all = load_safetensors(path, &meta);
  KILN_CHECK(meta["format"] == kFormat, "load_training_checkpoint: ", path, " is not a Kiln training checkpoint ",
             "(format '", meta["format"], "', expected '", kFormat, "')");
  KILN_CHECK(meta["optimizer"] == state.optimizer.name(), "load_training_checkpoint: ", path, " holds ",
             meta["optimizer"], " state but the optimizer is ", state.optimizer.name());
  std::string scheduler = state.scheduler ? state.scheduler->name() : std::string();
  KILN_CHECK(meta["scheduler"] == scheduler, "load_training_checkpoint: ", path, " holds scheduler '",
             meta["scheduler"], "' but the run has '", scheduler, "'");
  uint64_t step = parse_u64(path, meta, "step");
  uint64_t seed = parse_u64(path, meta, "rng_seed");
  uint64_t offset = parse_u64(path, meta, "rng_offset");

  // Validate everything before changing anything: load into copies first
  // where the loaders could fail half-way, by checking the model's keys and
  // shapes up front (the optimizer and scheduler loaders validate before
  // they write).
  TensorDict model_state = take_prefixed(all, "model.");
  TensorDict current = state.model.state_dict();
  for (const auto& [name, t] : current) {
    KILN_CHECK(model_state.contains(name), "load_training_checkpoint: ", path, ": no entry for model parameter '",
               name, "'");
    KILN_CHECK(model_state.at(name).shape() == t.shape(), "load_training_checkpoint: ", path, ": model.", name,
               " has shape ", model_state.at(name).shape(), " but the model's is ", t.shape());
  }
  KILN_CHECK(model_state.size() == current.size(), "load_training_checkpoint: ", path, " holds ",
             model_state.size(), " model entries but the model has ", current.size());
  try {
    state.model.load_state_dict(model_state, /*strict=*/true);
    state.optimizer.load_state_dict(take_prefixed(all, "optimizer."));
    if (state.scheduler != nullptr) state.scheduler->load_state_dict(take_prefixed(all, "scheduler."));
    if (state.grad_scaler != nullptr) state.grad_scaler->load_state_dict(take_prefixed(all, "grad_scaler."));
  } catch (const Error& e) {
    KILN_FAIL("load_training_checkpoint: ", path, ": ", e.message());
  }
  default_generator().set_state(seed, offset);

  LoadedCheckpoint loaded;
  loaded.step = static_cast<int64_t>(step);
  for (const auto& [key, value] : meta) {
    if (key.rfind(kExtraPrefix, 0) == 0) loaded.extra[key.substr(std::char_traits<char>::length(kExtraPrefix))] = value;
  }
  return loaded;
}

}  // namespace kiln::optim
