#!/usr/bin/env bash
# Installs the Debian packages Kiln needs that are missing. Safe to run again:
# it asks apt only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake make pkg-config git curl ca-certificates
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev          # benchmark anchor only; libkiln never links it
  libstb-dev nlohmann-json3-dev libfmt-dev libcli11-dev zlib1g-dev
  libgloo-dev libopenmpi-dev openmpi-bin
  iproute2 util-linux      # ip netns and unshare: the two-host test of kiln-run
  python3-torch            # the oracle of the PyTorch parity tests (/usr/bin/python3)
  fortunes fortunes-min    # kiln-gpt's default text corpus (/usr/share/games/fortunes, data/text_dataset.h)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
