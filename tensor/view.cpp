// Views: new sizes/strides/offset over the same storage, no data copied.
#include <algorithm>
#include <numeric>
#include <optional>

#include "tensor/autograd_hooks.h"
#include "tensor/quant_params_view.h"
#include "tensor/tensor.h"

namespace kiln {

// A view shares its base's version counter, so that a write through either is
// seen by both (Note [Version counter]), and stands on its base's grid with
// `params` (Note [Quantization parameters through views] in
// quant_params_view.h).
static Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset, quant_view::Params params) {
  auto impl = std::make_shared<TensorImpl>(base.storage(), base.dtype(), std::move(sizes), std::move(strides), offset,
                                           base.impl()->version_counter());
  impl->set_quant_params(std::move(params));
  return Tensor(std::move(impl));
}

static const quant_view::Params& params_of(const Tensor& t) { return t.impl()->quant_params(); }

// Every view of a tensor that takes part in autograd is reported to it with
// a way to redo the view (Note [Autograd hooks]).
static Tensor recorded(std::string_view op, const Tensor& base, Tensor view, ViewReplay replay,
                       ViewKind kind = ViewKind::Alias) {
  if (base.impl()->autograd_meta()) autograd_hooks().record_view(op, base, view, std::move(replay), kind);
  return view;
}

// Resolves a single -1 in `shape` so that its numel equals `numel`.
static Shape infer_size(const Shape& shape, int64_t numel, std::string_view op) {
  Shape out = shape;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer_at < 0, op, ": only one dimension can be -1, got ", shape);
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape);
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input of size ", numel);
    out[infer_at] = numel / known;
  } else {
    KILN_CHECK(known == numel, op, ": shape ", shape, " is invalid for input of size ", numel);
  }
  return out;
}

// Strides that let `new_shape` view memory laid out as (old_shape,
// old_strides), or nothing when no such strides exist. Walks both shapes in
// chunks of equal numel; within a chunk the old dims must be contiguous with
// respect to each other (PyTorch's computeStride).
static std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  Shape new_strides(new_shape.size());
  if (old_shape.empty() || shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    bool chunk_ends = tensor_d == 0 ||
                      (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (chunk_ends) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor Tensor::view(const Shape& shape_arg) const {
  Shape new_shape = infer_size(shape_arg, numel(), "view");
  auto strides_or = view_strides(shape(), strides(), new_shape);
  KILN_CHECK(strides_or.has_value(), "view: cannot view a tensor of shape ", shape(), " and strides ", strides(),
             " as shape ", new_shape, "; the memory is not laid out compatibly, use reshape() to copy");
  auto params = quant_view::reshaped(params_of(*this), shape(), new_shape, "view");
  return recorded("view", *this,
                  make_view(*this, std::move(new_shape), std::move(*strides_or), storage_offset(), std::move(params)),
                  [shape = shape_arg](const Tensor& t) { return t.view(shape); });
}

// reshape, naming `op` (reshape or flatten) in its errors.
static Tensor reshape_as(const Tensor& t, const Shape& shape_arg, std::string_view op) {
  Shape new_shape = infer_size(shape_arg, t.numel(), op);
  auto params = quant_view::reshaped(params_of(t), t.shape(), new_shape, op);
  if (auto strides_or = view_strides(t.shape(), t.strides(), new_shape)) {
    return recorded(op, t,
                    make_view(t, std::move(new_shape), std::move(*strides_or), t.storage_offset(), std::move(params)),
                    [shape = shape_arg](const Tensor& x) { return x.view(shape); });
  }
  return t.contiguous().view(new_shape);
}

Tensor Tensor::reshape(const Shape& shape_arg) const { return reshape_as(*this, shape_arg, "reshape"); }

Tensor Tensor::permute(const Shape& dims) const {
  KILN_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(), " dims for a tensor of shape ",
             shape());
  Shape sizes(dims.size()), new_strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    KILN_CHECK(!seen[d], "permute: dim ", d, " repeated in ", dims);
    seen[d] = true;
    sizes[i] = shape()[d];
    new_strides[i] = strides()[d];
  }
  Shape wrapped(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) wrapped[i] = wrap_dim(dims[i], dim(), "permute");
  return recorded("permute", *this,
                  make_view(*this, std::move(sizes), std::move(new_strides), storage_offset(),
                            quant_view::permuted(params_of(*this), wrapped)),
                  [dims](const Tensor& t) { return t.permute(dims); });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() == 0) return *this;
  int64_t a = wrap_dim(dim0, dim(), "transpose");
  int64_t b = wrap_dim(dim1, dim(), "transpose");
  Shape sizes = shape(), new_strides = strides();
  std::swap(sizes[a], sizes[b]);
  std::swap(new_strides[a], new_strides[b]);
  Shape dims(static_cast<size_t>(dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[a], dims[b]);
  return recorded("transpose", *this,
                  make_view(*this, std::move(sizes), std::move(new_strides), storage_offset(),
                            quant_view::permuted(params_of(*this), dims)),
                  [dim0, dim1](const Tensor& t) { return t.transpose(dim0, dim1); });
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t: expects a tensor with at most 2 dims, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " and length ", length,
             " are out of range for dim ", d, " of size ", n);
  Shape sizes = shape();
  sizes[d] = length;
  return recorded("narrow", *this,
                  make_view(*this, std::move(sizes), strides(), storage_offset() + start * strides()[d],
                            quant_view::sliced(params_of(*this), d, start, 1, length)),
                  [d, start, length](const Tensor& t) { return t.narrow(d, start, length); });
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  KILN_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  d = wrap_dim(d, dim(), "slice");
  int64_t n = shape()[d];
  // Python semantics: negative bounds count from the end, then clamp.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = shape(), new_strides = strides();
  sizes[d] = (end - start + step - 1) / step;
  new_strides[d] *= step;
  auto params = quant_view::sliced(params_of(*this), d, start, step, sizes[d]);
  return recorded("slice", *this,
                  make_view(*this, std::move(sizes), std::move(new_strides), storage_offset() + start * strides()[d],
                            std::move(params)),
                  [d, start, end, step](const Tensor& t) { return t.slice(d, start, end, step); });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = shape()[d];
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape sizes = shape(), new_strides = strides();
  int64_t offset = storage_offset() + index * strides()[d];
  sizes.erase(sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  auto params = quant_view::dim_removed(params_of(*this), d, "select");
  return recorded("select", *this, make_view(*this, std::move(sizes), std::move(new_strides), offset, std::move(params)),
                  [d, index](const Tensor& t) { return t.select(d, index); });
}

