// Sharded checkpoints: named tensors saved in pieces by the ranks that hold
// them, and read back by any number of ranks, or by one process, whatever
// the number that wrote them. This layer knows nothing of FSDP: a
// checkpoint is a set of named tensors, each with a global shape and dtype,
// and each rank contributes pieces of them. distributed/fsdp/state_dict.h
// saves a sharded model and its optimizer with it.
//
//   // every rank: the elements [offset, offset + n) of "w" flattened row-major
//   save_sharded("ckpt/step-100", {{"w", {1024, 512}, DType::Float32, offset, my_slice}}, *group);
//   // later, on any number of ranks: any range of it
//   std::vector<ShardPiece> want{{"w", {1024, 512}, DType::Float32, 0, Tensor::empty({4096})}};
//   load_pieces("ckpt/step-100", want);
//
// Note [Sharded checkpoint layout]
// A checkpoint is a directory:
//   DIR/rank-<r>-of-<W>.safetensors   one file per rank of the saving group,
//                                     W of them, even for a rank with no piece
//   DIR/index.json                    written last, by rank 0
// A piece is a 1-d run of a tensor's elements in row-major order,
// [offset, offset + n). Rank r's file holds its pieces as safetensors
// tensors of shape (n) keyed "<name>@<offset>", each with the file's CRC-32
// (Note [safetensors layout]), and a piece table in its "__metadata__"
// under "kiln.sharded_checkpoint": the checkpoint's id, r, W and, for every
// key, the tensor name, global shape and offset. The index gathers the
// tables: the id, W, every file's size in bytes, the caller's metadata
// (strings), and per tensor its global shape, dtype and pieces (rank, key,
// offset, numel) sorted by offset. Tensors are listed in the order rank 0
// names them, then the tensors only rank 1 names, and so on, so a rank 0
// that declares every tensor (a piece of 0 elements declares one) fixes
// the order consolidate() returns them in.
//
// Invariants, checked when the index is written and again whenever it is
// read: the pieces of a tensor tile [0, numel) exactly, no gap and no
// overlap (pieces of 0 elements aside); they agree on its global shape and
// dtype; every piece lies in the file the index says; every file carries the
// index's id, so a file from another checkpoint copied in is refused. Readers
// trust nothing: a truncated file, a flipped bit (the CRC-32), a file whose
// size differs from the index's, or an index that breaks an invariant is an
// error naming the file and the tensor.
//
// Atomicity. A save writes into a sibling directory "<DIR>.tmp.<id>" (the
// id: 16 random hex digits that rank 0 draws and broadcasts) and, once every
// rank's file and the index are there and flushed, moves it to DIR in one
// step: rename when DIR does not exist, and otherwise Linux's
// renameat2(RENAME_EXCHANGE), which swaps the two directories atomically;
// the old checkpoint, now at the temporary name, is then removed. So DIR
// always holds a whole checkpoint, the new one or the old one. A rank that
// fails (a bad piece, a full disk) is reported to every rank, the temporary
// directory is removed and DIR is left as it was; every rank throws the
// same error, naming the failing ranks and their messages. A process killed
// during a save leaves "<DIR>.tmp.<id>" behind; the next save to DIR removes
// it. On a filesystem without RENAME_EXCHANGE the swap is two renames
// (DIR to "<DIR>.old.<id>", then the new one to DIR), and a crash between
// them leaves the old checkpoint at "<DIR>.old.<id>", which read_index's
// error then points to. Every rank must see the same filesystem (rank 0
// reads the others' files to build the index, and that also checks that
// they are complete), and DIR, if it exists, must be a checkpoint or an
// empty directory: a save never replaces anything else.
//
// Reading needs no collectives and no particular world size: read_index()
// reads index.json; load_pieces() opens only the files holding pieces that
// overlap what was asked and reads only those pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/process_group.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::distributed::checkpoint {

// Elements [offset, offset + data.numel()) of the tensor `name`, of shape
// `global_shape`, flattened in row-major order.
struct ShardPiece {
  std::string name;
  Shape global_shape;
  // Saving: the dtype stored, which `data` must have. Loading: set to the
  // dtype the checkpoint holds.
  DType dtype = DType::Float32;
  int64_t offset = 0;
  // 1-d. Saving: the elements (any device). Loading: where they go, of any
  // dtype and device (values are converted as Tensor::copy_ converts).
  Tensor data;
};

