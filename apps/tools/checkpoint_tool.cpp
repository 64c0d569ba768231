// kiln-checkpoint's subcommands (checkpoint_tool.h), over
// distributed/checkpoint/sharded_checkpoint.h and tensor/safetensors_reader.h.
#include "apps/tools/checkpoint_tool.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "distributed/checkpoint/sharded_checkpoint.h"
#include "tensor/safetensors.h"
#include "tensor/safetensors_reader.h"

namespace kiln::apps::checkpoint_tool {

namespace {

namespace ckpt = distributed::checkpoint;
namespace fs = std::filesystem;

constexpr char kPieceTableKey[] = "kiln.sharded_checkpoint";

std::string shape_text(const Shape& shape) { return kiln::detail::str(shape); }

// Long metadata values (a JSON list of parameter names) cut to a line.
std::string brief(const std::string& text) { return text.size() <= 100 ? text : text.substr(0, 100) + "..."; }

// Rows of columns, each column as wide as its widest cell.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c)
      line += row[c] + (c + 1 < row.size() ? std::string(width[c] - row[c].size() + 2, ' ') : "");
    out << line << "\n";
  }
}

void print_metadata(std::ostream& out, const std::map<std::string, std::string>& metadata) {
  if (metadata.empty() || (metadata.size() == 1 && metadata.contains(kPieceTableKey))) return;
  out << "metadata:\n";
  for (const auto& [key, value] : metadata)
    if (key != kPieceTableKey) out << "  " << key << ": " << brief(value) << "\n";
}

int64_t data_bytes(DType dtype, int64_t numel) { return numel * static_cast<int64_t>(element_size(dtype)); }

void inspect_checkpoint(const std::string& dir, bool pieces, bool verify, std::ostream& out) {
  const ckpt::Index index = ckpt::read_index(dir);
  int64_t elements = 0, bytes = 0;
  uint64_t file_bytes = 0;
  for (const auto& t : index.tensors) {
    elements += t.numel();
    bytes += data_bytes(t.dtype, t.numel());
  }
  for (uint64_t b : index.file_bytes) file_bytes += b;
  out << "sharded checkpoint " << dir << "\n"
      << "  world size " << index.world_size << ", id " << index.id << "\n"
      << "  " << index.tensors.size() << " tensors, " << elements << " elements, " << bytes << " bytes of data in "
      << index.world_size << " files (" << file_bytes << " bytes)\n";
  print_metadata(out, index.metadata);

  out << "tensors:\n";
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> rank_pieces(index.world_size), rank_elements(index.world_size);
  for (const auto& t : index.tensors) {
    rows.push_back({t.name, std::string(dtype_name(t.dtype)), shape_text(t.global_shape),
                    std::to_string(t.numel()) + " elements", std::to_string(data_bytes(t.dtype, t.numel())) + " bytes",
                    std::to_string(t.pieces.size()) + (t.pieces.size() == 1 ? " piece" : " pieces")});
    for (const auto& p : t.pieces) {
      ++rank_pieces[p.rank];
      rank_elements[p.rank] += p.numel;
      if (pieces)
        rows.push_back({"", "", "", "rank " + std::to_string(p.rank),
                        "[" + std::to_string(p.offset) + ", " + std::to_string(p.offset + p.numel) + ")", p.key});
    }
  }
  print_table(out, rows);

  out << "files:\n";
  rows.clear();
  for (int r = 0; r < index.world_size; ++r) {
    rows.push_back({ckpt::rank_file_name(r, index.world_size), std::to_string(index.file_bytes[r]) + " bytes",
                    std::to_string(rank_pieces[r]) + " pieces", std::to_string(rank_elements[r]) + " elements"});
  }
  print_table(out, rows);

  if (verify) {
    for (const auto& t : index.tensors) {  // one tensor at a time
      std::vector<ckpt::ShardPiece> whole{{t.name, t.global_shape, t.dtype, 0, Tensor::empty({t.numel()}, t.dtype)}};
      ckpt::load_pieces(index, whole);
    }
    out << "verified: every piece of every file read and its checksum checked\n";
  }
}

