#!/usr/bin/env bash
# Installs rabbitmq-server (Debian's package) if it is missing: python -m bench celery runs
# Celery on RabbitMQ beside Celery on disq, the broker Celery's documentation recommends.
set -euo pipefail
if command -v rabbitmq-server >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt_install.sh" rabbitmq-server
command -v rabbitmq-server >/dev/null
