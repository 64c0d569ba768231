#include "apps/lenet/history.h"

#include <nlohmann/json.hpp>

#include "tensor/error.h"

namespace kiln::apps::lenet {

namespace {

using nlohmann::json;

json to_json(const EpochRecord& r) {
  return json{{"epoch", r.epoch},
              {"train_loss", r.train_loss},
              {"test_loss", r.test_loss},
              {"test_accuracy", r.test_accuracy},
              {"lr", r.lr},
              {"seconds", r.seconds},
              {"images_per_second", r.images_per_second},
              {"elapsed_seconds", r.elapsed_seconds}};
}

EpochRecord from_json(const json& j) {
  KILN_CHECK(j.is_object(), "epoch record: expected a JSON object, got ", j.dump());
  auto field = [&](const char* name) -> const json& {
    KILN_CHECK(j.contains(name) && j[name].is_number(), "epoch record: field '", name,
               "' is missing or not a number in ", j.dump());
    return j[name];
  };
  EpochRecord r;
  r.epoch = field("epoch").get<int64_t>();
  r.train_loss = field("train_loss").get<double>();
  r.test_loss = field("test_loss").get<double>();
  r.test_accuracy = field("test_accuracy").get<double>();
  r.lr = field("lr").get<double>();
  r.seconds = field("seconds").get<double>();
  r.images_per_second = field("images_per_second").get<double>();
  r.elapsed_seconds = field("elapsed_seconds").get<double>();
  return r;
}

json parse(const std::string& text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    KILN_CHECK(false, what, ": not valid JSON (", e.what(), ")");
  }
  return {};
}

}  // namespace

std::string to_json_line(const EpochRecord& record) { return to_json(record).dump(); }

EpochRecord epoch_record_from_json(const std::string& text) { return from_json(parse(text, "epoch record")); }

std::string history_to_json(const std::vector<EpochRecord>& history) {
  json array = json::array();
  for (const EpochRecord& r : history) array.push_back(to_json(r));
  return array.dump();
}

std::vector<EpochRecord> history_from_json(const std::string& text) {
  json array = parse(text, "epoch history");
  KILN_CHECK(array.is_array(), "epoch history: expected a JSON array, got ", array.dump());
  std::vector<EpochRecord> history;
  for (const json& j : array) history.push_back(from_json(j));
  return history;
}

}  // namespace kiln::apps::lenet
