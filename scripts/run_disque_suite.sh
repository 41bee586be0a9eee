#!/usr/bin/env bash
# Runs Disque's own cluster test suite (tests/cluster: 13 units, 7 nodes) against disq nodes
# started as drop-in `disque-server`s: the suite writes each node's disque.conf and starts
# ../../../src/disque-server on it, and here that path is a wrapper that execs disq-node on the
# same file (so the pid the suite kills with -9 is the node's own).
#
#   scripts/run_disque_suite.sh [--disque-src DIR] [suite options, e.g. --single 08 --timeout 60]
#
# DIR is a checkout of https://github.com/antirez/disque (only its tests/ are used; Disque
# itself is not built). Without it the pinned commit is cloned into a temporary directory.
# The suite runs in a temporary copy, never in this repository. Nodes run this checkout's
# code, pure Python unless DISQ_PURE is set to something else than 1 in the environment.
# Prints the suite's own output, then one line: units, checks passed, checks failed.
# DISQUE_BASE_PORT sets the first node's port (the suite's own is 25000; its bus is 10000
# above, which the suite does not check). By default a random base in 20000-22699 whose 7
# client ports and 7 bus ports are free: the buses stay under 32768, where the kernel's
# ephemeral ports start, and two runs on one machine seldom meet.
set -euo pipefail

DISQUE_REPO=https://github.com/antirez/disque
DISQUE_COMMIT=0192ba7e1cda157024229962b7bee1c6e86d771b
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}

src=""
if [ "${1:-}" = "--disque-src" ]; then
  src=$2
  shift 2
fi
tclsh=$(command -v tclsh8.6 || command -v tclsh8.5 || command -v tclsh || true)
if [ -z "$tclsh" ]; then
  echo "run_disque_suite: needs tclsh 8.5 or newer (apt-get install tcl)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/disque-suite.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -z "$src" ]; then
  git clone -q "$DISQUE_REPO" "$work/disque-src"
  git -C "$work/disque-src" checkout -q "$DISQUE_COMMIT"
  src=$work/disque-src
fi
if [ ! -f "$src/tests/cluster/run.tcl" ]; then
  echo "run_disque_suite: $src has no tests/cluster/run.tcl (not a Disque checkout?)" >&2
  exit 2
fi

mkdir -p "$work/run/src"
cp -R "$src/tests" "$work/run/tests"
mkdir -p "$work/run/tests/cluster/tmp"
base_port=${DISQUE_BASE_PORT:-$("$PYTHON" - <<'PY'
import random, socket

def free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True

for _ in range(200):
    base = random.randrange(20000, 22700)
    if all(free(p) and free(p + 10000) for p in range(base, base + 7)):
        print(base)
        break
else:
    raise SystemExit("run_disque_suite: no free range of ports found")
PY
)}
sed -i "s/^set ::disque_base_port .*/set ::disque_base_port $base_port/" \
  "$work/run/tests/instances.tcl"
cat >"$work/run/src/disque-server" <<EOF
#!/bin/sh
# disque-server CONFIG -> disq-node CONFIG (drop-in mode), this checkout's code.
PYTHONPATH="$ROOT\${PYTHONPATH:+:\$PYTHONPATH}" DISQ_PURE="\${DISQ_PURE:-1}" \\
  exec "$PYTHON" -m disq.node_main "\$@"
EOF
chmod +x "$work/run/src/disque-server"

log=$work/suite.log
set +e
(cd "$work/run" && "$tclsh" tests/cluster/run.tcl "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# The suite prints "HH:MM:SS> <check>: OK" for a passed check, the assertion's message for a
# failed one (and then jumps to the next unit); colours only on a terminal.
plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
units=$(grep -c '^Testing unit: ' <<<"$plain" || true)
passed=$(grep -cE '^[0-9]{2}:[0-9]{2}:[0-9]{2}> .*: OK$' <<<"$plain" || true)
failed=$(grep -c '^(Jumping to next unit after error)$' <<<"$plain" || true)
echo "disque suite ($DISQUE_COMMIT): units $units, passed $passed, failed $failed, exit $rc"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ]; then
  exit 1
fi
