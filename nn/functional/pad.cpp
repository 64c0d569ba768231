// F::pad: constant padding as one recorded node, reflect, replicate and
// circular as index_select gathers (Note [Padding and interpolation as
// gathers] in nn/functional_composite.h). The checks are torch's
// (aten/src/ATen/native/PadNd.cpp and the reflection and replication
// kernels' shape checks), each naming the dim and the values.
#include <algorithm>
#include <string>

#include "autograd/function.h"
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

namespace {

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}

// One padded dim: `before` and `after` elements added (removed when
// negative) around the `size` elements of dim `dim`.
struct PaddedDim {
  int64_t dim;
  int64_t size;
  int64_t before;
  int64_t after;
  int64_t out_size() const { return size + before + after; }
  // The input elements that reach the output unchanged: the first is
  // crop_before, there are kept() of them.
  int64_t crop_before() const { return std::max<int64_t>(-before, 0); }
  int64_t kept() const { return size - crop_before() - std::max<int64_t>(-after, 0); }
};

// pad's pairs, last dim first, as the dims they pad.
std::vector<PaddedDim> padded_dims(const Tensor& x, const std::vector<int64_t>& pad) {
  std::vector<PaddedDim> dims;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i);
    dims.push_back({d, x.size(d), pad[2 * i], pad[2 * i + 1]});
  }
  return dims;
}

// Constant padding with the checks done: a tensor filled with `value` and
// the kept part of x copied into its interior. The backward is the same
// padding with the amounts negated and zeros: it crops the gradient back to
// the kept part and gives the cropped-off elements of x zeros.
Tensor constant_pad(const Tensor& x, const std::vector<int64_t>& pad, double value) {
  const std::vector<PaddedDim> dims = padded_dims(x, pad);
  Shape out_shape = x.shape();
  for (const PaddedDim& p : dims) out_shape[p.dim] = p.out_size();
  Tensor out = autograd::untracked([&] {
    Tensor result = full(out_shape, value, {x.dtype(), x.device()});
    Tensor src = x, dst = result;
    for (const PaddedDim& p : dims) {
      src = src.narrow(p.dim, p.crop_before(), p.kept());
      dst = dst.narrow(p.dim, std::max<int64_t>(p.before, 0), p.kept());
    }
    if (dst.numel() > 0) dst.copy_(src);
    return result;
  });
  if (autograd::needs_grad({x})) {
    std::vector<int64_t> negated(pad.size());
    std::transform(pad.begin(), pad.end(), negated.begin(), [](int64_t v) { return -v; });
    autograd::record("constant_pad_nd", {x}, {out}, [negated](const autograd::TensorList& g) -> autograd::TensorList {
      return {constant_pad(g[0], negated, 0.0)};
    });
  }
  return out;
}

void check_constant(const Tensor& x, const std::vector<PaddedDim>& dims) {
  bool any_positive = false;
  for (const PaddedDim& p : dims) any_positive = any_positive || p.before > 0 || p.after > 0;
  for (const PaddedDim& p : dims) {
    KILN_CHECK(p.crop_before() <= p.size && p.kept() >= 0, "pad: padding (", p.before, ", ", p.after, ") of dim ",
               p.dim, " removes more than its ", p.size, " elements (input of shape ", x.shape(), ")");
    // torch allows an empty result only when nothing is added anywhere.
    KILN_CHECK(!any_positive || p.out_size() > 0, "pad: padding (", p.before, ", ", p.after, ") of dim ", p.dim,
               " of input of shape ", x.shape(), " leaves ", p.out_size(),
               " elements; with positive padding elsewhere the output size must be positive");
  }
}

