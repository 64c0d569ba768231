// Paths into tar archives (Note [Archive paths] in archive_path.h).
#include "data/archive_path.h"

#include <filesystem>
#include <system_error>

namespace kiln::data {

namespace fs = std::filesystem;

ArchivePath split_archive_path(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return {"", path};
  fs::path leading;
  std::string folder;
  bool in_archive = false;
  std::string archive;
  for (const fs::path& part : fs::path(path)) {
    if (in_archive) {
      const std::string name = part.string();
      if (name.empty() || name == ".") continue;  // "a.tar.gz/" or "a.tar.gz/./x"
      folder += (folder.empty() ? "" : "/") + name;
      continue;
    }
    leading /= part;
    if (fs::is_regular_file(leading, error)) {
      in_archive = true;
      archive = leading.string();
    }
  }
  if (!in_archive) return {"", path};
  return {archive, normalize_member_path(folder)};
}

std::string normalize_member_path(std::string_view name) {
  while (name.starts_with("./") || name.starts_with("/")) name.remove_prefix(name.starts_with("./") ? 2 : 1);
  if (name == ".") name = {};
  while (name.ends_with('/')) name.remove_suffix(1);
  return std::string(name);
}

bool archive_has_folder(const TarArchive& tar, const std::string& folder) {
  const std::string prefix = normalize_member_path(folder);
  if (prefix.empty()) return !tar.entries().empty();
  for (const TarEntry& entry : tar.entries()) {
    const std::string name = normalize_member_path(entry.name);
    if (name.size() > prefix.size() && name.starts_with(prefix) && name[prefix.size()] == '/') return true;
  }
  return false;
}

}  // namespace kiln::data
