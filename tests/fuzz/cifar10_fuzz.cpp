// libFuzzer target for the CIFAR-10 binary record parser (Note [CIFAR-10
// binary format] in data/cifar10.h), fed the input as one batch file. Whatever
// the bytes, the parser must either return whole, valid records or throw
// kiln::Error; a crash, a sanitizer report, any other exception or a batch
// that breaks the format's invariants is a finding. tests/fuzz/README.md says
// how to build and run it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "data/cifar10.h"
#include "tensor/error.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "kiln_cifar10_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::data;
  try {
    Cifar10Split split = parse_cifar10_records(data, size, "fuzz.bin");
    // split.images: (N, 3, 32, 32) uint8, split.labels: (N) int64
    const int64_t n = split.images.size(0);
    if (n * kCifar10RecordBytes != static_cast<int64_t>(size)) finding("record count does not match the size");
    if (split.labels.size(0) != n) finding("label count differs from image count");
    const int64_t* labels = split.labels.data<int64_t>();
    const uint8_t* pixels = split.images.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* record = data + i * kCifar10RecordBytes;
      if (labels[i] != record[0] || labels[i] >= kCifar10Classes) finding("label differs from the record's byte 0");
      if (pixels[i * kCifar10ImageBytes] != record[1] ||
          pixels[(i + 1) * kCifar10ImageBytes - 1] != record[kCifar10RecordBytes - 1])
        finding("pixels differ from the record's bytes");
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
