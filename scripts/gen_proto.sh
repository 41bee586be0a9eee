#!/usr/bin/env bash
# Regenerate the Python code for proto/disq/v1/*.proto into disq/proto_gen/ (or into $1).
#
# The generated files are committed; tests/unit/test_proto_drift.py runs this script into a
# temporary directory and fails when the committed copy differs, so run it after every change
# to a .proto file. The output depends on the grpcio-tools version, pinned exactly in
# pyproject.toml for that reason.
#
# protoc names modules after the proto's path (disq/v1/cluster.proto -> disq.v1.cluster_pb2).
# We keep that path, because it is also the file's name inside the descriptor pool, and move
# the modules into the flat package disq.proto_gen, rewriting the cross-module imports.
#
# Usage: scripts/gen_proto.sh [OUT_DIR]     (PYTHON overrides the interpreter)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/disq/proto_gen}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

cd "$ROOT/proto"
# Sorted, so that the output does not depend on the file system's listing order.
mapfile -t PROTOS < <(printf '%s\n' disq/v1/*.proto | LC_ALL=C sort)
"$PYTHON" -m grpc_tools.protoc -I. \
    --python_out="$TMP" --pyi_out="$TMP" --grpc_python_out="$TMP" \
    "${PROTOS[@]}"

mkdir -p "$OUT"
# Only generated names are removed, so nothing else that lives in the directory is lost.
rm -f "$OUT"/*_pb2.py "$OUT"/*_pb2.pyi "$OUT"/*_pb2_grpc.py
for f in "$TMP"/disq/v1/*; do
    sed -e 's/^from disq\.v1 import /from disq.proto_gen import /' "$f" >"$OUT/$(basename "$f")"
done
cat >"$OUT/__init__.py" <<'EOF'
"""Generated from proto/disq/v1/*.proto by scripts/gen_proto.sh. Do not edit; regenerate."""
EOF
