// --log: a training log of JSON lines, one object per record (an epoch, an
// evaluation), appended and flushed as the run goes, so that an interrupted
// run leaves whole lines and `tail -f` or pandas.read_json(lines=True) read
// it while it grows.
//
//   start_jsonl("run.jsonl");                       // a run from scratch logs alone
//   append_jsonl("run.jsonl", R"({"step":250,"val_loss":1.93})");
#pragma once

#include <string>

namespace kiln::apps {

// Empties `path` (creating it): a run that starts from scratch logs alone;
// a resumed run appends to the log of the run it continues. Throws
// kiln::Error naming the file ("--log '<path>': cannot create (...)").
void start_jsonl(const std::string& path);

// Appends `json_object` (one line, no newline in it) and a newline to
// `path` (created if missing) and flushes it; throws kiln::Error naming the
// file when it cannot be written, or when `json_object` holds a newline.
void append_jsonl(const std::string& path, const std::string& json_object);

}  // namespace kiln::apps