// A piece as the index records it.
struct PieceLocation {
  int rank = 0;     // the rank whose file holds it
  std::string key;  // its name inside that file ("<name>@<offset>")
  int64_t offset = 0;
  int64_t numel = 0;
};

struct TensorInfo {
  std::string name;
  Shape global_shape;
  DType dtype = DType::Float32;
  std::vector<PieceLocation> pieces;  // sorted by offset; they tile [0, numel())
  int64_t numel() const;
};

// What index.json says (Note [Sharded checkpoint layout]).
struct Index {
  std::string dir;  // the checkpoint's directory, as given to read_index
  std::string id;
  int world_size = 0;
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;   // rank 0's order first
  std::vector<uint64_t> file_bytes;  // per rank

  // "<dir>/rank-<r>-of-<W>.safetensors".
  std::string file_path(int rank) const;
  // The tensor called `name`, or null.
  const TensorInfo* find(std::string_view name) const;
  // The same; throws naming the checkpoint and some of the names it holds.
  const TensorInfo& at(std::string_view name) const;
};

// "rank-<rank>-of-<world_size>.safetensors".
std::string rank_file_name(int rank, int world_size);

// Collective over `group`: every rank saves its `pieces` (and may pass
// none) into DIR = `dir` as Note [Sharded checkpoint layout] describes, and
// returns once the whole checkpoint is in place. Every rank passes the same
// `dir` and `metadata` (rank 0's metadata is the one kept). Requires, per
// rank: names not empty, `data` 1-d of dtype `dtype` and inside the tensor,
// no (name, offset) twice; and over all ranks: pieces that tile each tensor
// exactly and agree on its shape and dtype; metadata keys not starting with
// "kiln.crc32." (the safetensors checksums' prefix, which would keep a
// consolidated file from being written). On any failure every rank throws
// kiln::Error naming the failing ranks and why, and DIR is left as it was.
void save_sharded(const std::string& dir, const std::vector<ShardPiece>& pieces, ProcessGroup& group,
                  const std::map<std::string, std::string>& metadata = {});
// The same in one process: a checkpoint of world size 1.
void save_sharded(const std::string& dir, const std::vector<ShardPiece>& pieces,
                  const std::map<std::string, std::string>& metadata = {});

// Whether `dir` holds an index.json (a sharded checkpoint, or what is left
// of one).
bool is_sharded_checkpoint(const std::string& dir);

// Reads and checks DIR/index.json against the invariants of Note [Sharded
// checkpoint layout], and that each file it lists exists with the size it
// records; opens no rank file. Throws naming the file and what is wrong.
Index read_index(const std::string& dir);

// Fills every wanted piece: for each, `name`, `offset`, `global_shape` (what
// the caller expects; a different shape in the checkpoint is an error) and
// a 1-d `data` of the number of elements wanted; sets `dtype` to the stored
// one. Reads only the pieces of only the files that overlap the wanted
// ranges, each once. No collectives: any number of ranks may call it, each
// for what it needs. Throws naming the checkpoint, the tensor and the file
// on a tensor it lacks, a shape that differs, a range past the tensor's
// end, or a file that is missing, truncated, corrupt or from another
// checkpoint.
void load_pieces(const std::string& dir, std::vector<ShardPiece>& wanted);
// The same with an index read_index already returned.
void load_pieces(const Index& index, std::vector<ShardPiece>& wanted);

// Every tensor whole, with its global shape and stored dtype, in the
// index's order; the index's metadata into *metadata when given.
TensorDict consolidate(const std::string& dir, std::map<std::string, std::string>* metadata = nullptr);

// Which elements each of `world_size` ranks holds of `tensor`: ranges[r]
// for rank r (numel 0 for none). They must tile the tensor.
struct Range {
  int64_t offset = 0;
  int64_t numel = 0;
};
using Splitter = std::function<std::vector<Range>(const TensorInfo& tensor, int world_size)>;
// Contiguous runs of numel / world_size elements, the first numel % world_size
// ranks one more.
std::vector<Range> even_split(const TensorInfo& tensor, int world_size);

// Offline, in one process: writes the checkpoint in `dir_in` again into
// `dir_out` as if `new_world_size` ranks had saved it, rank r holding
// splitter(tensor, new_world_size)[r] of each tensor; the metadata is kept.
// Bit for bit the same tensors. Reads one output rank's share at a time.
// `dir_out` may be `dir_in` (it is replaced atomically once written).
void reshard(const std::string& dir_in, const std::string& dir_out, int new_world_size,
             const Splitter& splitter = even_split);

}  // namespace kiln::distributed::checkpoint
