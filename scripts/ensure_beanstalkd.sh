#!/usr/bin/env bash
# Installs the reference beanstalkd (Debian package) if it is missing: the wire tests are also
# run against it, so every expected byte in them is checked against the real server.
set -euo pipefail
if command -v beanstalkd >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq beanstalkd >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq beanstalkd >/dev/null
}
command -v beanstalkd >/dev/null
