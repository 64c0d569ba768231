// The record of a run, one entry per finished epoch: what --log appends as
// JSON lines (apps/common/jsonl.h), what --plot draws, and what a checkpoint carries so that a
// resumed run redraws the whole curve.
//
//   {"epoch":1,"train_loss":1.82,"test_loss":1.55,"test_accuracy":0.4312,
//    "lr":0.0049,"seconds":21.3,"images_per_second":2347.1,"elapsed_seconds":24.9}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::apps::lenet {

struct EpochRecord {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;  // in [0, 1]
  double lr = 0;             // at the end of the epoch
  double seconds = 0;        // of training (the test pass excluded)
  double images_per_second = 0;
  // Wall-clock time of the whole run when this epoch's test pass ended:
  // start-up (reading the data) and test passes included, and a resumed
  // run's time added to its checkpoint's. Time-to-accuracy reads this.
  double elapsed_seconds = 0;
};

// One JSON object on one line, without the newline; the keys are the field names.
std::string to_json_line(const EpochRecord& record);
// Parses what to_json_line writes; throws kiln::Error on a missing field or bad JSON.
EpochRecord epoch_record_from_json(const std::string& text);

// The whole history as one JSON array (a checkpoint's "history" entry), and back.
std::string history_to_json(const std::vector<EpochRecord>& history);
std::vector<EpochRecord> history_from_json(const std::string& text);

}  // namespace kiln::apps::lenet
