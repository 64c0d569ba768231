// index.json and the rank files' piece tables (Note [Sharded checkpoint
// layout] in sharded_checkpoint.h): written from the rank files once they
// are all on disk, and checked whole whenever they are read, so that a bad
// checkpoint fails when it is opened, naming the file, rather than loading
// wrong values.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "distributed/checkpoint/checkpoint_files.h"
#include "tensor/atomic_file.h"
#include "tensor/safetensors_reader.h"

namespace kiln::distributed::checkpoint {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

constexpr char kFormat[] = "kiln.sharded_checkpoint";
constexpr int kVersion = 1;

// A JSON value for an error message, cut short.
std::string brief(const Json& value) {
  std::string text = value.dump();
  return text.size() <= 80 ? text : text.substr(0, 80) + "...";
}

const Json& field(const Json& object, const char* key, const std::string& where) {
  KILN_CHECK(object.is_object(), where, ": expected a JSON object, got ", brief(object));
  auto it = object.find(key);
  KILN_CHECK(it != object.end(), where, ": no field \"", key, "\" in ", brief(object));
  return *it;
}

int64_t int_field(const Json& object, const char* key, const std::string& where, int64_t min = 0) {
  const Json& value = field(object, key, where);
  KILN_CHECK(value.is_number_integer() && value.get<int64_t>() >= min, where, ": \"", key,
             "\" must be an integer of at least ", min, ", got ", brief(value));
  return value.get<int64_t>();
}

std::string string_field(const Json& object, const char* key, const std::string& where) {
  const Json& value = field(object, key, where);
  KILN_CHECK(value.is_string(), where, ": \"", key, "\" must be a string, got ", brief(value));
  return value.get<std::string>();
}

Shape shape_field(const Json& object, const char* key, const std::string& where) {
  const Json& value = field(object, key, where);
  bool ok = value.is_array();
  Shape shape;
  for (const Json& size : ok ? value : Json::array()) {
    ok = ok && size.is_number_integer() && size.get<int64_t>() >= 0;
    if (ok) shape.push_back(size.get<int64_t>());
  }
  KILN_CHECK(ok, where, ": \"", key, "\" must be a list of non-negative integers, got ", brief(value));
  return shape;
}

DType dtype_from_name(const std::string& name, const std::string& where) {
  for (int d = 0; d < kNumDTypes; ++d)
    if (dtype_name(static_cast<DType>(d)) == name) return static_cast<DType>(d);
  KILN_FAIL(where, ": unknown dtype \"", name, "\"");
}

Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(where, ": not valid JSON: ", e.what());
  }
}

std::string read_text_file(const std::string& path, const std::string& op) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, op, ": cannot open '", path, "': ", errno_text(errno));
  std::ostringstream text;
  text << in.rdbuf();
  KILN_CHECK(!in.bad(), op, ": cannot read '", path, "'");
  return text.str();
}

// Where an interrupted two-rename swap left the old checkpoint, if it did.
std::string leftover_old_checkpoint(const std::string& dir) {
  const fs::path path(dir);
  std::error_code error;
  const std::string prefix = path.filename().string() + ".old.";
  for (const auto& entry : fs::directory_iterator(path.parent_path().empty() ? "." : path.parent_path(), error)) {
    if (entry.path().filename().string().starts_with(prefix)) return entry.path().string();
  }
  return "";
}

}  // namespace

// ---- the public parts ----------------------------------------------------------

int64_t TensorInfo::numel() const { return shape_numel(global_shape, "sharded checkpoint"); }

std::string rank_file_name(int rank, int world_size) {
  return "rank-" + std::to_string(rank) + "-of-" + std::to_string(world_size) + ".safetensors";
}

std::string Index::file_path(int rank) const {
  KILN_CHECK(rank >= 0 && rank < world_size, "sharded checkpoint '", dir, "': no rank ", rank, " (world size ",
             world_size, ")");
  return (fs::path(dir) / rank_file_name(rank, world_size)).string();
}

const TensorInfo* Index::find(std::string_view name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& Index::at(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  std::string some;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) some += (i ? ", " : "") + tensors[i].name;
  if (tensors.size() > 8) some += ", ...";
  KILN_FAIL("sharded checkpoint '", dir, "' holds no tensor '", name, "' (it holds ", tensors.size(),
            " tensors: ", some, ")");
}

bool is_sharded_checkpoint(const std::string& dir) {
  std::error_code error;
  return fs::is_regular_file(fs::path(dir) / detail::kIndexFile, error);
}

