"""docs/readme-claims.md, the map of the README's claims to what checks them, cannot rot:
every quoted claim is still in its README section, every test it names exists, every
benchmarks.md section it names is a heading there, and every README section has a row."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLAIMS = ROOT / "docs" / "readme-claims.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)*)`")
BENCH_REF = re.compile(r"\[benchmarks\.md: ([^\]]+)\]")
QUOTE = re.compile(r'^"(.+)"$')


@dataclass(frozen=True)
class Row:
    section: str
    claim: str
    checks: str
    line: int


def _normal(text: str) -> str:
    """Text as the README means it: markdown's emphasis and code marks, line breaks, and the `#`
    that continues a comment in a code block, aside."""
    text = re.sub(r"\n\s*# ", " ", text)
    return " ".join(text.replace("*", "").replace("`", "").split())


def _cells(line: str) -> list[str]:
    """A table row's cells; `\\|` is a pipe inside a cell."""
    inner = line.strip().strip("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def readme_sections(text: str) -> dict[str, str]:
    """README's `## ` sections by heading; the text above the first one under the title."""
    sections: dict[str, list[str]] = {}
    lines = text.splitlines()
    current = lines[0].lstrip("# ").strip()
    sections[current] = []
    in_code = False
    for line in lines[1:]:
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
            continue
        sections[current].append(line)
    return {name: "\n".join(body) for name, body in sections.items()}


def claim_rows(text: str) -> list[Row]:
    rows: list[Row] = []
    section = ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if not section or not line.startswith("|"):
            continue
        cells = _cells(line)
        if cells[0] in ("claim", "---"):
            continue
        assert len(cells) == 2, f"readme-claims.md:{n}: a row has two cells: {line!r}"
        rows.append(Row(section, cells[0], cells[1], n))
    return rows


def benchmark_headings(text: str) -> set[str]:
    headings: set[str] = set()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and re.match(r"#{1,6} ", line):
            headings.add(line.lstrip("#").strip())
    return headings


def heading_exists(name: str, headings: set[str]) -> bool:
    """The heading itself, or the heading without its trailing `` (...)`` (a command, a date)."""
    return any(h == name or h.startswith(name + " (") for h in headings)


@cache
def _defined(path: Path) -> set[str]:
    """`name` and `Class::method` for every function and class the module defines."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}::{item.name}")
    return names


def test_test_references_exist() -> None:
    rows = claim_rows(CLAIMS.read_text())
    missing = []
    for row in rows:
        for path_text, names in TEST_REF.findall(row.checks):
            path = ROOT / path_text
            if not path.is_file():
                missing.append(f"readme-claims.md:{row.line}: no file {path_text}")
                continue
            name = names.lstrip(":")
            if name and name not in _defined(path):
                missing.append(f"readme-claims.md:{row.line}: no {name} in {path_text}")
    assert not missing, "\n".join(missing)


def test_benchmark_references_exist() -> None:
    headings = benchmark_headings(BENCHMARKS.read_text())
    missing = []
    for row in claim_rows(CLAIMS.read_text()):
        for name in BENCH_REF.findall(row.checks):
            if not heading_exists(name, headings):
                missing.append(f"readme-claims.md:{row.line}: no benchmarks.md heading {name!r}")
    assert not missing, "\n".join(missing)


def test_every_row_names_a_check() -> None:
    for row in claim_rows(CLAIMS.read_text()):
        assert TEST_REF.search(row.checks) or BENCH_REF.search(row.checks), (
            f"readme-claims.md:{row.line}: {row.claim} names no test and no benchmarks section"
        )


def test_every_quoted_claim_is_in_its_readme_section() -> None:
    sections = readme_sections(README.read_text())
    wrong = []
    for row in claim_rows(CLAIMS.read_text()):
        m = QUOTE.match(row.claim)
        assert m, f'readme-claims.md:{row.line}: a claim is a "quote": {row.claim!r}'
        if row.section not in sections:
            wrong.append(f"readme-claims.md:{row.line}: README has no section {row.section!r}")
        elif _normal(m.group(1)) not in _normal(sections[row.section]):
            wrong.append(
                f"readme-claims.md:{row.line}: not in README's {row.section!r}: {m.group(1)!r}"
            )
    assert not wrong, "\n".join(wrong)


def test_every_readme_section_has_a_claim_row() -> None:
    sections = readme_sections(README.read_text())
    covered = {row.section for row in claim_rows(CLAIMS.read_text())}
    assert list(sections) == [s for s in sections if s in covered], (
        f"README sections without a row in docs/readme-claims.md: "
        f"{[s for s in sections if s not in covered]}"
    )


def test_the_checks_notice_a_missing_test_a_missing_heading_and_a_changed_quote() -> None:
    """The parser on purpose-made input: what it must refuse, it refuses."""
    doc = (
        "## S\n\n| claim | checked by |\n| --- | --- |\n"
        '| "a \\| b" | `tests/unit/test_readme_claims.py::nope`; [benchmarks.md: Nowhere] |\n'
    )
    [row] = claim_rows(doc)
    assert row.claim == '"a | b"'
    [(path, name)] = TEST_REF.findall(row.checks)
    assert name.lstrip(":") not in _defined(ROOT / path)
    assert "test_test_references_exist" in _defined(ROOT / path)
    headings = benchmark_headings("# A\n## Memory per job (`cmd`)\n```\n## not one\n```\n")
    assert heading_exists("Memory per job", headings) and not heading_exists("Memory", headings)
    assert not heading_exists("not one", headings)
    sections = readme_sections("# t\nintro\n## One\n```sh\n## a comment\n```\ntext **bold**\n")
    assert list(sections) == ["t", "One"]
    assert _normal("text bold") in _normal(sections["One"])
