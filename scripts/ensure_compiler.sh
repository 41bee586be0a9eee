#!/usr/bin/env bash
# Installs a C compiler and Python's headers if missing (Debian's gcc and python3-dev): the
# build compiles disq's hot modules with mypyc (setup.py). Without them the build still
# succeeds, as a pure Python install (setup.py says why in one line).
set -euo pipefail
PY="${1:-python3}"
include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if command -v "${CC:-gcc}" >/dev/null 2>&1 && [ -f "$include/Python.h" ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
pkgs="gcc libc6-dev"
# Debian's headers fit Debian's python3 only; a python built elsewhere (pyenv, the python
# images) ships its own headers.
if [ ! -f "$include/Python.h" ]; then pkgs="$pkgs python3-dev"; fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq $pkgs >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq $pkgs >/dev/null || true
}
if ! command -v "${CC:-gcc}" >/dev/null 2>&1 || [ ! -f "$include/Python.h" ]; then
  echo "ensure_compiler.sh: no C compiler or Python.h; the build will be pure Python" >&2
fi
