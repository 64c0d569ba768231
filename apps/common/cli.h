// Command-line helpers the apps share on top of CLI11: integer flags read
// exactly (--device is checked by check_device_flag, run_setup.h).
//
//   CLI::App app{"..."};
//   add_integer(app, "--steps", o.steps, "optimizer steps");   // "--steps 1e3", "--steps -1" are errors
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <limits>
#include <string>
#include <type_traits>

#include "tensor/error.h"

namespace kiln::apps {

// The integer `text` given to `flag`, in full. Integer flags are read here
// rather than by CLI11, whose strtoll clamps 99999999999999999999 to
// 2^63 - 1 and whose strtoull wraps -1 to 2^64 - 1 (and both read "010" as
// octal). Throws kiln::Error naming the flag and the range.
template <class T>
T parse_integer(const std::string& flag, const std::string& text) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool whole = end == text.data() + text.size() && !text.empty();
  KILN_CHECK(error != std::errc::result_out_of_range || !whole, flag, ": ", text, " is out of range (",
             std::numeric_limits<T>::min(), " to ", std::numeric_limits<T>::max(), ")");
  KILN_CHECK(error == std::errc() && whole, flag, ": '", text, "' is not ",
             std::is_signed_v<T> ? "an integer" : "a non-negative integer");
  return value;
}

// An integer flag written to `target` (whose value is the default --help shows).
template <class T>
CLI::Option* add_integer(CLI::App& app, const std::string& flag, T& target, const std::string& description) {
  return app
      .add_option_function<std::string>(
          flag, [&target, flag](const std::string& text) { target = parse_integer<T>(flag, text); }, description)
      ->type_name("INT")
      ->default_str(std::to_string(target));
}

}  // namespace kiln::apps
