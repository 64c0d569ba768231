#include "apps/gpt/sampler.h"

#include "apps/gpt/trainer.h"
#include "kiln.h"

namespace kiln::apps::gpt {

std::vector<std::string> run_sampling(const SampleOptions& o, std::ostream& out) {
  validate(o);
  if (o.threads > 0) set_num_threads(o.threads);
  const Device device(o.device);
  CheckpointModel saved = read_checkpoint_model(o.checkpoint);
  auto model = std::make_shared<nn::GPT>(saved.config);
  try {
    model->load_state_dict(saved.weights);
  } catch (const Error& e) {
    KILN_FAIL("--checkpoint '", o.checkpoint, "': its weights do not fit its GPT config: ", e.message());
  }
  model->to(device);
  std::vector<int64_t> prompt;
  try {
    prompt = saved.tokenizer->encode(o.prompt);
  } catch (const Error& e) {
    KILN_FAIL("--prompt: ", e.message());
  }
  KILN_CHECK(!prompt.empty(), "--prompt: '", o.prompt, "' encodes to no tokens");
  const Tensor idx = from_vector<int64_t>(prompt, {1, static_cast<int64_t>(prompt.size())}).to(device);  // (1, T0)
  Generator generator(o.seed);
  nn::GenerateOptions generate{.temperature = o.temperature, .generator = &generator};
  if (o.top_k > 0) generate.top_k = std::min(o.top_k, saved.config.vocab_size);
  std::vector<std::string> texts;
  for (int64_t s = 0; s < o.num_samples; ++s) {
    const Tensor tokens = model->generate(idx, o.max_new_tokens, generate).to(kCPU).contiguous();  // (1, T0 + n)
    const int64_t* ids = tokens.data<int64_t>();
    texts.push_back(saved.tokenizer->decode(std::vector<int64_t>(ids, ids + tokens.numel())));
    if (s > 0) out << "---------------\n";
    out << texts.back() << "\n" << std::flush;
  }
  return texts;
}

}  // namespace kiln::apps::gpt
