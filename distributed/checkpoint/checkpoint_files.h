// The files of a sharded checkpoint (Note [Sharded checkpoint layout] in
// sharded_checkpoint.h), shared by the save, load and reshard code:
// the rank files' piece tables, index.json, and the temporary directory a
// save writes into and then moves into place. Not part of the public API.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "distributed/checkpoint/sharded_checkpoint.h"

namespace kiln {
class SafetensorsReader;  // tensor/safetensors_reader.h
}

namespace kiln::distributed::checkpoint::detail {

inline constexpr char kIndexFile[] = "index.json";
// The "__metadata__" field of a rank file that holds its piece table.
inline constexpr char kPieceTableKey[] = "kiln.sharded_checkpoint";

// `dir` without a trailing separator; throws (naming `op`) when it names no
// directory a save could create ("", ".", "..", "/").
std::string normalize_dir(const std::string& dir, const char* op);

// 16 random hex digits.
std::string new_checkpoint_id();
// "<dir>.tmp.<id>".
std::string temp_dir_for(const std::string& dir, const std::string& id);

// What a save does before any rank writes (rank 0 only): checks that `dir`
// is absent, an empty directory or a sharded checkpoint; removes temporary
// directories that killed saves to `dir` left; creates `temp`.
void begin_save(const std::string& dir, const std::string& temp, const char* op);

// Checks one rank's pieces (Note [Sharded checkpoint layout]'s per-rank
// rules), throwing naming `op`, the checkpoint and the piece.
void check_pieces(const std::vector<ShardPiece>& pieces, const std::string& dir, const char* op);

// One line of a rank file's piece table, with what the file's header says
// of its tensor (numel, dtype).
struct TablePiece {
  std::string key;
  std::string name;
  Shape global_shape;
  int64_t offset = 0;
  int64_t numel = 0;
  DType dtype = DType::Float32;
};

// The piece table of rank `rank`'s file at `path` (`keys[i]` holds
// pieces[i]), as the text stored in its metadata.
std::string piece_table_text(const std::string& path, const std::string& id, int rank, int world_size,
                             const std::vector<ShardPiece>& pieces, const std::vector<std::string>& keys);
// Reads `file`'s piece table, checking that it carries `id`, `rank` and
// `world_size` and that every piece it lists is in the file, 1-d, and
// inside its tensor. Throws naming the file.
std::vector<TablePiece> read_piece_table(const SafetensorsReader& file, const std::string& id, int rank,
                                         int world_size);

// Writes rank `rank`'s file into `temp`, with its piece table.
void write_rank_file(const std::string& temp, const std::string& id, int rank, int world_size,
                     const std::vector<ShardPiece>& pieces);

// Reads the piece tables of the W files in `temp` (checking that each file
// is whole and carries `id`), checks the invariants, and returns the index.
Index index_from_rank_files(const std::string& temp, const std::string& id, int world_size,
                            const std::map<std::string, std::string>& metadata, const std::string& dir, const char* op);

// Writes `index` as `temp`/index.json.
void write_index(const std::string& temp, const Index& index);

// Moves `temp` to `dir` in one step, replacing what was there; flushes.
void commit_save(const std::string& temp, const std::string& dir, const char* op);

// Removes `temp` and everything in it; never throws (a save that already
// failed reports its own error).
void remove_temp(const std::string& temp) noexcept;

// A save made by one process (save_sharded without a group, reshard): the
// temporary directory is prepared at construction, each rank's file
// written by write_rank, and the whole moved into place by commit; a
// LocalSave destroyed uncommitted removes its temporary directory.
class LocalSave {
 public:
  LocalSave(const std::string& dir, int world_size, const char* op);
  LocalSave(const LocalSave&) = delete;
  LocalSave& operator=(const LocalSave&) = delete;
  ~LocalSave();
  const std::string& dir() const { return dir_; }
  // Checks and writes rank `rank`'s file.
  void write_rank(int rank, const std::vector<ShardPiece>& pieces);
  void commit(const std::map<std::string, std::string>& metadata);

 private:
  std::string dir_;
  std::string id_;
  std::string temp_;
  int world_size_;
  const char* op_;
  bool committed_ = false;
};

// Checks that `tensor`'s pieces are sorted, tile it, and name ranks below
// `world_size`; `where` starts each message.
void check_tiling(const TensorInfo& tensor, int world_size, const std::string& where);

}  // namespace kiln::distributed::checkpoint::detail
