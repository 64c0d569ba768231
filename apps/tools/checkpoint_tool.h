// kiln-checkpoint: looks into and converts checkpoints (Note [Sharded
// checkpoint layout] in distributed/checkpoint/sharded_checkpoint.h).
//
//   kiln-checkpoint inspect DIR|FILE [--pieces] [--verify]
//       a sharded checkpoint's tensors, shapes, dtypes, world size, pieces
//       per rank, metadata and bytes; or a safetensors file's tensors and
//       metadata (and, for a rank file, its pieces). --verify reads every
//       byte and checks every checksum.
//   kiln-checkpoint consolidate DIR OUT.safetensors
//       every tensor whole, with the checkpoint's metadata, in one file.
//   kiln-checkpoint reshard DIR OUT_DIR --world-size M
//       the same checkpoint as M ranks would have written it.
//
// A library function so that tests run it in-process; main.cpp is one call.
#pragma once

#include <ostream>

namespace kiln::apps::checkpoint_tool {

// Runs the command line `argv` (argv[0] the program's name), writing to
// `out` and, for errors, `err`. Returns the exit status: 0, or 1 for bad
// arguments and for any file that cannot be read or written (the message
// names it); never throws.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace kiln::apps::checkpoint_tool
