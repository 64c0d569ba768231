#include "apps/tools/schedule_tool.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/pipeline/schedule.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace kiln::apps::schedule_tool {

namespace pp = kiln::distributed::pipeline;

namespace {

// "1,2,1,1" -> the four costs; throws naming the text otherwise.
pp::ActionCosts parse_costs(const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    KILN_CHECK(!item.empty() && end && *end == '\0' && v > 0, "--costs: '", item,
               "' is not a positive number (expected F,B,I,W such as 1,2,1,1)");
    values.push_back(v);
  }
  KILN_CHECK(values.size() == 4, "--costs: expected 4 numbers F,B,I,W, got ", values.size(), " in '", text, "'");
  return {values[0], values[1], values[2], values[3]};
}

std::string fixed(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4f", x);
  return buffer;
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  std::string names;
  for (const std::string& n : pp::schedule_names()) names += (names.empty() ? "" : ", ") + n;
  CLI::App app{"Checks a pipeline schedule and prints it: each rank's actions, the simulated bubble against its "
               "formula, and the peak micro-batches each rank holds. Nothing is run."};
  std::string schedule_name = "1f1b", svg, costs_text = "1,2,1,1";
  int ranks = 2, micro_batches = 4, virtual_stages = 1;
  app.add_option("--schedule", schedule_name, "one of: " + names)->capture_default_str();
  app.add_option("--ranks", ranks, "pipeline ranks")->capture_default_str();
  app.add_option("--micro-batches", micro_batches, "micro-batches per step")->capture_default_str();
  app.add_option("--virtual-stages", virtual_stages, "stages per rank (interleaved only)")->capture_default_str();
  app.add_option("--svg", svg, "also write the timeline as an SVG picture to this file");
  app.add_option("--costs", costs_text, "simulated time of F,B,I,W")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? 0 : 1;
  }
  try {
    const pp::ActionCosts costs = parse_costs(costs_text);
    const pp::Schedule schedule = pp::make_schedule(schedule_name, ranks, micro_batches, virtual_stages);
    pp::validate(schedule);
    const pp::Timeline timeline = pp::simulate(schedule, costs);
    out << pp::to_table(schedule);
    out << "bubble " << fixed(timeline.bubble_fraction) << " (formula " << fixed(pp::bubble_formula(schedule))
        << "), makespan " << timeline.makespan << ", peak micro-batches in flight per rank:";
    for (int peak : timeline.peak_in_flight) out << " " << peak;
    out << "\n";
    if (!svg.empty()) {
      write_file_atomically(svg, pp::to_svg(schedule, timeline), "kiln-pipeline-schedule");
      out << "wrote " << svg << "\n";
    }
  } catch (const Error& e) {
    err << "kiln-pipeline-schedule: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    err << "kiln-pipeline-schedule: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kiln::apps::schedule_tool