// ---- piece tables ------------------------------------------------------------

namespace detail {

std::string piece_table_text(const std::string& path, const std::string& id, int rank, int world_size,
                             const std::vector<ShardPiece>& pieces, const std::vector<std::string>& keys) {
  Json table = {{"id", id}, {"rank", rank}, {"world_size", world_size}, {"pieces", Json::array()}};
  for (size_t i = 0; i < pieces.size(); ++i) {
    table["pieces"].push_back(
        {{"key", keys[i]}, {"name", pieces[i].name}, {"shape", pieces[i].global_shape}, {"offset", pieces[i].offset}});
  }
  try {
    return table.dump();
  } catch (const nlohmann::json::exception& e) {
    // The one failure of dump(): a string that is not UTF-8.
    KILN_FAIL("save_sharded: '", path, "': a piece's name is not valid UTF-8 (", e.what(), ")");
  }
}

std::vector<TablePiece> read_piece_table(const SafetensorsReader& file, const std::string& id, int rank,
                                         int world_size) {
  const std::string where = "'" + file.path() + "'";
  auto it = file.metadata().find(kPieceTableKey);
  KILN_CHECK(it != file.metadata().end(), where, ": not a sharded-checkpoint rank file (no \"", kPieceTableKey,
             "\" in its metadata)");
  const std::string table_where = where + ": metadata field \"" + kPieceTableKey + "\"";
  const Json table = parse_json(it->second, table_where);
  const std::string file_id = string_field(table, "id", table_where);
  KILN_CHECK(file_id == id, where, ": the file belongs to checkpoint ", file_id, ", not ", id,
             " (a file of another checkpoint copied in?)");
  const int64_t file_rank = int_field(table, "rank", table_where);
  const int64_t file_world = int_field(table, "world_size", table_where, 1);
  KILN_CHECK(file_rank == rank && file_world == world_size, where, ": the file says it is rank ", file_rank, " of ",
             file_world, ", expected rank ", rank, " of ", world_size);
  const Json& pieces = field(table, "pieces", table_where);
  KILN_CHECK(pieces.is_array(), table_where, ": \"pieces\" must be a list, got ", brief(pieces));

  std::vector<TablePiece> out;
  for (const Json& p : pieces) {
    TablePiece piece;
    piece.key = string_field(p, "key", table_where);
    piece.name = string_field(p, "name", table_where);
    piece.global_shape = shape_field(p, "shape", table_where);
    piece.offset = int_field(p, "offset", table_where);
    const SafetensorsReader::Entry* entry = file.find(piece.key);
    KILN_CHECK(entry != nullptr, where, ": the piece table lists '", piece.key, "' but the file holds no such tensor");
    KILN_CHECK(entry->shape.size() == 1, where, ": piece '", piece.key, "' has shape ", entry->shape,
               "; pieces are 1-d");
    piece.numel = entry->shape[0];
    piece.dtype = entry->dtype;
    const int64_t total = shape_numel(piece.global_shape, table_where);
    KILN_CHECK(piece.offset <= total && piece.numel <= total - piece.offset, where, ": piece '", piece.key,
               "' holds elements [", piece.offset, ", ", piece.offset + piece.numel, ") of '", piece.name,
               "', past the end of its ", total, " elements (shape ", piece.global_shape, ")");
    out.push_back(std::move(piece));
  }
  return out;
}

void check_tiling(const TensorInfo& tensor, int world_size, const std::string& where) {
  const int64_t numel = tensor.numel();
  int64_t covered = 0;  // elements [0, covered) lie in the pieces seen so far
  const PieceLocation* previous = nullptr;
  for (const PieceLocation& p : tensor.pieces) {
    KILN_CHECK(p.rank >= 0 && p.rank < world_size, where, ": piece '", p.key, "' of '", tensor.name, "' is on rank ",
               p.rank, ", but the world size is ", world_size);
    KILN_CHECK(p.offset >= 0 && p.numel >= 0 && p.offset <= numel && p.numel <= numel - p.offset, where, ": piece '",
               p.key, "' (rank ", p.rank, ") holds elements [", p.offset, ", ", p.offset + p.numel, ") of '",
               tensor.name, "', which has ", numel, " (shape ", tensor.global_shape, ")");
    if (p.numel == 0) continue;
    KILN_CHECK(p.offset >= covered, where, ": tensor '", tensor.name, "': pieces overlap: elements [", previous->offset,
               ", ", previous->offset + previous->numel, ") on rank ", previous->rank, " and [", p.offset, ", ",
               p.offset + p.numel, ") on rank ", p.rank);
    KILN_CHECK(p.offset == covered, where, ": tensor '", tensor.name, "' (shape ", tensor.global_shape, "): elements [",
               covered, ", ", p.offset, ") are in no piece (a gap)");
    covered = p.offset + p.numel;
    previous = &p;
  }
  KILN_CHECK(covered == numel, where, ": tensor '", tensor.name, "' (shape ", tensor.global_shape, "): elements [",
             covered, ", ", numel, ") are in no piece (a gap)");
}

namespace {

void sort_pieces(TensorInfo& tensor) {
  std::stable_sort(tensor.pieces.begin(), tensor.pieces.end(), [](const PieceLocation& a, const PieceLocation& b) {
    return std::pair(a.offset, a.numel) < std::pair(b.offset, b.numel);
  });
}

}  // namespace

// ---- building, writing and reading the index ----------------------------------

Index index_from_rank_files(const std::string& temp, const std::string& id, int world_size,
                            const std::map<std::string, std::string>& metadata, const std::string& dir,
                            const char* op) {
  const std::string where = std::string(op) + ": '" + dir + "'";
  Index index;
  index.dir = dir;
  index.id = id;
  index.world_size = world_size;
  index.metadata = metadata;
  std::map<std::string, size_t> position;  // tensor name -> its place in index.tensors
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = (fs::path(temp) / rank_file_name(rank, world_size)).string();
    try {
      SafetensorsReader file(path);
      index.file_bytes.push_back(file.file_size());
      for (TablePiece& piece : read_piece_table(file, id, rank, world_size)) {
        auto [it, added] = position.emplace(piece.name, index.tensors.size());
        if (added) index.tensors.push_back({piece.name, piece.global_shape, piece.dtype, {}});
        TensorInfo& tensor = index.tensors[it->second];
        const int first_rank = tensor.pieces.empty() ? rank : tensor.pieces.front().rank;
        KILN_CHECK(piece.global_shape == tensor.global_shape && piece.dtype == tensor.dtype, "tensor '", piece.name,
                   "' is ", piece.global_shape, " ", piece.dtype, " on rank ", rank, " but ", tensor.global_shape, " ",
                   tensor.dtype, " on rank ", first_rank);
        tensor.pieces.push_back({rank, piece.key, piece.offset, piece.numel});
      }
    } catch (const Error& e) {
      KILN_FAIL(where, ": ", e.message());
    }
  }
  for (TensorInfo& tensor : index.tensors) {
    sort_pieces(tensor);
    check_tiling(tensor, world_size, where);
  }
  return index;
}

