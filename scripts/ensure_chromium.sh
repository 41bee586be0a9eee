#!/usr/bin/env bash
# Installs headless Chromium and its WebDriver (Debian's chromium and chromium-driver) if
# either is missing: the dashboard's browser tests (tests/integration/test_dashboard_browser.py)
# drive /usr/bin/chromium through /usr/bin/chromedriver with Selenium.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
"$(dirname "$0")/apt_install.sh" chromium chromium-driver
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]
