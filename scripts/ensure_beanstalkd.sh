#!/usr/bin/env bash
# Installs the reference beanstalkd (Debian package) if it is missing: the wire tests are also
# run against it, so every expected byte in them is checked against the real server.
set -euo pipefail
if command -v beanstalkd >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt_install.sh" beanstalkd
command -v beanstalkd >/dev/null
