#!/usr/bin/env bash
# Installs redis-py 7 into .venv/redis7 (outside the venv's site-packages, which has redis-py 8)
# if it is missing: tests/integration/test_resp3_clients.py runs a client program with
# PYTHONPATH=.venv/redis7, so the RESP door is checked against both majors people have today.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=.venv/redis7
if PYTHONPATH="$TARGET" .venv/bin/python -c \
  'import redis, sys; sys.exit(0 if redis.__version__.startswith("7.") else 1)' 2>/dev/null; then
  exit 0
fi
.venv/bin/pip install -q --upgrade --target "$TARGET" 'redis>=7,<8'