void write_index(const std::string& temp, const Index& index) {
  Json files = Json::array();
  for (int rank = 0; rank < index.world_size; ++rank)
    files.push_back({{"name", rank_file_name(rank, index.world_size)}, {"bytes", index.file_bytes[rank]}});
  Json tensors = Json::array();
  for (const TensorInfo& t : index.tensors) {
    Json pieces = Json::array();
    for (const PieceLocation& p : t.pieces)
      pieces.push_back({{"rank", p.rank}, {"key", p.key}, {"offset", p.offset}, {"numel", p.numel}});
    tensors.push_back(
        {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.global_shape}, {"pieces", pieces}});
  }
  const Json fields = {
      {"format", kFormat},          {"version", kVersion}, {"id", index.id},    {"world_size", index.world_size},
      {"metadata", index.metadata}, {"files", files},      {"tensors", tensors}};
  // One field per line, and one line per file and per tensor, so that the
  // index reads as a table.
  const std::string path = (fs::path(temp) / kIndexFile).string();
  std::string text = "{";
  try {
    for (const auto& [key, value] : fields.items()) {
      text += (text.size() > 1 ? ",\n \"" : "\n \"") + key + "\": ";
      if (!value.is_array()) {
        text += value.dump();
        continue;
      }
      text += "[";
      for (size_t i = 0; i < value.size(); ++i) text += (i ? ",\n  " : "\n  ") + value[i].dump();
      text += value.empty() ? "]" : "\n ]";
    }
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL("save_sharded: '", path, "': a metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text += "\n}\n";
  write_file_atomically(path, text, "save_sharded");
}

}  // namespace detail

