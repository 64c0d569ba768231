#!/usr/bin/env bash
# Finds CIFAR-10 for `make train`, downloading it when it is nowhere, and
# prints on stdout the one path that the trainer's --data takes. Messages go
# to stderr.
#
# Usage: scripts/get-cifar10.sh
#
# Where it looks, first found wins:
#   1. $KILN_DATA, when set: a folder holding one of the candidates below, or
#      a candidate itself (any file is taken as given). A KILN_DATA that does
#      not exist is an error, so that a typo does not start a download.
#   2. the repository's data/ folder ($KILN_REPO_DATA_DIR overrides it).
# The candidates in a folder, in this order (extracted before archived,
# the official binary release before the JPEG re-encoding):
#   cifar-10-batches-bin/   data_batch_1.bin .. data_batch_5.bin, test_batch.bin
#   cifar-10-binary.tar.gz  the official binary release
#   cifar10-jpeg/           train/<class>/*.jpg and test/<class>/*.jpg
#   cifar10-jpeg.tar.gz     that tree as an archive
# A folder that is itself cifar-10-batches-bin/ or a cifar10-jpeg/ tree is
# taken too. The path printed is the candidate found.
#
# When none holds CIFAR-10, it downloads the official release
#   $KILN_CIFAR10_URL (https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz)
# with curl into data/cifar-10-binary.tar.gz.part, checks its md5 against
#   $KILN_CIFAR10_MD5 (c32a1d4ab5d03f1284b67883e8d87530, torchvision's)
# and renames it to data/cifar-10-binary.tar.gz only when they match.
# Exit status: 0 with the path printed; 1 when CIFAR-10 is nowhere and cannot
# be downloaded (the message says where to put which files), when the
# checksum does not match, or when KILN_DATA does not exist.
set -euo pipefail

readonly official_url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
readonly official_md5="c32a1d4ab5d03f1284b67883e8d87530"
url=${KILN_CIFAR10_URL:-$official_url}
md5=${KILN_CIFAR10_MD5:-$official_md5}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data_dir=${KILN_REPO_DATA_DIR:-$repo/data}

say() { echo "get-cifar10: $*" >&2; }

# True when $1 is a cifar-10-batches-bin folder with all six batch files.
is_batches_bin() {
  local f
  for f in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
    [[ -s $1/$f ]] || return 1
  done
}

# True when $1 is an image-folder tree with train/ and test/.
is_jpeg_tree() { [[ -d $1/train && -d $1/test ]]; }

# Prints the CIFAR-10 that $1 is or holds, if any; false otherwise.
find_in() {
  local place=$1
  if [[ -f $place ]]; then
    echo "$place"
  elif [[ -d $place ]]; then
    if is_batches_bin "$place" || is_jpeg_tree "$place"; then
      echo "$place"
    elif is_batches_bin "$place/cifar-10-batches-bin"; then
      echo "$place/cifar-10-batches-bin"
    elif [[ -s $place/cifar-10-binary.tar.gz ]]; then
      echo "$place/cifar-10-binary.tar.gz"
    elif is_jpeg_tree "$place/cifar10-jpeg"; then
      echo "$place/cifar10-jpeg"
    elif [[ -s $place/cifar10-jpeg.tar.gz ]]; then
      echo "$place/cifar10-jpeg.tar.gz"
    else
      return 1
    fi
  else
    return 1
  fi
}

where_to_put() {
  cat >&2 <<MESSAGE
get-cifar10: put CIFAR-10 in place by hand, then run this again. Any one of:
  - the official binary release (https://www.cs.toronto.edu/~kriz/cifar.html, md5 $official_md5) as
      $data_dir/cifar-10-binary.tar.gz
  - that archive extracted, as the folder
      $data_dir/cifar-10-batches-bin/  holding data_batch_1.bin .. data_batch_5.bin and test_batch.bin
  - CIFAR-10 as JPEG image folders, as
      $data_dir/cifar10-jpeg.tar.gz  or  $data_dir/cifar10-jpeg/{train,test}/<class>/<image>.jpg
  - or set KILN_DATA to a folder holding any of these, or to one of them itself.
MESSAGE
}

if [[ -n ${KILN_DATA:-} ]]; then
  if [[ ! -e $KILN_DATA ]]; then
    say "KILN_DATA is '$KILN_DATA', which does not exist"
    exit 1
  fi
  if find_in "$KILN_DATA"; then exit 0; fi
  say "KILN_DATA ('$KILN_DATA') holds no CIFAR-10; looking in $data_dir"
fi
if find_in "$data_dir"; then exit 0; fi

target=$data_dir/cifar-10-binary.tar.gz
part=$target.part
if ! command -v curl >/dev/null; then
  say "CIFAR-10 is not in $data_dir and curl, which would download it, is not installed"
  where_to_put
  exit 1
fi
if ! mkdir -p "$data_dir"; then
  say "cannot create $data_dir to download CIFAR-10 into"
  where_to_put
  exit 1
fi
say "CIFAR-10 is not in $data_dir; downloading $url"
progress=(--silent --show-error)
if [[ -t 2 ]]; then progress=(--progress-bar); fi
rm -f "$part"
status=0
curl --fail --location --connect-timeout 30 "${progress[@]}" --output "$part" "$url" || status=$?
if ((status != 0)); then
  rm -f "$part"
  say "cannot download $url (curl exit status $status; no network?)"
  where_to_put
  exit 1
fi
actual=$(md5sum "$part" | cut -d' ' -f1)
if [[ ${actual,,} != "${md5,,}" ]]; then
  rm -f "$part"
  say "checksum mismatch for $url: expected md5 $md5, got $actual; deleted the download $part"
  exit 1
fi
mv -f "$part" "$target"
say "downloaded and verified $target (md5 $actual)"
echo "$target"
