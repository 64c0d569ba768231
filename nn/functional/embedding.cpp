// Embedding lookup: the forward is a row gather (index_select), the backward
// a row scatter-add into a zero gradient, so a row picked k times receives
// the sum of its k gradients.
#include "autograd/function.h"
#include "nn/functional.h"
#include "tensor/index.h"
#include "tensor/factory.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be (num_embeddings, embedding_dim), got shape ",
             weight.shape());
  KILN_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32,
             "embedding: indices must be Int64 or Int32, got ", indices.dtype());
  KILN_CHECK(indices.device() == weight.device(), "embedding: indices are on ", indices.device(), " but weight is on ",
             weight.device());
  const int64_t num_embeddings = weight.size(0), dim = weight.size(1);
  if (padding_idx) {
    KILN_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings,
               "embedding: padding_idx must be within [", -num_embeddings, ", ", num_embeddings, "), got ",
               *padding_idx);
    if (*padding_idx < 0) *padding_idx += num_embeddings;
  }
  Tensor flat = indices.reshape({-1}).to(DType::Int64);  // (L)
  // On a GPU the error comes when the host next waits for it (Note [CUDA
  // kernel errors]); index_select's kernel skips a bad index meanwhile.
  ops::check_index_range(flat, num_embeddings, [num_embeddings](int64_t v) {
    return detail::str("embedding: index ", v, " is out of range for ", num_embeddings, " embeddings");
  });
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = autograd::untracked([&] { return ops::index_select(weight, 0, flat).view(out_shape); });  // (*, dim)
  if (autograd::needs_grad({weight})) {
    autograd::record(
        "embedding", {weight}, {out},
        [flat = SavedTensor(flat), weight_shape = weight.shape(), padding_idx](const TensorList& g) -> TensorList {
          const Tensor& rows = flat.get();
          const int64_t count = rows.numel(), dim = weight_shape[1];
          Tensor grad_rows = g[0].reshape({count, dim});  // (L, dim)
          if (padding_idx) {
            // The padding row is a constant: drop its gradients before they are summed.
            Tensor keep = ops::ne(rows, *padding_idx).unsqueeze(1);  // (L, 1)
            grad_rows = kiln::where(keep, grad_rows, 0);
          }
          Tensor zero = zeros(weight_shape, {g[0].dtype(), g[0].device()});
          // index (L, dim): row rows[l] for every column of src row l.
          Tensor index = rows.unsqueeze(1).expand({count, dim});
          return {kiln::scatter_add(zero, 0, index, grad_rows)};
        });
  }
  return out;
}

}  // namespace kiln::nn::functional
