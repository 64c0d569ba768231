// kiln-pipeline-schedule: prints a pipeline schedule before anything runs
// (Note [Pipeline schedules as data] in distributed/pipeline/schedule.h).
//
//   kiln-pipeline-schedule --schedule 1f1b --ranks 4 --micro-batches 8
//       checks the schedule and prints each rank's actions as a table, then
//       the simulated bubble beside its formula and each rank's peak
//       micro-batches in flight;
//   ... --virtual-stages 2          (with --schedule interleaved)
//   ... --svg timeline.svg          also writes the timeline picture (atomically)
//   ... --costs F,B,I,W             the simulated time of each action (default 1,2,1,1)
//
// A library function so that tests run it in-process; main.cpp is one call.
#pragma once

#include <ostream>

namespace kiln::apps::schedule_tool {

// Runs the command line `argv` (argv[0] the program's name), writing to
// `out` and, for errors, `err`. Returns 0, or 1 for bad arguments, a
// schedule the validator rejects, or an SVG file that cannot be written
// (the message says which); never throws.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace kiln::apps::schedule_tool
