#!/usr/bin/env bash
# Installs redis-cli (Debian's redis-tools) if it is missing: the RESP door is checked with the
# client users reach for first, inline and multibulk, against a live node.
set -euo pipefail
if command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt_install.sh" redis-tools
command -v redis-cli >/dev/null
