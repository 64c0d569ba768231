# shellcheck shell=bash
# Sourced by the LeNet benchmarks (lenet_vs_pytorch.sh, ddp_vs_pytorch.sh):
#   cifar_binary BUILD DIR
# finds CIFAR-10 as scripts/get-cifar10.sh does ($KILN_DATA, then data/;
# never a download here) and writes it into DIR in the binary format both
# Kiln's and PyTorch's benchmark programs read (a JPEG image-folder tree goes
# through BUILD's kiln-image-folder-to-cifar). Prints "data: ..." and returns
# 0 when it found the data, 1 otherwise.
cifar_binary() {
  local build="$1" dir="$2" repo source members top
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  if ! source="$(KILN_CIFAR10_URL=file:///nonexistent bash "$repo/scripts/get-cifar10.sh" 2>/dev/null)"; then
    return 1
  fi
  case "$source" in
    *cifar-10-batches-bin) cp -r "$source" "$dir/" ;;
    *.tar.gz | *.tgz)
      # awk reads the whole listing: grep -q would stop early and fail tar
      # with SIGPIPE under pipefail.
      members="$(tar tzf "$source")"
      if awk '/cifar-10-batches-bin\// { found = 1 } END { exit !found }' <<<"$members"; then
        tar xzf "$source" -C "$dir"
      else
        top="$(awk -F/ '/\/train\// && !found { print $1; found = 1 }' <<<"$members")"
        "$build/apps/tools/kiln-image-folder-to-cifar" "$source/$top" "$dir" >/dev/null
      fi
      ;;
    *) "$build/apps/tools/kiln-image-folder-to-cifar" "$source" "$dir" >/dev/null ;;
  esac
  echo "data: CIFAR-10 from $source"
}
