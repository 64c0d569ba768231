// A GPT (nn/models/gpt.h) cut into pipeline stages: consecutive runs of its
// blocks, the first stage also embedding the tokens and the last also
// producing the logits.
//
//   auto gpt = std::make_shared<nn::GPT>(config);            // n_layer 4
//   nn::gpt::StageSplit split = nn::gpt::split_into_stages(*gpt, nn::gpt::even_balance(4, 2));
//   TensorList x = (*split.stages[0])({idx});                // {x (B, T, E)}: embed, blocks 0-1
//   TensorList logits = (*split.stages[1])(x);               // {logits (B, T, V)}: blocks 2-3, ln_f, lm_head
//   // logits[0] is gpt->forward(idx), bit for bit
//
// Note [GPT pipeline stages]
// What a stage takes and returns (Note [Modules of several tensors]: a stage
// is called with a TensorList and returns one):
//   stage 0 of several   {idx (B, T) Int64}   -> {x (B, T, E)}       drop(wte(idx) + wpe(0..T-1)), its blocks
//   a middle stage       {x (B, T, E)}        -> {x (B, T, E)}       its blocks
//   the last of several  {x (B, T, E)}        -> {logits (B, T, V)}  its blocks, ln_f, lm_head
//   the only stage       {idx (B, T) Int64}   -> {logits (B, T, V)}  all of GPT::forward
// Each runs the same operations, in the same order and through the same
// modules, as GPT::forward (the embedding is gpt::embed, the input check
// gpt::check_tokens, errors naming "GPT stage k"), so chaining the stages
// gives GPT::forward's logits bit for bit, and backward through the chain
// GPT::loss's gradients. The loss is not a stage's: the pipeline applies
// GPT::loss_from_logits to the last stage's output.
//
// Sharing. A stage registers the model's own submodules (the same
// shared_ptr<Module> objects), so its parameters are the model's tensors,
// not copies: an optimizer step on the model is seen by the stages and the
// other way round. A stage keeps only its own modules alive, so a rank that
// builds the whole GPT (same seed on every rank, hence the same weights),
// splits it and keeps its own stage frees the rest when it drops the GPT.
//
// Keys. A stage's modules sit under the model's paths ("transformer" /
// "wte", "h" / "3", "ln_f", and "lm_head"), and a block keeps its global
// number: the stage holding block 3 has "transformer.h.3.ln_1.weight", not
// "transformer.h.0...". So each stage's state_dict() is the slice of the
// model's for what it holds, the union of the stages' dicts is the model's
// dict (the same keys, the same memory), and a checkpoint of the model loads
// into the stages with strict = false, or stage by stage from the slices.
//
// Tied weights (Note [Tied embedding weights]). The token embedding's weight
// is also the LM head's. With one stage, the stage holds both modules and so,
// exactly as GPT, both keys ("transformer.wte.weight" and "lm_head.weight")
// on one tensor, listed once by parameters(); StageSplit::tied is empty.
// With S > 1 stages, stage 0 holds it as "transformer.wte.weight" (the
// embedding) and stage S-1 as "lm_head.weight" (the head); in one process it
// is still one tensor, whose gradient sums both uses. Across processes each
// end holds its own copy, so the pipeline must sum the two gradients (and
// keep the copies equal) itself: StageSplit::tied lists
// {{0, "transformer.wte.weight"}, {S-1, "lm_head.weight"}} for that.
//
// Empty stages. A stage may hold zero blocks (blocks_per_stage {4, 0} or
// {0, 4, 0}): stage 0 then only embeds, the last only applies ln_f and
// lm_head, and a middle stage is the identity, returning its input tensor
// itself (no copy, no graph node). This keeps even_balance(n_layer, S) valid
// for S > n_layer and lets a schedule give the embedding or the head a stage
// of its own. With one stage every block is in it (the counts sum to n_layer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/models/gpt.h"

namespace kiln::nn::gpt {

// One stage of a split GPT (Note [GPT pipeline stages]). The module
// pointers are the model's; those a stage does not hold are null.
class Stage : public Module {
 public:
  // Stage `index` of `num_stages`, holding blocks [first_block, first_block
  // + num_blocks) of `model`, its embedding if index == 0 and its ln_f and
  // lm_head if index == num_stages - 1. split_into_stages checks the arguments.
  Stage(GPT& model, int64_t index, int64_t num_stages, int64_t first_block, int64_t num_blocks);

  // The stage's input list -> its output list (the table in the Note).
  // Throws naming "GPT stage <index>" when the list does not hold one tensor
  // of the expected form.
  TensorList forward_many(const TensorList& inputs) override;
  // The same, called with one tensor.
  Tensor forward(const Tensor& input) override;
  // "stage=1, num_stages=3, blocks=[2, 4)"
  std::string extra_repr() const override;

  bool is_first() const { return index == 0; }
  bool is_last() const { return index == num_stages - 1; }

  const int64_t index;
  const int64_t num_stages;
  const int64_t first_block;  // the global number of blocks[0]
  const int64_t block_size;
  const int64_t n_embd;
  std::shared_ptr<Embedding> wte;  // first stage only
  std::shared_ptr<Embedding> wpe;  // first stage only
  std::shared_ptr<Dropout> drop;   // first stage only
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<LayerNorm> ln_f;      // last stage only
  std::shared_ptr<TiedLinear> lm_head;  // last stage only

 private:
  std::string op_;  // "GPT stage <index>", for errors
};

struct StageSplit {
  // The stages in pipeline order; each is a gpt::Stage.
  std::vector<std::shared_ptr<Module>> stages;
  // Parameters that more than one stage holds: each entry lists (stage
  // index, state-dict key) of one tensor, in stage order. With S > 1 stages
  // that is exactly {{0, "transformer.wte.weight"}, {S-1, "lm_head.weight"}};
  // empty for one stage, which holds the tensor once under both keys, as GPT.
  std::vector<std::vector<std::pair<int, std::string>>> tied;
};

// Cuts `model` into blocks_per_stage.size() stages, stage s holding the next
// blocks_per_stage[s] blocks in order; stage 0 also holds wte, wpe and drop,
// the last ln_f and lm_head. Requires at least one stage, every count >= 0
// (zero-block stages are allowed, Note [GPT pipeline stages]) and the counts
// summing to the model's n_layer; throws naming split_into_stages and the
// counts otherwise. The stages share the model's modules.
StageSplit split_into_stages(GPT& model, const std::vector<int64_t>& blocks_per_stage);

// n_layer blocks spread as evenly as possible over num_stages stages, the
// first stages getting the extra ones: even_balance(5, 2) is {3, 2},
// even_balance(2, 4) is {1, 1, 0, 0}. Requires n_layer >= 0, num_stages >= 1.
std::vector<int64_t> even_balance(int64_t n_layer, int64_t num_stages);

}  // namespace kiln::nn::gpt