Index read_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / detail::kIndexFile).string();
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    if (!fs::exists(dir, error)) {
      const std::string old = leftover_old_checkpoint(dir);
      KILN_CHECK(old.empty(), "read_index: no checkpoint at '", dir, "', but '", old,
                 "' holds the one an interrupted save was replacing: rename it to '", dir, "'");
      KILN_FAIL("read_index: no checkpoint at '", dir, "': the directory does not exist");
    }
    KILN_FAIL("read_index: '", dir, "' is not a sharded checkpoint: it has no ", detail::kIndexFile);
  }
  const std::string where = "read_index: '" + path + "'";
  const Json json = parse_json(read_text_file(path, "read_index"), where);

  Index index;
  index.dir = dir;
  KILN_CHECK(json.is_object() && json.contains("format") && json["format"] == kFormat, where,
             ": not a sharded-checkpoint index (no \"format\": \"", kFormat, "\")");
  const int64_t version = int_field(json, "version", where);
  KILN_CHECK(version == kVersion, where, ": index version ", version, "; this Kiln reads version ", kVersion);
  index.id = string_field(json, "id", where);
  const int64_t world = int_field(json, "world_size", where, 1);
  KILN_CHECK(world <= std::numeric_limits<int>::max(), where, ": world size ", world, " is too large");
  index.world_size = static_cast<int>(world);

  const Json& metadata = field(json, "metadata", where);
  KILN_CHECK(metadata.is_object(), where, ": \"metadata\" must be an object, got ", brief(metadata));
  for (const auto& [key, value] : metadata.items()) {
    KILN_CHECK(value.is_string(), where, ": metadata '", key, "' must be a string, got ", brief(value));
    index.metadata.emplace(key, value.get<std::string>());
  }

  // The files: exactly W, named for W, each there with the size recorded.
  const Json& files = field(json, "files", where);
  KILN_CHECK(files.is_array() && files.size() == static_cast<size_t>(world), where, ": world size ", world,
             " but the index lists ", files.is_array() ? files.size() : 0, " files");
  std::set<std::string> listed;
  for (int rank = 0; rank < index.world_size; ++rank) {
    const std::string name = string_field(files[rank], "name", where);
    KILN_CHECK(name == rank_file_name(rank, index.world_size), where, ": file ", rank, " is '", name,
               "', but a checkpoint of world size ", world, " names it '", rank_file_name(rank, index.world_size), "'");
    const int64_t bytes = int_field(files[rank], "bytes", where);
    index.file_bytes.push_back(static_cast<uint64_t>(bytes));
    const std::string file = index.file_path(rank);
    struct stat info {};
    KILN_CHECK(::stat(file.c_str(), &info) == 0, "read_index: '", file,
               "', which the index lists, is missing: ", errno_text(errno));
    KILN_CHECK(static_cast<uint64_t>(info.st_size) == static_cast<uint64_t>(bytes), "read_index: '", file, "' is ",
               info.st_size, " bytes but the index records ", bytes, " (truncated or replaced?)");
    listed.insert(name);
  }
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    KILN_CHECK(!(name.starts_with("rank-") && name.ends_with(".safetensors")) || listed.contains(name), "read_index: '",
               dir, "' holds '", name, "', which its index (world size ", world,
               ") does not list: files of another checkpoint?");
  }

  const Json& tensors = field(json, "tensors", where);
  KILN_CHECK(tensors.is_array(), where, ": \"tensors\" must be a list, got ", brief(tensors));
  std::set<std::string> names;
  for (const Json& t : tensors) {
    TensorInfo info;
    info.name = string_field(t, "name", where);
    KILN_CHECK(names.insert(info.name).second, where, ": tensor '", info.name, "' is listed twice");
    info.dtype = dtype_from_name(string_field(t, "dtype", where), where + ": tensor '" + info.name + "'");
    info.global_shape = shape_field(t, "shape", where);
    const Json& pieces = field(t, "pieces", where);
    KILN_CHECK(pieces.is_array(), where, ": tensor '", info.name, "': \"pieces\" must be a list");
    for (const Json& p : pieces) {
      const int64_t rank = int_field(p, "rank", where);
      KILN_CHECK(rank < world, where, ": tensor '", info.name, "' has a piece on rank ", rank,
                 ", but the world size is ", world);
      info.pieces.push_back({static_cast<int>(rank), string_field(p, "key", where), int_field(p, "offset", where),
                             int_field(p, "numel", where)});
    }
    detail::sort_pieces(info);
    detail::check_tiling(info, index.world_size, where);
    index.tensors.push_back(std::move(info));
  }
  return index;
}

}  // namespace kiln::distributed::checkpoint
