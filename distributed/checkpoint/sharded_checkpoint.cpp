// Saving a sharded checkpoint (Note [Sharded checkpoint layout] in
// sharded_checkpoint.h): collectively from every rank of a group, or from
// one process.
//
// The collective save is four steps, each ending in an all-gather of every
// rank's error message (empty for none), so that all ranks agree whether to
// go on and a failure on one rank is an error on all of them, never a rank
// left waiting in a collective its peers abandoned:
//   1. every rank checks its pieces; rank 0 also prepares the temporary
//      directory;
//   2. rank 0 broadcasts the checkpoint's id (which names the directory);
//   3. every rank writes its file;
//   4. rank 0 builds the index from the files and moves the directory into
//      place.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "distributed/checkpoint/checkpoint_files.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"

namespace kiln::distributed::checkpoint {

namespace fs = std::filesystem;

namespace detail {

namespace {

// The safetensors checksums' metadata prefix (Note [safetensors layout]).
constexpr char kReservedPrefix[] = "kiln.crc32.";

void check_metadata(const std::map<std::string, std::string>& metadata, const std::string& dir, const char* op) {
  for (const auto& [key, value] : metadata) {
    KILN_CHECK(!key.starts_with(kReservedPrefix), op, ": '", dir, "': metadata key '", key, "' uses the prefix \"",
               kReservedPrefix, "\", which safetensors files reserve for checksums");
  }
}

std::string piece_key(const ShardPiece& piece) { return piece.name + "@" + std::to_string(piece.offset); }

}  // namespace

void check_pieces(const std::vector<ShardPiece>& pieces, const std::string& dir, const char* op) {
  std::set<std::string> keys;
  for (const ShardPiece& p : pieces) {
    const std::string where =
        std::string(op) + ": '" + dir + "': piece '" + p.name + "' at offset " + std::to_string(p.offset);
    KILN_CHECK(!p.name.empty(), op, ": '", dir, "': a piece has an empty name");
    KILN_CHECK(p.data.defined(), where, ": its data is undefined");
    KILN_CHECK(p.data.dim() == 1, where, ": its data must be 1-d, got shape ", p.data.shape());
    KILN_CHECK(p.data.dtype() == p.dtype, where, ": its data is ", p.data.dtype(), " but the piece says ", p.dtype);
    for (int64_t size : p.global_shape)
      KILN_CHECK(size >= 0, where, ": global shape ", p.global_shape, " has a negative size");
    const int64_t numel = shape_numel(p.global_shape, op);
    const int64_t n = p.data.numel();
    KILN_CHECK(p.offset >= 0 && p.offset <= numel && n <= numel - p.offset, where, ": elements [", p.offset, ", ",
               p.offset + n, ") lie outside a tensor of shape ", p.global_shape, " (", numel, " elements)");
    KILN_CHECK(keys.insert(piece_key(p)).second, where, ": this rank gives that piece twice");
  }
}

void write_rank_file(const std::string& temp, const std::string& id, int rank, int world_size,
                     const std::vector<ShardPiece>& pieces) {
  TensorDict tensors;
  std::vector<std::string> keys;
  for (const ShardPiece& p : pieces) {
    keys.push_back(piece_key(p));
    tensors.insert(keys.back(), p.data);
  }
  const std::string path = (fs::path(temp) / rank_file_name(rank, world_size)).string();
  save_safetensors(path, tensors, {{kPieceTableKey, piece_table_text(path, id, rank, world_size, pieces, keys)}});
}

LocalSave::LocalSave(const std::string& dir, int world_size, const char* op)
    : dir_(normalize_dir(dir, op)),
      id_(new_checkpoint_id()),
      temp_(temp_dir_for(dir_, id_)),
      world_size_(world_size),
      op_(op) {
  KILN_CHECK(world_size >= 1, op, ": '", dir_, "': the world size must be at least 1, got ", world_size);
  begin_save(dir_, temp_, op_);
}

LocalSave::~LocalSave() {
  if (!committed_) remove_temp(temp_);
}

void LocalSave::write_rank(int rank, const std::vector<ShardPiece>& pieces) {
  check_pieces(pieces, dir_, op_);
  write_rank_file(temp_, id_, rank, world_size_, pieces);
}

void LocalSave::commit(const std::map<std::string, std::string>& metadata) {
  check_metadata(metadata, dir_, op_);
  write_index(temp_, index_from_rank_files(temp_, id_, world_size_, metadata, dir_, op_));
  commit_save(temp_, dir_, op_);
  committed_ = true;
}

}  // namespace detail

namespace {

// Every rank's error message (empty where there was none), on every rank.
std::vector<std::string> gather_errors(ProcessGroup& group, const std::string& mine) {
  constexpr int64_t kBytes = 2048;
  std::string text = mine.size() < kBytes ? mine : mine.substr(0, kBytes - 4) + "...";
  Tensor local = zeros({kBytes}, DType::UInt8);
  std::copy(text.begin(), text.end(), local.data<uint8_t>());
  const Device device = group.collective_device();
  Tensor all = Tensor::empty({group.size() * kBytes}, {DType::UInt8, device});
  group.all_gather_into_tensor(all, local.to(device))->wait();
  all = all.cpu();
  std::vector<std::string> errors;
  for (int r = 0; r < group.size(); ++r) {
    const char* begin = reinterpret_cast<const char*>(all.data<uint8_t>() + r * kBytes);
    errors.emplace_back(begin, strnlen(begin, kBytes));
  }
  return errors;
}

// Ends the save on every rank if any rank failed: `cleanup` runs first.
void agree(ProcessGroup& group, const std::string& mine, const std::string& dir,
           const std::function<void()>& cleanup = {}) {
  const std::vector<std::string> errors = gather_errors(group, mine);
  std::string report;
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) report += "\n  rank " + std::to_string(r) + ": " + errors[r];
  if (report.empty()) return;
  if (cleanup) cleanup();
  KILN_FAIL("save_sharded: the save to '", dir, "' failed and left it as it was:", report);
}

std::string failure_text(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  std::string text = error ? error->message() : e.what();
  return text.empty() ? "unknown error" : text;
}

}  // namespace

