// kiln-checkpoint: inspect, consolidate and reshard checkpoints (checkpoint_tool.h).
#include <iostream>

#include "apps/tools/checkpoint_tool.h"

int main(int argc, char** argv) { return kiln::apps::checkpoint_tool::run(argc, argv, std::cout, std::cerr); }
