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
"$(dirname "$0")/apt_install.sh" faketime
have_lib
