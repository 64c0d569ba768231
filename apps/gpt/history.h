// The record of a kiln-gpt run, one entry per evaluation: what --log appends
// as JSON lines (apps/common/jsonl.h), what --plot draws, and what a
// checkpoint carries so that a resumed run redraws the whole curve.
//
//   {"step":500,"train_loss":1.71,"val_loss":1.83,"lr":0.00061,"tokens_per_second":9120.5,"elapsed_seconds":231.4}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/chart.h"

namespace kiln::apps::gpt {

struct EvalRecord {
  int64_t step = 0;       // optimizer steps taken before the evaluation (0: the initial model)
  double train_loss = 0;  // mean cross-entropy over the fixed evaluation batches of the training split
  double val_loss = 0;    // the same over the validation split
  double lr = 0;          // of the last step taken (0 before the first)
  // Training tokens per second since the previous evaluation (evaluations excluded).
  double tokens_per_second = 0;
  // Wall-clock time of the whole run at this evaluation: start-up and
  // evaluations included, and a resumed run's time added to its checkpoint's.
  double elapsed_seconds = 0;
};

// One JSON object on one line, without the newline; the keys are the field names.
std::string to_json_line(const EvalRecord& record);
// Parses what to_json_line writes; throws kiln::Error on a missing field or bad JSON.
EvalRecord eval_record_from_json(const std::string& text);

// The whole history as one JSON array (a checkpoint's "history" field), and back.
std::string history_to_json(const std::vector<EvalRecord>& history);
std::vector<EvalRecord> history_from_json(const std::string& text);

// --plot: one panel, train and validation loss against the step.
Chart loss_chart(const std::vector<EvalRecord>& history);

}  // namespace kiln::apps::gpt
