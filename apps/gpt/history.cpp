#include "apps/gpt/history.h"

#include <nlohmann/json.hpp>

#include "tensor/error.h"

namespace kiln::apps::gpt {

namespace {

using nlohmann::json;

json to_json(const EvalRecord& r) {
  return json{{"step", r.step},
              {"train_loss", r.train_loss},
              {"val_loss", r.val_loss},
              {"lr", r.lr},
              {"tokens_per_second", r.tokens_per_second},
              {"elapsed_seconds", r.elapsed_seconds}};
}

EvalRecord from_json(const json& j) {
  KILN_CHECK(j.is_object(), "evaluation record: expected a JSON object, got ", j.dump());
  auto field = [&](const char* name) -> const json& {
    KILN_CHECK(j.contains(name) && j[name].is_number(), "evaluation record: field '", name,
               "' is missing or not a number in ", j.dump());
    return j[name];
  };
  return {.step = field("step").get<int64_t>(),
          .train_loss = field("train_loss").get<double>(),
          .val_loss = field("val_loss").get<double>(),
          .lr = field("lr").get<double>(),
          .tokens_per_second = field("tokens_per_second").get<double>(),
          .elapsed_seconds = field("elapsed_seconds").get<double>()};
}

json parse(const std::string& text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    KILN_FAIL(what, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace

std::string to_json_line(const EvalRecord& record) { return to_json(record).dump(); }

EvalRecord eval_record_from_json(const std::string& text) { return from_json(parse(text, "evaluation record")); }

std::string history_to_json(const std::vector<EvalRecord>& history) {
  json array = json::array();
  for (const EvalRecord& r : history) array.push_back(to_json(r));
  return array.dump();
}

std::vector<EvalRecord> history_from_json(const std::string& text) {
  json array = parse(text, "evaluation history");
  KILN_CHECK(array.is_array(), "evaluation history: expected a JSON array, got ", array.dump());
  std::vector<EvalRecord> history;
  for (const json& j : array) history.push_back(from_json(j));
  return history;
}

Chart loss_chart(const std::vector<EvalRecord>& history) {
  ChartSeries train{"train loss", kTrainColor}, val{"validation loss", kTestColor};
  for (const EvalRecord& r : history) {
    train.points.emplace_back(static_cast<double>(r.step), r.train_loss);
    val.points.emplace_back(static_cast<double>(r.step), r.val_loss);
  }
  Chart chart{.x_label = "step", .x_start = 0};
  chart.panels.push_back({.title = "GPT: loss", .y_label = "cross-entropy loss (nats/token)", .series = {train, val}});
  return chart;
}

}  // namespace kiln::apps::gpt
