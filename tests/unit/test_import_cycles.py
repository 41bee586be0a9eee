"""No import circle among disq's modules (issue 40).

import-linter's ``acyclic`` contract (pyproject.toml) checks each package's children as
squashed siblings, from ``disq``'s subpackages down. It cannot run on ``disq`` itself: there,
``disq.core`` and ``disq.persistence`` (and ``disq.server`` and ``disq.dashboard``) import each
other by design, module by module without a circle (the ``layers`` contract orders those
modules). This test covers what that leaves: a circle of modules that spans two of ``disq``'s
subpackages. Imports inside functions and under ``if TYPE_CHECKING:`` count, as in the
contracts: a type-only circle still ties the modules' designs together.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("disq", cache_dir=None)


def _circles(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every
    module of one imports every other, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        # An explicit stack of (module, its imports not yet walked): no recursion limit.
        work = [(root, iter(sorted(imports[root])))]
        while work:
            module, todo = work[-1]
            nxt = next(todo, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(imports.get(nxt, ())))))
                elif nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(g: grimp.ImportGraph, circle: list[str]) -> str:
    lines = [f"circle of {len(circle)} modules:"]
    members = set(circle)
    for importer in circle:
        for imported in sorted(g.find_modules_directly_imported_by(importer) & members):
            details = g.get_import_details(importer=importer, imported=imported)
            where = "; ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
            lines.append(f"  {importer} -> {imported} ({where})")
    return "\n".join(lines)


def test_the_graph_has_lazy_and_type_only_imports(graph: grimp.ImportGraph) -> None:
    # A type-only import (under TYPE_CHECKING) and one inside a method: both must be in the
    # graph, or the test below would pass over the circles they make.
    assert graph.direct_import_exists(
        importer="disq.persistence.records", imported="disq.core.beanstalk.model"
    )
    assert graph.direct_import_exists(
        importer="disq.core.node_core", imported="disq.core.node_cluster"
    )


def test_no_import_circle_among_disqs_modules(graph: grimp.ImportGraph) -> None:
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert len(imports) > 100  # the graph holds the package
    circles = _circles(imports)
    assert circles == [], "\n\n".join(_describe(graph, c) for c in circles)


def test_the_search_finds_a_circle() -> None:
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _circles(imports) == [["a", "b", "c"]]
