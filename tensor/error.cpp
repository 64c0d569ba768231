#include "tensor/error.h"

#include <string_view>

namespace kiln {

namespace {

// Note [Source paths in messages]
// __FILE__ is the path the compiler was given, absolute under CMake: the
// build machine's folder would end every message a user sees. This file's
// own __FILE__ ends in "tensor/error.cpp", so what comes before is the
// source folder, found without any build setting; a location under it is
// shown relative to it ("tensor/linalg.cpp:88"), for Kiln's files and for a
// program's own files compiled from the same tree alike. A build that
// hands the compiler relative paths (ccache with CCACHE_BASEDIR rewrites
// them so) gives "../tensor/linalg.cpp" from the build folder and
// "../../tests/x.cpp" from one below it: the leading "../" and "./" are
// dropped, leaving the path from the source folder when the build folder is
// inside it. Other absolute paths stay as they are.
std::string_view source_root() {
  static const std::string_view root = [] {
    constexpr std::string_view self = __FILE__, tail = "tensor/error.cpp";
    return self.ends_with(tail) ? self.substr(0, self.size() - tail.size()) : std::string_view();
  }();
  return root;
}

const char* relative_to_source_root(const char* file) {
  if (file == nullptr) return file;
  const std::string_view root = source_root();
  if (!root.empty() && root.front() == '/') {
    return std::string_view(file).starts_with(root) ? file + root.size() : file;
  }
  while (true) {  // a relative __FILE__
    const std::string_view rest(file);
    if (rest.starts_with("../")) {
      file += 3;
    } else if (rest.starts_with("./")) {
      file += 2;
    } else {
      return file;
    }
  }
}

}  // namespace

static std::string with_location(const std::string& message, const char* file, int line) {
  return message + " [at " + file + ":" + std::to_string(line) + "]";
}

Error::Error(std::string message, const char* file, int line)
    : std::runtime_error(with_location(message, relative_to_source_root(file), line)),
      message_(std::move(message)),
      file_(relative_to_source_root(file)),
      line_(line) {}

namespace detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), file, line);
}

}  // namespace detail
}  // namespace kiln
