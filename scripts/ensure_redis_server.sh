#!/usr/bin/env bash
# Installs redis-server (Debian's package) if it is missing: python -m bench celery runs
# Celery on Redis beside Celery on disq, the broker most Celery users compare with.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq redis-server >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq redis-server >/dev/null
}
command -v redis-server >/dev/null