void inspect_file(const std::string& path, bool verify, std::ostream& out) {
  const SafetensorsReader file(path);
  out << "safetensors file " << path << " (" << file.file_size() << " bytes, " << file.entries().size()
      << " tensors)\n";
  // A rank file of a sharded checkpoint says which elements each tensor is.
  std::map<std::string, std::string> pieces;
  if (auto it = file.metadata().find(kPieceTableKey); it != file.metadata().end()) {
    try {
      const auto table = nlohmann::json::parse(it->second);
      out << "  rank " << table.at("rank") << " of " << table.at("world_size") << " of sharded checkpoint "
          << table.at("id").get<std::string>() << "\n";
      for (const auto& p : table.at("pieces")) {
        const int64_t offset = p.at("offset");
        pieces[p.at("key")] = "of '" + p.at("name").get<std::string>() + "' " + shape_text(p.at("shape").get<Shape>()) +
                              " from element " + std::to_string(offset);
      }
    } catch (const nlohmann::json::exception& e) {
      KILN_FAIL("'", path, "': its piece table (metadata '", kPieceTableKey, "') is malformed: ", e.what());
    }
  }
  print_metadata(out, file.metadata());
  out << "tensors:\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : file.entries()) {
    rows.push_back(
        {e.name, std::string(dtype_name(e.dtype)), shape_text(e.shape), std::to_string(e.nbytes) + " bytes"});
    if (auto it = pieces.find(e.name); it != pieces.end()) rows.back().push_back(it->second);
  }
  print_table(out, rows);
  if (verify) {
    for (const auto& e : file.entries()) file.read(e.name);
    out << "verified: every tensor read and its checksum checked\n";
  }
}

void consolidate(const std::string& dir, const std::string& out_path, std::ostream& out) {
  std::map<std::string, std::string> metadata;
  const TensorDict tensors = ckpt::consolidate(dir, &metadata);
  save_safetensors(out_path, tensors, metadata);
  out << "wrote " << tensors.size() << " tensors of " << dir << " to " << out_path << " (" << fs::file_size(out_path)
      << " bytes)\n";
}

void reshard(const std::string& dir, const std::string& out_dir, int world_size, std::ostream& out) {
  ckpt::reshard(dir, out_dir, world_size);
  const ckpt::Index index = ckpt::read_index(out_dir);
  out << "wrote " << out_dir << ": " << index.tensors.size() << " tensors as " << index.world_size
      << " ranks would have saved them\n";
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "Inspects, consolidates and reshards Kiln checkpoints: sharded ones (a directory of "
      "rank-<r>-of-<W>.safetensors files and index.json) and single safetensors files."};
  app.require_subcommand(1);
  std::string path, target;
  bool pieces = false, verify = false;
  int world_size = 0;

  CLI::App* inspect = app.add_subcommand("inspect", "Lists the tensors, shapes, dtypes, pieces, metadata and bytes");
  inspect->add_option("PATH", path, "a sharded checkpoint's directory or a safetensors file")->required();
  inspect->add_flag("--pieces", pieces, "list every piece of every tensor");
  inspect->add_flag("--verify", verify, "read every byte and check every checksum");

  CLI::App* consolidate_cmd = app.add_subcommand("consolidate", "Writes every tensor whole into one safetensors file");
  consolidate_cmd->add_option("DIR", path, "the sharded checkpoint")->required();
  consolidate_cmd->add_option("OUT", target, "the safetensors file to write")->required();

  CLI::App* reshard_cmd = app.add_subcommand("reshard", "Writes the checkpoint again as M ranks would have saved it");
  reshard_cmd->add_option("DIR", path, "the sharded checkpoint")->required();
  reshard_cmd->add_option("OUT_DIR", target, "where to write it (may be DIR)")->required();
  reshard_cmd->add_option("--world-size", world_size, "M, the number of rank files to write")
      ->required()
      ->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? 0 : 1;
  }
  try {
    if (inspect->parsed()) {
      KILN_CHECK(fs::exists(path), "inspect: '", path, "' does not exist");
      if (fs::is_directory(path)) {
        inspect_checkpoint(path, pieces, verify, out);
      } else {
        inspect_file(path, verify, out);
      }
    } else if (consolidate_cmd->parsed()) {
      consolidate(path, target, out);
    } else if (reshard_cmd->parsed()) {
      reshard(path, target, world_size, out);
    }
  } catch (const Error& e) {
    err << "kiln-checkpoint: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    err << "kiln-checkpoint: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kiln::apps::checkpoint_tool
