#include "nn/padding.h"

#include <string>

#include "nn/repr.h"

namespace kiln::nn {

PadNd::PadNd(const char* name, int64_t dims, std::vector<int64_t> padding, functional::PadMode mode, double value)
    : Module(name), padding(std::move(padding)), mode(mode), value(value) {
  KILN_CHECK(static_cast<int64_t>(this->padding.size()) == 2 * dims, name, ": expected one padding for every side or ",
             2 * dims, " paddings (last dim first: left, right", dims > 1 ? ", top, bottom" : "",
             dims > 2 ? ", front, back" : "", "), got ", this->padding.size(), ": ", this->padding);
}

Tensor PadNd::forward(const Tensor& input) {
  const bool constant = mode == functional::PadMode::Constant;
  return functional::pad(input, padding, mode, constant ? std::optional<double>(value) : std::nullopt);
}

std::string PadNd::extra_repr() const {
  if (mode != functional::PadMode::Constant) return repr::tuple(padding);
  return "padding=" + repr::tuple(padding) + ", value=" + repr::floating(value);
}

std::string ZeroPad2d::extra_repr() const { return repr::tuple(padding); }

}  // namespace kiln::nn