Tensor Tensor::expand(const Shape& target) const {
  KILN_CHECK(static_cast<int64_t>(target.size()) >= dim(), "expand: cannot expand shape ", shape(), " to ", target,
             " (fewer dims)");
  size_t lead = target.size() - shape().size();
  Shape sizes(target.size()), new_strides(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      KILN_CHECK(target[i] >= 0, "expand: size -1 not allowed in new leading dim ", i, " of ", target);
      sizes[i] = target[i];
      new_strides[i] = 0;
      continue;
    }
    int64_t own = shape()[i - lead];
    int64_t want = target[i] == -1 ? own : target[i];
    KILN_CHECK(own == want || own == 1, "expand: cannot expand shape ", shape(), " to ", target, " (dim ", i, ": ", own,
               " vs ", want, ")");
    sizes[i] = want;
    new_strides[i] = own == want ? strides()[i - lead] : 0;
  }
  auto params = quant_view::expanded(params_of(*this), shape(), sizes);
  return recorded(
      "expand", *this, make_view(*this, std::move(sizes), std::move(new_strides), storage_offset(), std::move(params)),
      [target](const Tensor& t) { return t.expand(target); }, ViewKind::Expand);
}

Tensor Tensor::squeeze() const {
  Shape sizes, new_strides;
  auto params = params_of(*this);
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) params = quant_view::dim_removed(params, i, "squeeze");
  }
  for (int64_t i = 0; i < dim(); ++i) {
    if (shape()[i] == 1) continue;
    sizes.push_back(shape()[i]);
    new_strides.push_back(strides()[i]);
  }
  return recorded("squeeze", *this,
                  make_view(*this, std::move(sizes), std::move(new_strides), storage_offset(), std::move(params)),
                  [](const Tensor& t) { return t.squeeze(); });
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;  // as torch: squeezing a non-1 dim is a no-op
  Shape sizes = shape(), new_strides = strides();
  sizes.erase(sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  auto params = quant_view::dim_removed(params_of(*this), d, "squeeze");
  return recorded("squeeze", *this,
                  make_view(*this, std::move(sizes), std::move(new_strides), storage_offset(), std::move(params)),
                  [d](const Tensor& t) { return t.squeeze(d); });
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape sizes = shape(), new_strides = strides();
  // The new dim's stride only matters for contiguity checks; pick the one a
  // contiguous tensor would have.
  int64_t stride = d < dim() ? strides()[d] * shape()[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, stride);
  return recorded("unsqueeze", *this,
                  make_view(*this, std::move(sizes), std::move(new_strides), storage_offset(),
                            quant_view::dim_inserted(params_of(*this), d)),
                  [d](const Tensor& t) { return t.unsqueeze(d); });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape_as(*this, {1}, "flatten");
  int64_t s = wrap_dim(start_dim, dim(), "flatten");
  int64_t e = wrap_dim(end_dim, dim(), "flatten");
  KILN_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape sizes(shape().begin(), shape().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= shape()[i];
  sizes.push_back(merged);
  sizes.insert(sizes.end(), shape().begin() + e + 1, shape().end());
  return reshape_as(*this, sizes, "flatten");
}

Tensor Tensor::as_strided(const Shape& sizes, const Shape& new_strides, int64_t offset) const {
  Tensor view =
      make_view(*this, sizes, new_strides, offset, quant_view::restrided(params_of(*this), *this, sizes, new_strides, offset));
  // Replaying a raw geometry on a tensor of the base's shape is only the
  // same view when the base is laid out contiguously from its offset, and
  // scattering a gradient back through it only works without overlaps.
  bool overlapping = false;
  for (size_t i = 0; i < sizes.size(); ++i) overlapping |= sizes[i] > 1 && new_strides[i] == 0;
  ViewReplay replay;
  if (is_contiguous() && !overlapping) {
    replay = [sizes, new_strides, rel = offset - storage_offset()](const Tensor& t) {
      return t.as_strided(sizes, new_strides, t.storage_offset() + rel);
    };
  }
  return recorded("as_strided", *this, std::move(view), std::move(replay));
}

}  // namespace kiln
