"""No source file in disq/ over 900 lines: a module that grows past it is split by what its
parts do. The code protoc generates (disq/proto_gen) is not ours to split. ARCHITECTURE.md stays
a map a newcomer can read: at most 700 lines."""

from __future__ import annotations

from pathlib import Path

import disq

MAX_LINES = 900
PACKAGE = Path(disq.__file__).resolve().parent
GENERATED = PACKAGE / "proto_gen"
ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_no_source_file_in_disq_is_over_900_lines() -> None:
    sources = [p for p in PACKAGE.rglob("*.py") if GENERATED not in p.parents]
    assert len(sources) > 100  # the walk found the package
    over = {str(p.relative_to(PACKAGE.parent)): n for p in sources if (n := _lines(p)) > MAX_LINES}
    assert over == {}


def test_architecture_md_is_at_most_700_lines() -> None:
    """A design document, not a diary: what is true of the code, each decision with its reason
    (history is in git, figures in docs/benchmarks.md)."""
    assert _lines(ROOT / "ARCHITECTURE.md") <= 700