void save_sharded(const std::string& dir_in, const std::vector<ShardPiece>& pieces, ProcessGroup& group,
                  const std::map<std::string, std::string>& metadata) {
  const char* op = "save_sharded";
  const std::string dir = detail::normalize_dir(dir_in, op);
  const bool root = group.rank() == 0;
  std::string id, temp, error;
  bool created = false;
  auto remove_created = [&] {
    if (created) detail::remove_temp(temp);
  };

  try {  // 1. check; rank 0 prepares the directory
    detail::check_metadata(metadata, dir, op);
    detail::check_pieces(pieces, dir, op);
    if (root) {
      id = detail::new_checkpoint_id();
      temp = detail::temp_dir_for(dir, id);
      detail::begin_save(dir, temp, op);
      created = true;
    }
  } catch (const std::exception& e) {
    error = failure_text(e);
  }
  agree(group, error, dir, remove_created);

  // 2. the id, as 64 bits
  Tensor id_bits = Tensor::empty({1}, DType::Int64);
  if (root) id_bits.data<int64_t>()[0] = static_cast<int64_t>(std::stoull(id, nullptr, 16));
  Tensor on_device = id_bits.to(group.collective_device());
  group.broadcast(on_device, 0)->wait();
  if (!root) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(on_device.cpu().data<int64_t>()[0]));
    id = text;
    temp = detail::temp_dir_for(dir, id);
  }

  try {  // 3. every rank's file
    detail::write_rank_file(temp, id, group.rank(), group.size(), pieces);
  } catch (const std::exception& e) {
    error = failure_text(e);
  }
  agree(group, error, dir, remove_created);

  if (root) {  // 4. the index, and the move into place
    try {
      const Index index = detail::index_from_rank_files(temp, id, group.size(), metadata, dir, op);
      detail::write_index(temp, index);
      detail::commit_save(temp, dir, op);
    } catch (const std::exception& e) {
      error = failure_text(e);
      remove_created();
    }
  }
  agree(group, error, dir);
}

void save_sharded(const std::string& dir, const std::vector<ShardPiece>& pieces,
                  const std::map<std::string, std::string>& metadata) {
  detail::LocalSave save(dir, 1, "save_sharded");
  save.write_rank(0, pieces);
  save.commit(metadata);
}

}  // namespace kiln::distributed::checkpoint
