// kiln-pipeline-schedule: check and print a pipeline schedule (schedule_tool.h).
#include <iostream>

#include "apps/tools/schedule_tool.h"

int main(int argc, char** argv) { return kiln::apps::schedule_tool::run(argc, argv, std::cout, std::cerr); }
