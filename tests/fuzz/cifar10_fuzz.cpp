// libFuzzer target for the readers that take bytes from outside: the
// CIFAR-10 record parser and the tar/gzip reader, fed from memory. Whatever
// the bytes, they must either parse or throw kiln::Error; a crash, a sanitizer
// report or any other exception is a bug.
//
//   cmake -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DKILN_FUZZ=ON -DKILN_CUDA=OFF
//   ninja -C build-fuzz kiln_cifar10_fuzz && build-fuzz/tests/fuzz/kiln_cifar10_fuzz -rss_limit_mb=4096
#include <cstddef>
#include <cstdint>
#include <span>

#include "data/cifar10.h"
#include "data/tar.h"
#include "tensor/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::data::Cifar10Split split = kiln::data::parse_cifar10_records(data, size, "fuzz.bin");
    // A batch that parses has whole records and labels in range.
    if (split.images.size(0) * kiln::data::kCifar10RecordBytes != static_cast<int64_t>(size)) __builtin_trap();
  } catch (const kiln::Error&) {
  }
  try {
    kiln::data::TarArchive tar = kiln::data::TarArchive::parse(std::span<const uint8_t>(data, size), "fuzz.tar");
    for (const kiln::data::TarEntry& entry : tar.entries()) {
      std::span<const uint8_t> contents = tar.contents(entry);
      try {
        kiln::data::parse_cifar10_records(contents.data(), contents.size(), entry.name);
      } catch (const kiln::Error&) {
      }
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
