"""DisqueCore's parts (disq/core/disque/parts.py): every method CoreParts declares is tagged with
the module that really defines it, every method a part calls on another part is declared, no
declaration is dead, and import-linter's contract keeps every part independent of the others.

The tags are checked against DisqueCore's MRO, so they hold for the compiled build too (the
parts are mypyc traits there); the calls are read from the parts' sources.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from disq.core.disque import parts as parts_module
from disq.core.disque.core import DisqueCore
from disq.core.disque.parts import DEFINED_IN, CoreParts

PACKAGE = "disq.core.disque"
ROOT = Path(parts_module.__file__).resolve().parent.parent.parent.parent  # holds disq/
CONTRACT = "disque-parts-apart"


def _part_classes() -> list[type]:
    """The parts DisqueCore is made of, in MRO order (CoreParts and DisqueCore left out)."""
    return [
        cls
        for cls in DisqueCore.__mro__
        if cls not in (DisqueCore, CoreParts) and issubclass(cls, CoreParts)
    ]


def _short(module: str) -> str:
    assert module.startswith(PACKAGE + "."), module
    return module[len(PACKAGE) + 1 :]


def _declared_methods() -> set[str]:
    # From the source (a compiled property is no ``property`` at run time); each one is
    # really in the class.
    names = _defined_in_class(_class_node(_source_of(CoreParts.__module__), "CoreParts"))
    assert names <= set(vars(CoreParts)), names - set(vars(CoreParts))
    return names


def _declared_state() -> set[str]:
    # From the source: a compiled class keeps no __annotations__.
    node = _class_node(_source_of(CoreParts.__module__), "CoreParts")
    return {
        n.target.id
        for n in node.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def _source_of(module: str) -> ast.Module:
    path = ROOT / (module.replace(".", "/") + ".py")
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _class_node(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} not found")


def _defined_in_class(node: ast.ClassDef) -> set[str]:
    return {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _self_uses(node: ast.ClassDef) -> set[str]:
    """Every ``self.<name>`` read, written or called in the class's methods."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def _uses_by_part() -> dict[str, tuple[set[str], set[str]]]:
    """part module (short name) -> (names its class defines, names it uses on self)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for cls in _part_classes():
        node = _class_node(_source_of(cls.__module__), cls.__name__)
        out[_short(cls.__module__)] = (_defined_in_class(node), _self_uses(node))
    return out


def _owner(name: str) -> type:
    """The class of DisqueCore's MRO whose definition of ``name`` DisqueCore runs."""
    for cls in DisqueCore.__mro__:
        if name in vars(cls):
            return cls
    raise AssertionError(f"{name} is not defined anywhere in DisqueCore's MRO")


def test_every_part_is_a_module_of_its_own_and_a_direct_subclass_of_core_parts() -> None:
    classes = _part_classes()
    modules = [cls.__module__ for cls in classes]
    assert classes  # the MRO walk finds the parts left (components are not parts)
    assert len(set(modules)) == len(modules)
    for cls in classes:
        # A part built on another part would import it: the parts share only CoreParts.
        assert [b for b in cls.__bases__ if b is not object] == [CoreParts], cls


def test_each_declared_method_has_exactly_one_tag() -> None:
    tagged = [name for names in DEFINED_IN.values() for name in names]
    assert len(tagged) == len(set(tagged)), "a method is tagged twice"
    assert set(tagged) == _declared_methods()


@pytest.mark.parametrize(
    ("module", "name"), [(m, n) for m, names in DEFINED_IN.items() for n in names]
)
def test_the_tag_names_the_module_whose_definition_disque_core_runs(module: str, name: str) -> None:
    owner = _owner(name)
    assert owner is not CoreParts, f"{name}: only CoreParts' stub, nothing defines it"
    assert _short(owner.__module__) == module, (
        f"{name} is tagged {module!r} but DisqueCore runs {owner.__qualname__}'s"
    )


def test_the_tags_read_back_from_the_parts_sources() -> None:
    """The same ownership seen from the other side: the tagged module's source defines the
    method (in its part class, or DisqueCore's for "core")."""
    uses = _uses_by_part()
    core_defs = _defined_in_class(_class_node(_source_of(f"{PACKAGE}.core"), "DisqueCore"))
    for module, names in DEFINED_IN.items():
        defined = core_defs if module == "core" else uses[module][0]
        assert set(names) <= defined, (module, set(names) - defined)


def test_every_method_a_part_uses_from_another_is_declared() -> None:
    declared = _declared_methods() | _declared_state()
    undeclared = {
        module: sorted(used - defined - declared)
        for module, (defined, used) in _uses_by_part().items()
    }
    assert {m: names for m, names in undeclared.items() if names} == {}


def test_no_declaration_is_dead() -> None:
    """Each declared method is used by a part other than the one defining it: a stub no other
    part calls should go (its part's own methods need none)."""
    uses = _uses_by_part()
    unused = []
    for module, names in DEFINED_IN.items():
        for name in names:
            if not any(name in used for m, (_, used) in uses.items() if m != module):
                unused.append(f"{module}.{name}")
    assert unused == []


def test_import_linter_keeps_every_part_independent() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    contract = contracts[CONTRACT]
    assert contract["type"] == "independence"
    assert sorted(contract["modules"]) == sorted(cls.__module__ for cls in _part_classes())
    assert not contract.get("ignore_imports")
