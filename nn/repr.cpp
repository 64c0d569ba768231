#include "nn/repr.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kiln::nn::repr {

std::string boolean(bool value) { return value ? "True" : "False"; }

std::string floating(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, in scientific form "d.ddde[+-]xx".
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, end);
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;  // the significant digits, without sign and point
  for (size_t i = sign.size(); i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  if (exponent < -4 || exponent >= 16) {
    // Python writes at least two exponent digits: 1e-05, 1e+16.
    std::string out = sign;
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    out += exponent < 0 ? "e-" : "e+";
    if (std::abs(exponent) < 10) out += '0';
    return out + std::to_string(std::abs(exponent));
  }
  std::string fixed;
  if (exponent < 0) {
    fixed = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t int_digits = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_digits) {
      fixed = digits + std::string(int_digits - digits.size(), '0') + ".0";
    } else {
      fixed = digits.substr(0, int_digits) + "." + digits.substr(int_digits);
    }
  }
  return sign + fixed;
}

std::string pair(Size2d size) {
  std::string out = "(";
  out.append(std::to_string(size.h)).append(", ").append(std::to_string(size.w)).append(")");
  return out;
}

std::string int_or_pair(Size2d size) { return size.h == size.w ? std::to_string(size.h) : pair(size); }

std::string tuple(const Shape& values) {
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  return out + (values.size() == 1 ? ",)" : ")");
}

}  // namespace kiln::nn::repr
