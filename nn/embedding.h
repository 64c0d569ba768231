// Embedding, as torch.nn.Embedding: a lookup table of num_embeddings rows of
// size embedding_dim, indexed by integer tensors.
//
//   auto tok = std::make_shared<nn::Embedding>(50257, 768);
//   Tensor h = (*tok)(ids);   // ids: (B, T) int64 -> (B, T, 768)
//   nn::Embedding words(nn::EmbeddingOptions(1000, 64).padding_idx(0));   // as LibTorch
#pragma once

#include <cstdint>
#include <optional>

#include "nn/module.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.Embedding's arguments (Note [Option builders] in tensor/arg.h).
class EmbeddingOptions {
 public:
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}

  KILN_ARG(int64_t, num_embeddings);
  KILN_ARG(int64_t, embedding_dim);
  KILN_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

// Parameter "weight" (num_embeddings, embedding_dim) ~ N(0, 1), with row
// padding_idx zeroed; that row receives no gradient, so it stays as set.
// A negative padding_idx counts from the end (stored normalised).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  explicit Embedding(const EmbeddingOptions& o) : Embedding(o.num_embeddings(), o.embedding_dim(), o.padding_idx()) {}

  // indices: any shape (*), int64 or int32, in [0, num_embeddings) -> (*, embedding_dim).
  Tensor forward(const Tensor& indices) override;
  // "10, 3" or "10, 3, padding_idx=0"
  std::string extra_repr() const override;
  // weight ~ N(0, 1), padding row zeroed.
  void reset_parameters();

  const int64_t num_embeddings;
  const int64_t embedding_dim;
  const std::optional<int64_t> padding_idx;
  Tensor weight;
};

}  // namespace kiln::nn
