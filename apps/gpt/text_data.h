// Where kiln-gpt's tokens come from: the corpus (--data FILE or the fortunes
// corpus), its tokenizer, the 90/10 train/validation split of its tokens,
// the random training batches and the fixed evaluation batches
// (data/text_dataset.h, Note [Token windows]).
//
//   Corpus corpus = read_corpus(o.data);
//   TextData data = open_text_data(corpus, build_tokenizer(o, corpus.text), o);
//   Batch b = data.batches->batch(step);        // x, y (B, T) Int64
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apps/gpt/options.h"
#include "data/text_dataset.h"
#include "data/tokenizer.h"

namespace kiln::apps::gpt {

struct Corpus {
  std::string text;         // UTF-8
  std::string description;  // "the fortunes corpus (/usr/share/games/fortunes)" or "'book.txt'"
  // FNV-1a of the text: a checkpoint records it, so that --resume on other
  // text is refused.
  uint64_t hash = 0;
};

// The text of --data `path`, or the fortunes corpus when `path` is empty.
// Throws kiln::Error naming the file (or the fortunes folder and the
// packages to install) when it cannot be read or is not UTF-8.
Corpus read_corpus(const std::string& path);

// A new tokenizer of o.tokenizer's kind for `text`: its characters (char),
// or o.vocab_size - 256 byte-pair merges learned from it (bpe).
std::unique_ptr<data::Tokenizer> build_tokenizer(const TrainOptions& o, const std::string& text);

struct TextData {
  std::shared_ptr<data::Tokenizer> tokenizer;
  std::shared_ptr<data::TokenWindowDataset> train;       // the first 90% of the tokens
  std::shared_ptr<data::TokenWindowDataset> val;         // the rest
  std::unique_ptr<data::RandomWindowBatches> batches;    // training batch i, a function of (seed, i)
  std::unique_ptr<data::FixedWindowBatches> train_eval;  // the same windows at every evaluation
  std::unique_ptr<data::FixedWindowBatches> val_eval;
};

// Encodes `corpus` with `tokenizer` and splits it. The batches hold
// o.batch_size x world_size windows: across processes each rank trains and
// evaluates on its rows of them (Note [kiln-gpt across processes]). Throws
// kiln::Error naming the corpus when a split is shorter than block_size + 1
// tokens.
TextData open_text_data(const Corpus& corpus, std::shared_ptr<data::Tokenizer> tokenizer, const TrainOptions& o,
                        int world_size = 1);

}  // namespace kiln::apps::gpt
