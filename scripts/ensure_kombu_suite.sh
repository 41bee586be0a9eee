#!/usr/bin/env bash
# Puts kombu's own integration suite (t/integration/common.py of the sdist of the installed
# kombu version) into .venv/share/kombu-suite/ if it is missing: tests/integration/
# test_kombu_suite.py imports its BasicFunctionality, BaseExchangeTypes, BaseTimeToLive,
# BasePriority and BaseMessage from there and runs them against a disq cluster. The suite is
# not copied into the repository; the wheel does not ship it, so the sdist is downloaded once.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=.venv/share/kombu-suite
VERSION="$(.venv/bin/python -c 'import kombu; print(kombu.__version__)')"
if [ -f "$TARGET/VERSION" ] && [ "$(cat "$TARGET/VERSION")" = "$VERSION" ] \
  && [ -f "$TARGET/kombu_integration_common.py" ]; then
  exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
.venv/bin/pip download -q --no-deps --no-binary :all: "kombu==$VERSION" -d "$TMP"
SDIST="$(ls "$TMP"/kombu-*.tar.gz)"
tar -xzf "$SDIST" -C "$TMP" "kombu-$VERSION/t/integration/common.py"
mkdir -p "$TARGET"
# Its own module name, so that it cannot shadow anything called "common" on sys.path.
cp "$TMP/kombu-$VERSION/t/integration/common.py" "$TARGET/kombu_integration_common.py"
echo "$VERSION" >"$TARGET/VERSION"
