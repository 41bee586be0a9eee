#!/usr/bin/env bash
# Installs headless Chromium and its WebDriver (Debian's chromium and chromium-driver) if
# either is missing: the dashboard's browser tests (tests/integration/test_dashboard_browser.py)
# drive /usr/bin/chromium through /usr/bin/chromedriver with Selenium.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || {
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
}
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]
