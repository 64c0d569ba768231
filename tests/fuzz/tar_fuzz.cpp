// libFuzzer target for the tar/gzip reader (Note [Tar archives] in
// data/tar.h), fed the input as a whole archive, compressed or not. An archive
// that parses is then read the way load_cifar10 and ImageFolder read one: each
// member's contents are taken and handed to the CIFAR-10 parser or the image
// decoder by its name, and folders are looked up (Note [Archive paths]).
// Every reader must either succeed or throw kiln::Error; a crash, a sanitizer
// report, any other exception or an entry lying outside the archive is a
// finding. tests/fuzz/README.md says how to build and run it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "data/archive_path.h"
#include "data/cifar10.h"
#include "data/image.h"
#include "data/tar.h"
#include "tensor/error.h"

namespace {

[[noreturn]] void finding(const char* what, const std::string& member) {
  std::fprintf(stderr, "kiln_tar_fuzz: %s (member '%s')\n", what, member.c_str());
  std::abort();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What load_cifar10 and ImageFolder do with a member they find.
void read_member(std::span<const uint8_t> contents, const std::string& name) {
  try {
    if (ends_with(name, ".bin"))
      kiln::data::parse_cifar10_records(contents.data(), contents.size(), name);
    else
      kiln::data::decode_image(contents.data(), contents.size(), name);
  } catch (const kiln::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::data;
  try {
    TarArchive tar = TarArchive::parse(std::span<const uint8_t>(data, size), "fuzz.tar");
    for (const TarEntry& entry : tar.entries()) {
      if (tar.find(entry.name) == nullptr) finding("find() misses a listed entry", entry.name);
      std::span<const uint8_t> contents = tar.contents(entry);
      if (contents.size() != entry.size) finding("contents() size differs from the entry's", entry.name);
      read_member(contents, entry.name);
      const std::string path = normalize_member_path(entry.name);
      const size_t slash = path.rfind('/');
      if (slash != std::string::npos && !archive_has_folder(tar, path.substr(0, slash)))
        finding("archive_has_folder() misses the folder of a listed entry", entry.name);
    }
    if (const TarEntry* batch = tar.find("cifar-10-batches-bin/test_batch.bin"))
      read_member(tar.contents(*batch), batch->name);
  } catch (const kiln::Error&) {
  }
  return 0;
}