// The rules of torch's reflection_pad{1,2,3}d, replication_pad{1,2,3}d and
// _pad_circular for a non-constant mode.
void check_gathered(const Tensor& x, const std::vector<int64_t>& pad, const std::vector<PaddedDim>& dims,
                    PadMode mode) {
  const int64_t n = static_cast<int64_t>(dims.size());
  KILN_CHECK(n >= 1 && n <= 3, "pad: ", mode_name(mode), " padding takes 2, 4 or 6 pad values (the last 1, 2 or 3 ",
             "dims), got ", pad.size());
  KILN_CHECK(x.dim() == n + 1 || x.dim() == n + 2, "pad: ", mode_name(mode), " padding of ", n, " dims (", pad.size(),
             " pad values) needs a ", n + 1, "-d or ", n + 2, "-d (batched) input, got input of shape ", x.shape(),
             "; only the last 1, 2 or 3 dims can be padded in this mode");
  if (mode != PadMode::Circular) {
    // Batched inputs may have no samples, but every other dim needs elements.
    const int64_t first = x.dim() == n + 2 ? 1 : 0;
    for (int64_t d = first; d < x.dim(); ++d) {
      KILN_CHECK(x.size(d) != 0, "pad: ", mode_name(mode), " padding needs a ", n + 1, "-d or ", n + 2,
                 "-d (batched) input with every dim but the batch non-empty, got input of shape ", x.shape());
    }
  }
  bool any_nonempty = false;
  for (const PaddedDim& p : dims) {
    if (mode == PadMode::Reflect) {
      KILN_CHECK(p.before < p.size && p.after < p.size, "pad: reflect padding (", p.before, ", ", p.after, ") of dim ",
                 p.dim, " must be less than its size ", p.size, " (input of shape ", x.shape(), ")");
    }
    if (mode == PadMode::Circular) {
      // Wrapping reads the kept part; it may be read only once per side.
      KILN_CHECK(p.kept() >= 0 && p.before <= p.kept() && p.after <= p.kept(), "pad: circular padding (", p.before,
                 ", ", p.after, ") of dim ", p.dim, " of size ", p.size, " wraps around the ",
                 std::max<int64_t>(p.kept(), 0), " elements it keeps more than once (input of shape ", x.shape(), ")");
    }
    KILN_CHECK(p.out_size() >= 0, "pad: ", mode_name(mode), " padding (", p.before, ", ", p.after, ") of dim ", p.dim,
               " of size ", p.size, " gives a negative size ", p.out_size(), " (input of shape ", x.shape(), ")");
    any_nonempty = any_nonempty || p.out_size() > 0;
  }
  // torch's check: the padded dims may not all be empty.
  KILN_CHECK(mode == PadMode::Circular || any_nonempty, "pad: ", mode_name(mode), " padding ", pad,
             " leaves every padded dim of input of shape ", x.shape(), " empty");
}

// Output position j of dim p reads input position source(j).
int64_t source(const PaddedDim& p, int64_t j, PadMode mode) {
  const int64_t k = j - p.before;  // j in input coordinates
  switch (mode) {
    case PadMode::Reflect:
      return k < 0 ? -k : (k >= p.size ? 2 * (p.size - 1) - k : k);
    case PadMode::Replicate:
      return std::clamp<int64_t>(k, 0, p.size - 1);
    case PadMode::Circular: {
      // Negative pads crop first; the rest wraps around what is kept.
      const int64_t kept = p.kept(), start = std::max<int64_t>(p.before, 0);
      return p.crop_before() + (((j - start) % kept) + kept) % kept;
    }
    case PadMode::Constant:
      break;
  }
  return k;
}

Tensor gather_pad(const Tensor& x, const std::vector<PaddedDim>& dims, PadMode mode) {
  Tensor out = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const PaddedDim& p = dims[i];
    // A dim left as it is needs no gather, unless nothing else copies x
    // (the result is never x itself, as in torch).
    const bool last = i + 1 == dims.size();
    if (p.before == 0 && p.after == 0 && !(last && out.is_same(x))) continue;
    std::vector<int64_t> index(static_cast<size_t>(p.out_size()));
    for (int64_t j = 0; j < p.out_size(); ++j) index[static_cast<size_t>(j)] = source(p, j, mode);
    out = index_select(out, p.dim, from_vector<int64_t>(index, {p.out_size()}, x.device()));
  }
  return out;
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode, std::optional<double> value) {
  KILN_CHECK(x.defined(), "pad: input is undefined");
  KILN_CHECK(pad.size() % 2 == 0, "pad: the padding must come in (before, after) pairs, got ", pad.size(), " values");
  KILN_CHECK(static_cast<int64_t>(pad.size()) <= 2 * x.dim(), "pad: ", pad.size(), " pad values pad ", pad.size() / 2,
             " dims, more than the ", x.dim(), " of input of shape ", x.shape());
  const std::vector<PaddedDim> dims = padded_dims(x, pad);
  if (mode == PadMode::Constant) {
    check_constant(x, dims);
    return constant_pad(x, pad, value.value_or(0.0));
  }
  KILN_CHECK(!value.has_value(), "pad: ", mode_name(mode), " padding takes no value, got ", *value);
  check_gathered(x, pad, dims, mode);
  return gather_pad(x, dims, mode);
}

}  // namespace kiln::nn::functional
