#include "nn/models/gpt_stages.h"

#include <numeric>
#include <unordered_map>

#include "tensor/error.h"

namespace kiln::nn::gpt {

// ---- Stage ----

Stage::Stage(GPT& model, int64_t index_in, int64_t num_stages_in, int64_t first_block_in, int64_t num_blocks)
    : index(index_in),
      num_stages(num_stages_in),
      first_block(first_block_in),
      block_size(model.config.block_size),
      n_embd(model.config.n_embd),
      op_("GPT stage " + std::to_string(index_in)) {
  // The containers mirror GPT's (transformer: ModuleDict of wte, wpe, drop,
  // h, ln_f; lm_head beside it) so the keys come out as the model's. h is a
  // ModuleDict rather than a ModuleList: a ModuleList would number this
  // stage's blocks from 0, and the keys must keep their global numbers.
  std::vector<NamedModule> transformer;
  if (is_first()) {
    wte = model.wte;
    wpe = model.wpe;
    drop = model.drop;
    transformer.insert(transformer.end(), {{"wte", wte}, {"wpe", wpe}, {"drop", drop}});
  }
  if (num_blocks > 0) {
    auto h = std::make_shared<ModuleDict>();
    for (int64_t b = first_block; b < first_block + num_blocks; ++b) {
      blocks.push_back(model.blocks[static_cast<size_t>(b)]);
      h->insert(std::to_string(b), blocks.back());
    }
    transformer.emplace_back("h", h);
  }
  if (is_last()) {
    ln_f = model.ln_f;
    transformer.emplace_back("ln_f", ln_f);
  }
  if (!transformer.empty()) register_module("transformer", std::make_shared<ModuleDict>(transformer));
  if (is_last()) lm_head = register_module("lm_head", model.lm_head);
}

TensorList Stage::forward_many(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 1, op_, ": expected one input, ", is_first() ? "{idx (B, T) Int64}" : "{x (B, T, E)}",
             ", got ", inputs.size());
  Tensor x;  // (B, T, E)
  if (is_first()) {
    check_tokens(inputs[0], 0, block_size, op_.c_str());
    x = embed(*wte, *wpe, *drop, inputs[0], 0);
  } else {
    x = inputs[0];
    KILN_CHECK(x.defined() && x.dim() == 3 && x.size(2) == n_embd, op_, ": expected x of shape (B, T, ", n_embd,
               "), the previous stage's output, got ", x.defined() ? x.shape() : Shape{});
  }
  for (const auto& block : blocks) x = (*block)(x);
  if (is_last()) x = (*lm_head)((*ln_f)(x));  // (B, T, V)
  return {x};
}

Tensor Stage::forward(const Tensor& input) { return forward_many({input})[0]; }

std::string Stage::extra_repr() const {
  const int64_t end = first_block + static_cast<int64_t>(blocks.size());
  return "stage=" + std::to_string(index) + ", num_stages=" + std::to_string(num_stages) + ", blocks=[" +
         std::to_string(first_block) + ", " + std::to_string(end) + ")";
}

// ---- split ----

StageSplit split_into_stages(GPT& model, const std::vector<int64_t>& blocks_per_stage) {
  const int64_t n_layer = static_cast<int64_t>(model.blocks.size());
  KILN_CHECK(!blocks_per_stage.empty(),
             "split_into_stages: blocks_per_stage is empty; give one block count per stage, e.g. even_balance(",
             n_layer, ", num_stages)");
  for (size_t s = 0; s < blocks_per_stage.size(); ++s) {
    KILN_CHECK(blocks_per_stage[s] >= 0, "split_into_stages: stage ", s, " has ", blocks_per_stage[s],
               " blocks; counts must be >= 0 (blocks_per_stage ", blocks_per_stage, ")");
  }
  const int64_t total = std::accumulate(blocks_per_stage.begin(), blocks_per_stage.end(), int64_t{0});
  KILN_CHECK(total == n_layer, "split_into_stages: blocks_per_stage ", blocks_per_stage, " sums to ", total,
             ", the model has n_layer ", n_layer);

  StageSplit split;
  const int64_t num_stages = static_cast<int64_t>(blocks_per_stage.size());
  int64_t first_block = 0;
  for (int64_t s = 0; s < num_stages; ++s) {
    const int64_t count = blocks_per_stage[static_cast<size_t>(s)];
    split.stages.push_back(std::make_shared<Stage>(model, s, num_stages, first_block, count));
    first_block += count;
  }

  // A tensor that two stages hold is found by identity, not by name, so the
  // list stays right whatever a model ties. named_parameters() lists a
  // tensor once per stage, so a one-stage split reports nothing.
  std::unordered_map<const TensorImpl*, size_t> entry_of;  // tensor -> its entry in `holders`
  std::vector<std::vector<std::pair<int, std::string>>> holders;
  for (int64_t s = 0; s < num_stages; ++s) {
    for (const auto& [key, tensor] : split.stages[static_cast<size_t>(s)]->named_parameters()) {
      auto [it, added] = entry_of.try_emplace(tensor.impl(), holders.size());
      if (added) holders.emplace_back();
      holders[it->second].emplace_back(static_cast<int>(s), key);
    }
  }
  for (auto& entry : holders) {
    if (entry.size() > 1) split.tied.push_back(std::move(entry));
  }
  return split;
}

std::vector<int64_t> even_balance(int64_t n_layer, int64_t num_stages) {
  KILN_CHECK(n_layer >= 0, "even_balance: n_layer must be >= 0, got ", n_layer);
  KILN_CHECK(num_stages >= 1, "even_balance: num_stages must be >= 1, got ", num_stages);
  std::vector<int64_t> counts(static_cast<size_t>(num_stages), n_layer / num_stages);
  for (int64_t s = 0; s < n_layer % num_stages; ++s) ++counts[static_cast<size_t>(s)];
  return counts;
}

}  // namespace kiln::nn::gpt
