#!/usr/bin/env bash
# Installs redis-cli (Debian's redis-tools) if it is missing: the RESP door is checked with the
# client users reach for first, inline and multibulk, against a live node.
set -euo pipefail
if command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq redis-tools >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq redis-tools >/dev/null
}
command -v redis-cli >/dev/null
