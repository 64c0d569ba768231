// Reading a sharded checkpoint (Note [Sharded checkpoint layout] in
// sharded_checkpoint.h): any range of any tensor, by any number of readers,
// and the two offline operations built on it, consolidate and reshard.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "autograd/grad_mode.h"
#include "distributed/checkpoint/checkpoint_files.h"
#include "tensor/safetensors_reader.h"

namespace kiln::distributed::checkpoint {

namespace {

// One stored piece that overlaps wanted ranges, and the copies out of it.
struct PieceRead {
  const TensorInfo* tensor = nullptr;
  const PieceLocation* piece = nullptr;
  struct Copy {
    size_t wanted;  // which wanted piece
    int64_t from;   // first element in the stored piece
    int64_t to;     // first element in the wanted piece
    int64_t numel;
  };
  std::vector<Copy> copies;
};

// An opened rank file and its piece table, by key.
struct OpenFile {
  std::unique_ptr<SafetensorsReader> reader;
  std::map<std::string, detail::TablePiece> table;
};

OpenFile open_rank_file(const Index& index, int rank) {
  const std::string path = index.file_path(rank);
  OpenFile file;
  file.reader = std::make_unique<SafetensorsReader>(path);
  KILN_CHECK(file.reader->file_size() == index.file_bytes[rank], "'", path, "' is ", file.reader->file_size(),
             " bytes but the index records ", index.file_bytes[rank], " (truncated or replaced?)");
  for (detail::TablePiece& piece : detail::read_piece_table(*file.reader, index.id, rank, index.world_size))
    file.table.emplace(piece.key, std::move(piece));
  return file;
}

// Reads the stored piece `read` describes, after checking that its file
// says of it what the index says.
Tensor read_piece(const OpenFile& file, const PieceRead& read) {
  const TensorInfo& t = *read.tensor;
  const PieceLocation& p = *read.piece;
  auto it = file.table.find(p.key);
  KILN_CHECK(it != file.table.end(), "'", file.reader->path(), "' holds no piece '", p.key,
             "', which the index places there for tensor '", t.name, "'");
  const detail::TablePiece& stored = it->second;
  KILN_CHECK(stored.name == t.name && stored.offset == p.offset && stored.numel == p.numel &&
                 stored.global_shape == t.global_shape && stored.dtype == t.dtype,
             "'", file.reader->path(), "': piece '", p.key, "' is elements [", stored.offset, ", ",
             stored.offset + stored.numel, ") of '", stored.name, "' ", stored.global_shape, " ", stored.dtype,
             " in the file but elements [", p.offset, ", ", p.offset + p.numel, ") of '", t.name, "' ", t.global_shape,
             " ", t.dtype, " in the index");
  return file.reader->read(p.key);
}

}  // namespace

void load_pieces(const std::string& dir, std::vector<ShardPiece>& wanted) { load_pieces(read_index(dir), wanted); }

void load_pieces(const Index& index, std::vector<ShardPiece>& wanted) {
  const std::string where = "load_pieces: '" + index.dir + "'";

  // Which stored pieces overlap what is wanted, keyed (rank, key) so that
  // each file is opened once and each piece read once.
  std::map<std::pair<int, std::string>, PieceRead> reads;
  for (size_t i = 0; i < wanted.size(); ++i) {
    ShardPiece& w = wanted[i];
    const TensorInfo* t = index.find(w.name);
    if (t == nullptr) {
      std::string missing;
      try {
        index.at(w.name);
      } catch (const Error& e) {
        missing = e.message();
      }
      KILN_FAIL("load_pieces: ", missing);
    }
    KILN_CHECK(w.global_shape == t->global_shape, where, ": tensor '", w.name, "' has shape ", t->global_shape,
               " in the checkpoint, but the caller expects ", w.global_shape);
    KILN_CHECK(w.data.defined() && w.data.dim() == 1, where, ": the data wanted for '", w.name,
               "' must be a 1-d tensor, got ", w.data.defined() ? "shape " : "an undefined tensor",
               w.data.defined() ? w.data.shape() : Shape{});
    const int64_t n = w.data.numel(), numel = t->numel();
    KILN_CHECK(w.offset >= 0 && w.offset <= numel && n <= numel - w.offset, where, ": elements [", w.offset, ", ",
               w.offset + n, ") wanted of tensor '", w.name, "', which has ", numel, " (shape ", t->global_shape, ")");
    w.dtype = t->dtype;
    int64_t covered = w.offset;  // the pieces are sorted and tile the tensor (read_index checked)
    for (const PieceLocation& p : t->pieces) {
      const int64_t begin = std::max(p.offset, w.offset), end = std::min(p.offset + p.numel, w.offset + n);
      if (begin >= end) continue;
      PieceRead& read = reads[{p.rank, p.key}];
      read.tensor = t;
      read.piece = &p;
      read.copies.push_back({i, begin - p.offset, begin - w.offset, end - begin});
      covered = std::max(covered, end);
    }
    KILN_CHECK(covered == w.offset + n, where, ": tensor '", w.name, "': elements [", covered, ", ", w.offset + n,
               ") are in no piece");
  }

  NoGradGuard no_grad;  // the wanted data may be parameters
  std::map<int, OpenFile> files;
  for (const auto& [location, read] : reads) {
    const int rank = location.first;
    try {
      auto it = files.find(rank);
      if (it == files.end()) it = files.emplace(rank, open_rank_file(index, rank)).first;
      const Tensor stored = read_piece(it->second, read);
      for (const PieceRead::Copy& c : read.copies)
        wanted[c.wanted].data.narrow(0, c.to, c.numel).copy_(stored.narrow(0, c.from, c.numel));
    } catch (const Error& e) {
      KILN_FAIL(where, ": tensor '", read.tensor->name, "': ", e.message());
    }
  }
}

TensorDict consolidate(const std::string& dir, std::map<std::string, std::string>* metadata) {
  const Index index = read_index(dir);
  TensorDict tensors;
  std::vector<ShardPiece> wanted;
  for (const TensorInfo& t : index.tensors) {
    Tensor full = Tensor::empty(t.global_shape, t.dtype);
    wanted.push_back({t.name, t.global_shape, t.dtype, 0, full.view({t.numel()})});
    tensors.insert(t.name, full);
  }
  load_pieces(index, wanted);
  if (metadata != nullptr) *metadata = index.metadata;
  return tensors;
}

std::vector<Range> even_split(const TensorInfo& tensor, int world_size) {
  KILN_CHECK(world_size >= 1, "even_split: the world size must be at least 1, got ", world_size);
  const int64_t numel = tensor.numel(), base = numel / world_size, extra = numel % world_size;
  std::vector<Range> ranges;
  int64_t offset = 0;
  for (int r = 0; r < world_size; ++r) {
    const int64_t n = base + (r < extra ? 1 : 0);
    ranges.push_back({offset, n});
    offset += n;
  }
  return ranges;
}

void reshard(const std::string& dir_in, const std::string& dir_out, int new_world_size, const Splitter& splitter) {
  const char* op = "reshard";
  KILN_CHECK(new_world_size >= 1, op, ": the new world size must be at least 1, got ", new_world_size);
  KILN_CHECK(static_cast<bool>(splitter), op, ": the splitter is empty");
  const Index in = read_index(dir_in);
  std::vector<std::vector<Range>> ranges;  // [tensor][rank]
  for (const TensorInfo& t : in.tensors) {
    ranges.push_back(splitter(t, new_world_size));
    KILN_CHECK(ranges.back().size() == static_cast<size_t>(new_world_size), op, ": the splitter gives ",
               ranges.back().size(), " ranges for '", t.name, "', expected one per rank (", new_world_size, ")");
    for (size_t r = 0; r < ranges.back().size(); ++r) {
      const Range& range = ranges.back()[r];
      KILN_CHECK(
          range.offset >= 0 && range.numel >= 0 && range.offset <= t.numel() && range.numel <= t.numel() - range.offset,
          op, ": the splitter gives rank ", r, " elements [", range.offset, ", ", range.offset + range.numel, ") of '",
          t.name, "', which has ", t.numel());
    }
  }
  detail::LocalSave save(dir_out, new_world_size, op);
  for (int rank = 0; rank < new_world_size; ++rank) {
    std::vector<ShardPiece> pieces;
    for (size_t i = 0; i < in.tensors.size(); ++i) {
      const TensorInfo& t = in.tensors[i];
      const Range& range = ranges[i][rank];
      pieces.push_back({t.name, t.global_shape, t.dtype, range.offset, Tensor::empty({range.numel}, t.dtype)});
    }
    load_pieces(in, pieces);
    save.write_rank(rank, pieces);
  }
  save.commit(in.metadata);
}

}  // namespace kiln::distributed::checkpoint
