#include "apps/gpt/text_data.h"

#include "tensor/error.h"

namespace kiln::apps::gpt {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

}  // namespace

Corpus read_corpus(const std::string& path) {
  Corpus corpus;
  if (path.empty()) {
    corpus.text = data::load_fortunes();
    corpus.description = std::string("the fortunes corpus (") + data::kFortunesDir + ")";
  } else {
    try {
      corpus.text = data::load_text_file(path);
    } catch (const Error& e) {
      KILN_FAIL("--data '", path, "': ", e.message());
    }
    corpus.description = "'" + path + "'";
  }
  corpus.hash = fnv1a(corpus.text);
  return corpus;
}

std::unique_ptr<data::Tokenizer> build_tokenizer(const TrainOptions& o, const std::string& text) {
  if (o.tokenizer == "bpe") {
    return std::make_unique<data::ByteBpeTokenizer>(data::ByteBpeTokenizer::train(text, o.vocab_size));
  }
  return std::make_unique<data::CharTokenizer>(data::CharTokenizer::from_corpus(text));
}

TextData open_text_data(const Corpus& corpus, std::shared_ptr<data::Tokenizer> tokenizer, const TrainOptions& o,
                        int world_size) {
  TextData d;
  d.tokenizer = std::move(tokenizer);
  std::vector<int64_t> tokens;
  try {
    tokens = d.tokenizer->encode(corpus.text);
  } catch (const Error& e) {
    KILN_FAIL(corpus.description, " does not encode with the ", d.tokenizer->name(), " tokenizer: ", e.message());
  }
  data::TokenSplit split = data::split_tokens(tokens);
  const int64_t val_tokens = split.val.size(0);
  KILN_CHECK(val_tokens >= o.block_size + 1, corpus.description, " holds ", tokens.size(),
             " tokens; its validation split (the last 10%, ", val_tokens,
             " tokens) needs at least --block-size + 1 = ", o.block_size + 1,
             ": give a longer text or a smaller --block-size");
  d.train = std::make_shared<data::TokenWindowDataset>(split.train, o.block_size, "train");
  d.val = std::make_shared<data::TokenWindowDataset>(split.val, o.block_size, "val");
  const int64_t batch = o.batch_size * world_size;
  d.batches = std::make_unique<data::RandomWindowBatches>(d.train, batch, o.seed);
  const int64_t eval_windows = o.eval_batches * batch;
  d.train_eval = std::make_unique<data::FixedWindowBatches>(d.train, batch, eval_windows);
  d.val_eval = std::make_unique<data::FixedWindowBatches>(d.val, batch, eval_windows);
  return d;
}

}  // namespace kiln::apps::gpt
