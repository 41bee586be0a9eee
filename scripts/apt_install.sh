#!/usr/bin/env bash
# Installs Debian packages for the ensure_*.sh scripts: apt-get install as root (sudo when not),
# quietly; an update first only when the install fails (a fresh machine's empty lists).
#
#   scripts/apt_install.sh PACKAGE...
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq "$@" >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq "$@" >/dev/null
}
