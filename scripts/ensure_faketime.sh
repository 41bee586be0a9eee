#!/usr/bin/env bash
# Installs libfaketime (Debian's faketime package, which brings libfaketime) if it is missing:
# tests/integration/test_clock_jumps.py runs nodes under it (LD_PRELOAD) to step their wall
# clock an hour forwards and back while the monotonic clock runs on.
set -euo pipefail
have_lib() {
  compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null \
    || [ -e /usr/lib/faketime/libfaketime.so.1 ] \
    || [ -e /usr/local/lib/faketime/libfaketime.so.1 ]
}
if have_lib; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq faketime >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq faketime >/dev/null
}
have_lib
