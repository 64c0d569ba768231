// kiln::Error and the check macros every layer uses to reject bad input.
//
// A library throws; it never aborts on user input. Messages name the op and
// the offending values, e.g.
//   KILN_CHECK(a.size(1) == b.size(0), "matmul: shapes ", a.shape(), " and ",
//              b.shape(), " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
// what() is the caller's message followed by " [at file:line]".
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line);

  // The message without the source location.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {

// write() overloads let messages print shapes as "[64, 400]" and any type
// that has an operator<<.
template <class T>
void write(std::ostream& os, const T& value) {
  os << value;
}
inline void write(std::ostream& os, int8_t v) { os << static_cast<int>(v); }
inline void write(std::ostream& os, uint8_t v) { os << static_cast<unsigned>(v); }
template <class T>
void write(std::ostream& os, const std::vector<T>& values) {
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) os << ", ";
    write(os, values[i]);
  }
  os << ']';
}

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (write(os, args), ...);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, std::string message);

}  // namespace detail
}  // namespace kiln

// Throws kiln::Error with the concatenated message when `cond` is false.
#define KILN_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      ::kiln::detail::throw_error(__FILE__, __LINE__, ::kiln::detail::str(__VA_ARGS__)); \
  } while (0)

// Throws kiln::Error unconditionally.
#define KILN_FAIL(...) ::kiln::detail::throw_error(__FILE__, __LINE__, ::kiln::detail::str(__VA_ARGS__))
