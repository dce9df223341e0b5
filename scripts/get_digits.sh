#!/usr/bin/env bash
# Fetches the 8x8 handwritten-digits set (1797 images, 10 classes) that Debian's python3-sklearn
# package ships as sklearn/datasets/data/digits.csv.gz, without Python: apt-get download, then
# dpkg -x into a temporary folder, keeping only the CSV. Prints the file's path.
#   scripts/get_digits.sh [cache dir]   (default: $EMBER_DATA_DIR, else ~/.cache/ember)
set -euo pipefail
dir=${1:-${EMBER_DATA_DIR:-$HOME/.cache/ember}}
out="$dir/digits.csv.gz"
if [[ -s $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download python3-sklearn >/dev/null 2>&1) ||
  { echo "get_digits: apt-get download python3-sklearn failed (no network or no Debian/Ubuntu apt?)" >&2; exit 1; }
dpkg -x "$tmp"/python3-sklearn_*.deb "$tmp/x"
src=$(find "$tmp/x" -name digits.csv.gz | head -1)
[[ -n $src ]] || { echo "get_digits: the package holds no digits.csv.gz" >&2; exit 1; }
cp "$src" "$out"
echo "$out"
