#!/usr/bin/env bash
# Installs Java 17 (Debian's openjdk-17-jre-headless) if no java is on the PATH: PySpark's
# local mode runs a JVM, and the Spark tests (tests/integration/test_spark.py) need it.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
}
command -v java >/dev/null
