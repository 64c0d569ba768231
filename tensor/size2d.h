// Size2d: one size for each of the two spatial dims of an image, what the
// 2-d convolutions (tensor/conv.h) and poolings (tensor/pool.h) take for
// their kernel, stride, padding and dilation, as torch takes an int or a
// pair: Size2d(3) is 3 x 3, Size2d(3, 1) is 3 high and 1 wide.
#pragma once

#include <cstdint>

namespace kiln {

struct Size2d {
  int64_t h, w;
  constexpr Size2d(int64_t both) : h(both), w(both) {}  // NOLINT: implicit, so that `.kernel = 2` reads as torch's
  constexpr Size2d(int64_t h, int64_t w) : h(h), w(w) {}
  constexpr bool operator==(const Size2d&) const = default;
};

}  // namespace kiln
