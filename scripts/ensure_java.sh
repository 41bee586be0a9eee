#!/usr/bin/env bash
# Installs Java 17 (Debian's openjdk-17-jre-headless) if no java is on the PATH: PySpark's
# local mode runs a JVM, and the Spark tests (tests/integration/test_spark.py) need it.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt_install.sh" openjdk-17-jre-headless
command -v java >/dev/null
