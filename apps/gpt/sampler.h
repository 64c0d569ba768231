// `kiln-gpt sample`: the text a trained GPT writes after a prompt.
//
//   SampleOptions o;
//   o.checkpoint = "run.ckpt"; o.prompt = "Q: "; o.seed = 7;
//   std::vector<std::string> texts = run_sampling(o);   // prompt + continuation, num_samples of them
#pragma once

#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "apps/gpt/options.h"

namespace kiln::apps::gpt {

// Loads the checkpoint's model and tokenizer, encodes the prompt, and
// generates num_samples continuations of max_new_tokens tokens (each the
// prompt followed by its continuation), from one generator seeded with
// `seed`: the same options give the same texts. Prints each to `out`,
// separated by a line of dashes. Throws kiln::Error naming the checkpoint
// when it does not load, or the character of the prompt that the
// tokenizer cannot encode.
std::vector<std::string> run_sampling(const SampleOptions& options, std::ostream& out = std::cout);

}  // namespace kiln::apps::gpt
