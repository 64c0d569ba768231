// Paths that lead into a tar archive, so that a folder of a .tar.gz can be
// named wherever a folder on disk can (ImageFolder, the image-folder to
// CIFAR-10 converter, a trainer's --data).
//
// Note [Archive paths]
// A path whose leading part is a regular file names a folder inside that file,
// read as a tar archive (data/tar.h, gzip-compressed or not):
//   "data/cifar10-jpeg.tar.gz/cifar10-jpeg/train"
//     archive "data/cifar10-jpeg.tar.gz", folder "cifar10-jpeg/train"
//   "data/cifar10-jpeg.tar.gz"
//     archive "data/cifar10-jpeg.tar.gz", folder "" (the archive's top)
//   "data/cifar10-jpeg/train"   a folder on disk
// It is the path the folder would have once the archive is extracted in a
// folder named like the archive, as Java's zip file system and Python's
// zipfile.Path spell it, and the path ImageFolder gives its archived samples
// ("data/cifar10-jpeg.tar.gz/cifar10-jpeg/train/cat/0001.jpg"), so an error
// names the archive and the member at once. Member names are compared after
// dropping a leading "./" (what `tar czf x.tar.gz -C dir .` writes). Tar
// folders exist only through the files under them: a folder member with no
// file below it is not listed.
#pragma once

#include <string>
#include <string_view>

#include "data/tar.h"

namespace kiln::data {

struct ArchivePath {
  std::string archive;  // the archive file, or empty when the path lies on disk
  std::string folder;   // inside the archive, '/'-separated, no leading or trailing '/'
};

// Splits `path` at its first leading part that is a regular file (Note
// [Archive paths]). A folder on disk, or a path of which no part exists,
// comes back unchanged as {"", path}; the caller reports a missing path.
ArchivePath split_archive_path(const std::string& path);

// A member or folder name as compared inside an archive: without a leading
// "./" or '/' and without trailing '/'.
std::string normalize_member_path(std::string_view name);

// True when some regular file of `tar` lies under `folder` (any depth);
// "" (the archive's top) holds every member.
bool archive_has_folder(const TarArchive& tar, const std::string& folder);

}  // namespace kiln::data
