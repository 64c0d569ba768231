// libFuzzer target for the image decoder (data/image.h: PNG, JPEG and BMP
// through stb_image, plus Kiln's own check for truncated BMPs), fed the input
// as one encoded file. The first byte picks the decode options, so the
// channel conversions and the required-channels check are fuzzed as well; the
// rest is the file. The decoder must either return a (C, H, W) uint8 image
// or throw kiln::Error; a crash, a sanitizer report or any other exception is
// a finding. tests/fuzz/README.md says how to build and run it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "data/image.h"
#include "tensor/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  kiln::data::DecodeOptions options;
  options.channels = 1 + (data[0] & 3);
  options.require_channels = (data[0] & 4) != 0;
  try {
    kiln::Tensor image = kiln::data::decode_image(data + 1, size - 1, "fuzz.img", options);
    // image: (C, H, W) uint8
    if (image.dim() != 3 || image.size(0) != options.channels || image.size(1) <= 0 || image.size(2) <= 0) {
      std::fprintf(stderr, "kiln_image_fuzz: decoded image has a wrong shape\n");
      std::abort();
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
