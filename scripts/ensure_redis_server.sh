#!/usr/bin/env bash
# Installs redis-server (Debian's package) if it is missing: python -m bench celery runs
# Celery on Redis beside Celery on disq, the broker most Celery users compare with.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt_install.sh" redis-server
command -v redis-server >/dev/null
