// pixel_shuffle and pixel_unshuffle: a reshape that splits the dims to be
// interleaved, a permute that interleaves them, and a reshape that merges
// them (Note [Composite layers] in nn/functional_composite.h). The leading
// dims, any number of them, are merged into one batch dim on the way.
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

namespace {

// The dims before the last three, and their product.
struct Leading {
  Shape dims;
  int64_t count = 1;
};

Leading leading_dims(const Tensor& x) {
  Leading lead;
  for (int64_t d = 0; d + 3 < x.dim(); ++d) {
    lead.dims.push_back(x.size(d));
    lead.count *= x.size(d);
  }
  return lead;
}

Shape with_last_three(Shape dims, int64_t c, int64_t h, int64_t w) {
  dims.insert(dims.end(), {c, h, w});
  return dims;
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor) {
  const int64_t r = upscale_factor;
  KILN_CHECK(x.dim() >= 3, "pixel_shuffle: expected input of shape (*, C*r*r, H, W), got ", x.dim(),
             "D input of shape ", x.shape());
  KILN_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  KILN_CHECK(c % (r * r) == 0, "pixel_shuffle: the ", c, " channels (dim -3) of input of shape ", x.shape(),
             " are not divisible by upscale_factor^2 = ", r * r);
  const Leading lead = leading_dims(x);
  const int64_t oc = c / (r * r);
  // (B, oc, r, r, H, W) -> (B, oc, H, r, W, r): out[.., h*r + i, w*r + j] = x[.., c*r*r + i*r + j, h, w].
  Tensor split = x.reshape({lead.count, oc, r, r, h, w});
  return split.permute({0, 1, 4, 2, 5, 3}).reshape(with_last_three(lead.dims, oc, h * r, w * r));
}

Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor) {
  const int64_t r = downscale_factor;
  KILN_CHECK(x.dim() >= 3, "pixel_unshuffle: expected input of shape (*, C, H*r, W*r), got ", x.dim(),
             "D input of shape ", x.shape());
  KILN_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  KILN_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: the height ", h, " and width ", w, " of input of shape ",
             x.shape(), " must be divisible by downscale_factor ", r);
  const Leading lead = leading_dims(x);
  // (B, C, H/r, r, W/r, r) -> (B, C, r, r, H/r, W/r), pixel_shuffle's inverse permutation.
  Tensor split = x.reshape({lead.count, c, h / r, r, w / r, r});
  return split.permute({0, 1, 3, 5, 2, 4}).reshape(with_last_three(lead.dims, c * r * r, h / r, w / r));
}

}  // namespace kiln::nn::functional
