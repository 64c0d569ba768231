#include "nn/embedding.h"

#include <string>

#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"

namespace kiln::nn {

namespace {

std::optional<int64_t> normalised_padding_idx(std::optional<int64_t> padding_idx, int64_t num_embeddings) {
  if (!padding_idx) return std::nullopt;
  KILN_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings,
             "Embedding: padding_idx must be within [", -num_embeddings, ", ", num_embeddings, "), got ", *padding_idx);
  return *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
}

}  // namespace

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx)
    : num_embeddings(num_embeddings),
      embedding_dim(embedding_dim),
      padding_idx(normalised_padding_idx(padding_idx, num_embeddings)) {
  KILN_CHECK(num_embeddings > 0 && embedding_dim > 0,
             "Embedding: num_embeddings and embedding_dim must be positive, got ", num_embeddings, " and ",
             embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx) {
    // Through a detached view: an initial value, not a step to differentiate.
    Tensor row = weight.detach().select(0, *padding_idx);
    ops::zero_(row);
  }
}

Tensor Embedding::forward(const Tensor& indices) { return functional::embedding(indices, weight, padding_idx); }

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

}  // namespace kiln::nn
