#include "tensor/device.h"

#include <charconv>

#include "tensor/error.h"

namespace kiln {

Device::Device(std::string_view spec) {
  if (spec == "cpu") return;
  constexpr std::string_view cuda = "cuda";
  KILN_CHECK(spec.substr(0, cuda.size()) == cuda, "Device: cannot parse '", spec,
             "', expected 'cpu', 'cuda' or 'cuda:N'");
  type = DeviceType::CUDA;
  std::string_view rest = spec.substr(cuda.size());
  if (rest.empty()) return;
  KILN_CHECK(rest[0] == ':' && rest.size() > 1, "Device: cannot parse '", spec,
             "', expected 'cpu', 'cuda' or 'cuda:N'");
  auto [end, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), index);
  KILN_CHECK(ec == std::errc() && end == rest.data() + rest.size() && index >= 0, "Device: cannot parse '",
             spec, "', the CUDA ordinal must be a non-negative integer");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

}  // namespace kiln
