#!/usr/bin/env bash
# Runs a command as on a machine image without the CUDA toolkit and without
# the CUDA, cuDNN, NCCL and MPI libraries, although this one has them: inside
# a private mount namespace, the toolkit's folder is covered by an empty one
# and each of those libraries that an installed Kiln's plugins link is covered
# by an empty file, so the loader finds nothing or an unloadable file.
# Nothing outside the command sees the difference.
#
# Usage: without-gpu-libraries.sh PREFIX COMMAND [ARGS...]
#   PREFIX: the installed Kiln whose lib/libkiln_{cuda,nccl,mpi}.so.0 say what
#   to hide. Exits 77 (ctest's SKIP_RETURN_CODE) when this machine cannot make
#   a mount namespace (unshare needs root or a user namespace).
set -euo pipefail
prefix="$1"
shift

if [[ -z "${KILN_LIBRARIES_HIDDEN:-}" ]]; then
  if ! unshare --mount --propagation private true 2>/dev/null; then
    echo "without-gpu-libraries: skipped: cannot make a mount namespace here (unshare --mount failed)" >&2
    exit 77
  fi
  exec env KILN_LIBRARIES_HIDDEN=1 unshare --mount --propagation private "$0" "$prefix" "$@"
fi

# The vendor libraries the plugins link, as the loader resolves them now.
hidden=()
for plugin in "$prefix"/lib*/libkiln_cuda.so.* "$prefix"/lib*/libkiln_nccl.so.* "$prefix"/lib*/libkiln_mpi.so.*; do
  [[ -f "$plugin" ]] || continue
  while read -r name path; do
    if [[ "$name" =~ ^lib(cudart|cublas|cublasLt|cudnn|nccl|mpi|mpi_cxx|open-pal|open-rte)[._] && -f "$path" ]]; then
      hidden+=("$(realpath "$path")")
    fi
  done < <(ldd "$plugin" | awk '$2 == "=>" && $3 != "not" { print $1, $3 }')
done
for library in $(printf '%s\n' "${hidden[@]}" | sort -u); do
  mount --bind /dev/null "$library"
  echo "without-gpu-libraries: hid $library"
done
# The toolkit itself (nvcc, headers, libraries), wherever /usr/local/cuda points.
empty="$(mktemp -d)"
for toolkit in /usr/local/cuda /opt/cuda; do
  if [[ -d "$toolkit" ]]; then
    mount --bind "$empty" "$(realpath "$toolkit")"
    echo "without-gpu-libraries: hid $(realpath "$toolkit")"
  fi
done
"$@"
