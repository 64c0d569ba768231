#include "apps/common/checkpoint_fields.h"

#include <charconv>
#include <cmath>

namespace kiln::apps {

std::string exact_text(double v) {
  char buffer[40];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return error == std::errc() ? std::string(buffer, end) : std::to_string(v);
}

const std::string& CheckpointFields::text(const std::string& key) const {
  auto it = extra_.find(key);
  KILN_CHECK(it != extra_.end(), flag_, " '", path_, "': not a ", program_, " checkpoint of this version (no '", key,
             "' field in its metadata)");
  return it->second;
}

int64_t CheckpointFields::integer(const std::string& key, int64_t lo, int64_t hi) const {
  const std::string& s = text(key);
  int64_t value = 0;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  KILN_CHECK(error == std::errc() && end == s.data() + s.size() && value >= lo && value <= hi, flag_, " '", path_,
             "': checkpoint field '", key, "' is '", s, "'; expected an integer from ", lo, " to ", hi);
  return value;
}

double CheckpointFields::number(const std::string& key) const {
  const std::string& s = text(key);
  double value = 0;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  KILN_CHECK(error == std::errc() && end == s.data() + s.size() && std::isfinite(value) && value >= 0, "--resume '",
             path_, "': checkpoint field '", key, "' is '", s, "'; expected a finite non-negative number");
  return value;
}

void CheckpointFields::check_recipe(const std::string& recipe) const {
  KILN_CHECK(text("recipe") == recipe, flag_, " '", path_, "': the checkpoint was made with ", text("recipe"),
             "; this run has ", recipe, ". Resume with the flags of the saved run");
}

}  // namespace kiln::apps
