#!/usr/bin/env bash
# make test must leave the work tree as it found it: no tracked file changed, no untracked
# file left behind (outputs go to ignored folders: build/, .venv/, tmp dirs).
#
#   scripts/tree_state.sh save FILE    record the tree's state (before the tests)
#   scripts/tree_state.sh check FILE   fail, listing what changed, if it differs now
#
# The state is `git status` (tracked changes and untracked files, ignored ones excluded) plus
# a hash of the diff and of each untracked file, so a file already edited before the run and
# changed again by it is caught too. Outside a git work tree there is nothing to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="$1" file="$2"

state() {
    git status --porcelain=v1 --untracked-files=all
    git diff HEAD --binary | sha256sum
    git ls-files --others --exclude-standard -z | xargs -0 -r sha256sum
}

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    exit 0
fi
case "$mode" in
    save) state >"$file" ;;
    check)
        if ! diff -u "$file" <(state) >"$file.diff"; then
            echo "make test changed the work tree (a test wrote a tracked or new file):" >&2
            cat "$file.diff" >&2
            exit 1
        fi
        ;;
    *) echo "usage: $0 save|check FILE" >&2; exit 2 ;;
esac
