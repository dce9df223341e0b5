#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Ember builds with, if any are missing. Idempotent: when
# everything is present it changes nothing and needs no network. Runs as root, or via sudo.
# (The CUDA toolkit is not a Debian package here: CMake picks it up from /usr/local/cuda or PATH.)
set -euo pipefail

packages=(cmake ninja-build g++ libeigen3-dev libopenblas-dev zlib1g-dev libgloo-dev catch2 nlohmann-json3-dev libcli11-dev python3 python3-jsonschema python3-yaml doxygen graphviz librsvg2-bin)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
# The real digits set for examples/digits and its test (skipped without it): a download after
# the packages (apt's lists must exist), so a failure here only warns.
fetch_digits() {
  "$(dirname "$0")/get_digits.sh" >/dev/null 2>&1 ||
    echo "setup: the digits set was not fetched (scripts/get_digits.sh); its test will be skipped"
}
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present (${packages[*]})"
  fetch_digits
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: missing ${missing[*]}; run as root or install sudo" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
"${as_root[@]}" apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fetch_digits
