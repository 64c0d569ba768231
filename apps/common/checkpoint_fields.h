// What a training app stores beside the tensors of its checkpoint (the
// extra strings of optim::save_training_checkpoint) and how it reads them
// back: every field checked for its kind and range, and the recipe compared
// with the resuming run's, so that a checkpoint that does not fit is refused
// naming the file, the field and both values, before anything is trained.
//
//   std::map<std::string, std::string> extra = {{"recipe", recipe(o)}, {"lr", exact_text(o.lr)}};
//   ...
//   CheckpointFields f(loaded.extra, o.resume, "kiln-gpt");
//   f.check_recipe(recipe(o));
//   int64_t step = f.integer("step", 0, o.steps);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "tensor/error.h"

namespace kiln::apps {

// The shortest text that reads back as exactly `v` ("0.05", not
// "0.050000000000000003"): checkpoints round-trip and recipes stay readable.
std::string exact_text(double v);

class CheckpointFields {
 public:
  // `extra`: the checkpoint's extra strings (must outlive this object);
  // `path`: the file, which errors name as "<flag> '<path>'"; `program`:
  // the app that writes such checkpoints ("kiln-lenet").
  CheckpointFields(const std::map<std::string, std::string>& extra, std::string path, std::string program,
                   std::string flag = "--resume")
      : extra_(extra), path_(std::move(path)), program_(std::move(program)), flag_(std::move(flag)) {}

  // The field's text; a missing field is "not a <program> checkpoint of this version".
  const std::string& text(const std::string& key) const;
  // An integer in [lo, hi], written in full.
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
  // A finite number >= 0.
  double number(const std::string& key) const;
  // parse(text(key)), whose kiln::Error becomes "checkpoint field '<key>' is malformed: ...".
  template <class Parse>
  std::invoke_result_t<Parse, const std::string&> parsed(const std::string& key, Parse&& parse) const {
    const std::string& s = text(key);
    try {
      return std::forward<Parse>(parse)(s);
    } catch (const Error& e) {
      KILN_FAIL(flag_, " '", path_, "': checkpoint field '", key, "' is malformed: ", e.message());
    }
  }
  // The "recipe" field must equal `recipe` (the settings that shape the
  // trajectory); otherwise throws naming both.
  void check_recipe(const std::string& recipe) const;

 private:
  const std::map<std::string, std::string>& extra_;
  std::string path_;
  std::string program_;
  std::string flag_;
};

}  // namespace kiln::apps
