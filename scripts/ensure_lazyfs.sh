#!/usr/bin/env bash
# Builds the vendored LazyFS (third_party/lazyfs) under /tmp for the power-loss test, once: a
# stamp holding the sources' hash says the binary is current. Installs the build dependencies
# with apt when they are missing. Prints the binary's path.
# Usage: scripts/ensure_lazyfs.sh [BUILD_DIR]   (default /tmp/disq-lazyfs)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/third_party/lazyfs"
OUT="${1:-${DISQ_LAZYFS_DIR:-/tmp/disq-lazyfs}}"
BIN="$OUT/build/lazyfs"
HASH="$(cd "$SRC" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if [ -x "$BIN" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$HASH" ]; then
  echo "$BIN"
  exit 0
fi
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
[ -e /usr/include/fuse3/fuse.h ] || need+=(libfuse3-dev)
[ -e /usr/include/spdlog/spdlog.h ] || need+=(libspdlog-dev)
[ -e /usr/include/toml.hpp ] || need+=(libtoml11-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if [ "${#need[@]}" -gt 0 ]; then
  "$(dirname "$0")/apt_install.sh" "${need[@]}"
fi
rm -rf "$OUT"
mkdir -p "$OUT/build"
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 \
  && cmake --build "$OUT/build" -j 2 >>"$OUT/build.log" 2>&1 \
  || { cat "$OUT/build.log" >&2; exit 1; }
echo "$HASH" >"$OUT/stamp"
echo "$BIN"
