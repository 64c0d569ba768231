#include "tensor/error.h"

namespace kiln {

static std::string with_location(const std::string& message, const char* file, int line) {
  return message + " [at " + file + ":" + std::to_string(line) + "]";
}

Error::Error(std::string message, const char* file, int line)
    : std::runtime_error(with_location(message, file, line)),
      message_(std::move(message)),
      file_(file),
      line_(line) {}

namespace detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), file, line);
}

}  // namespace detail
}  // namespace kiln
