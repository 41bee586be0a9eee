#!/usr/bin/env bash
# greenstalk's own test suite, unmodified, against disq-node, N runs in a row (issue 31).
#
# Usage: scripts/run_greenstalk_suite.sh [RUNS]   (default 10)
#
# The suite is the tests/test_greenstalk.py of the installed greenstalk's release: each test
# spawns "$BEANSTALKD_PATH -l ADDR -p PORT" (or -l unix:PATH), sleeps 0.1 s, connects, and
# several time a 1 s delay or timeout with 50 ms of slack. Here BEANSTALKD_PATH is disq-node,
# so every test is also a start of a fresh node. greenstalk's sdist does not ship its tests:
# the file is taken from the release's tag on GitHub (v$VERSION) once, into
# build/greenstalk-suite/ (out of the repository, like kombu's suite), or from
# $GREENSTALK_TESTS when set (a copy of that file, for a machine without GitHub access).
#
# Each run prints "run I: P of T passed" (and the failures' names); the exit status is 0 only
# if every run passed every test. The node runs the disq the environment gives it: run with
# PYTHONPATH at a checkout (and without DISQ_PURE) to measure its compiled build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RUNS="${1:-10}"
PY=.venv/bin/python
VERSION="$($PY -c 'import greenstalk; print(greenstalk.__version__)')"
TARGET="$ROOT/build/greenstalk-suite"
SUITE="$TARGET/test_greenstalk.py"
if [ ! -f "$SUITE" ] || [ "$(cat "$TARGET/VERSION" 2>/dev/null)" != "$VERSION" ]; then
  mkdir -p "$TARGET"
  if [ -n "${GREENSTALK_TESTS:-}" ]; then
    cp "$GREENSTALK_TESTS" "$SUITE"
  else
    URL="https://raw.githubusercontent.com/justinmayhew/greenstalk/v$VERSION/tests/test_greenstalk.py"
    curl -fsSL "$URL" -o "$SUITE.part" || {
      echo "cannot fetch $URL; set GREENSTALK_TESTS to a copy of that file" >&2
      exit 2
    }
    mv "$SUITE.part" "$SUITE"
  fi
  echo "$VERSION" >"$TARGET/VERSION"
fi
NODE="$ROOT/.venv/bin/disq-node"
echo "greenstalk $VERSION's suite against $NODE ($($PY -c 'import disq._native as n; print(n.describe())'))"
status=0
for i in $(seq 1 "$RUNS"); do
  out="$(cd "$TARGET" && BEANSTALKD_PATH="$NODE" "$ROOT/$PY" -m pytest -q -p no:cacheprovider \
    -c /dev/null --rootdir "$TARGET" -rf test_greenstalk.py 2>&1)" || status=1
  summary="$(printf '%s\n' "$out" | tail -n 1)"
  passed="$(printf '%s\n' "$summary" | grep -o '[0-9]* passed' | grep -o '[0-9]*' || echo 0)"
  failed="$(printf '%s\n' "$summary" | grep -o '[0-9]* failed' | grep -o '[0-9]*' || echo 0)"
  errors="$(printf '%s\n' "$summary" | grep -o '[0-9]* error' | grep -o '[0-9]*' || echo 0)"
  total=$((passed + failed + errors))
  echo "run $i: $passed of $total passed"
  printf '%s\n' "$out" | grep '^FAILED\|^ERROR' || true
done
exit "$status"
