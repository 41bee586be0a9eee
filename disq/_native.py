"""Which of disq's modules run compiled (mypyc), decided once, before any of them is imported.

``setup.py`` compiles the modules listed here (``COMPILED``, the one list) into C extensions
that sit beside their ``.py``; Python's own finder prefers the extension. This module, imported
first by ``disq/__init__.py``, checks that preference is safe:

- ``DISQ_PURE`` set (to anything but "" or "0"): the ``.py`` sources run, whatever was built.
- nothing built (a pure install, no compiler): the sources run; nothing to say.
- every listed module has its extension, and each ``.py`` is byte for byte the one compiled:
  its digest (CRC-32 and size, :func:`source_digest`) is the one in the build's manifest,
  ``_native_build.json``: compiled. File times are not trusted: an edit made while the
  minutes-long build ran, or a copy that keeps times, would pass an mtime check and run
  stale code. Reading and checksumming the ~60 sources costs about 1 ms per start (zlib,
  not hashlib: hashlib's OpenSSL set-up alone is 2 ms); a CRC catches any edit a person
  or a checkout makes, which is all this guards against.
- anything else (an edited ``.py``, a module added to the list and not built yet, a partial
  build): stale. It is all or nothing: a compiled module checks the native classes of its
  siblings, so a pure module among compiled ones breaks them. A meta-path finder then loads
  every listed module from its ``.py``, and one warning says so.

``COMPILED_IN_USE`` and ``compiled_modules()`` say what was decided (the test that proves
the compiled build loaded reads them; so does ``disq-node --version``'s log line).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

# The modules mypyc compiles (docs/benchmarks.md "Compiled with mypyc" says why these):
# packages compiled whole (every module under them), then single modules.
COMPILED_PACKAGES = ("disq.core", "disq.protocol", "disq.doors")
COMPILED_SINGLE = (
    "disq.persistence.framing",
    "disq.persistence.records",
    "disq.persistence.cluster_records",
    # The event log: every flush of a node that recorded events appends to it (issue 33).
    "disq.persistence.event_log",
    # The IO layer (issue 33): the runtime's flush, the peer links and their job lane, the
    # RESP and beanstalk TCP protocols. Their asyncio.Protocol subclasses stay Python classes
    # (mypyc_attr native_class=False: a native class cannot inherit one) with compiled
    # methods; the rest are native classes.
    "disq.server.clock",
    "disq.server.router",
    "disq.server.frame_bound",
    "disq.server.peer_wire",
    "disq.server.job_lane",
    "disq.server.peer_conn",
    "disq.server.peer_link",
    "disq.server.flow",
    "disq.server.resp_tcp",
    "disq.server.beanstalk_tcp",
    "disq.server.runtime",
    # What the runtime's flush feeds every event of an add to (issue 33, REPLICATE 1).
    "disq.server.event_metrics",
)
# mypyc's group: one shared library holds the modules' code, ``disq__mypyc.<ext>`` beside the
# package directory (mypyc derives the compiled packages' __path__ from where it sits, so it
# cannot live inside the package); each module's own extension is a shim importing it.
GROUP_NAME = "disq"
LIB_NAME = f"{GROUP_NAME}__mypyc"
MANIFEST = "_native_build.json"  # {module: sha256 of the .py compiled}, beside this file

_ROOT = os.path.dirname(os.path.abspath(__file__))  # the disq package directory
_EXT = importlib.machinery.EXTENSION_SUFFIXES[0]

COMPILED_IN_USE = False
STATE = "pure"  # "compiled", "pure" (nothing built), "disabled" (DISQ_PURE), "stale"
REASON = ""
_MODULES: dict[str, str] = {}  # module -> its .py, for every listed module


def compiled_sources(root: str) -> dict[str, str]:
    """module name -> path of its .py under ``root`` (the directory holding ``disq``)."""
    out: dict[str, str] = {}
    for pkg in COMPILED_PACKAGES:
        base = os.path.join(root, *pkg.split("."))
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = os.path.relpath(dirpath, root).replace(os.sep, ".")
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    name = rel if fn == "__init__.py" else f"{rel}.{fn[:-3]}"
                    out[name] = os.path.join(dirpath, fn)
    for mod in COMPILED_SINGLE:
        out[mod] = os.path.join(root, *mod.split(".")) + ".py"
    return out


def _lib_path() -> str:
    return os.path.join(os.path.dirname(_ROOT), LIB_NAME + _EXT)


def _ext_path(py: str) -> str:
    return py[:-3] + _EXT


def source_digest(path: str) -> str:
    """The digest the manifest keeps of a compiled module's .py: CRC-32 and size."""
    import zlib

    with open(path, "rb") as f:
        data = f.read()
    return f"{zlib.crc32(data):08x}-{len(data)}"


def _stale(modules: dict[str, str]) -> tuple[list[str], int]:
    """(modules with no extension or a .py other than the one compiled, extensions found)."""
    stale: list[str] = [] if os.path.exists(_lib_path()) else [LIB_NAME]
    found = 0
    manifest: dict[str, str] = {}
    for mod, py in modules.items():
        if not os.path.exists(_ext_path(py)):
            stale.append(mod)
            continue
        found += 1
        if not manifest:
            manifest = _read_manifest()
        if manifest.get(mod) != source_digest(py):
            stale.append(mod)
    return stale, found


def _read_manifest() -> dict[str, str]:
    """The build's manifest, as setup.py writes it (``json.dump(indent=0)`` of strings: one
    ``"module": "digest",`` a line), read without importing json or ast: this runs before
    disq-node binds its port, which beanstalkd harnesses connect to 0.1 s after spawning
    it. Anything else, or an unreadable file: every module is stale."""
    try:
        with open(os.path.join(_ROOT, MANIFEST)) as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError):
        return {"": ""}
    out: dict[str, str] = {}
    body = [ln for ln in lines if ln.strip()]
    if len(body) < 2 or body[0] != "{" or body[-1] != "}":
        return {"": ""}
    for ln in body[1:-1]:
        parts = ln.rstrip(",").split('"')
        # '"mod": "digest"' -> ['', 'mod', ': ', 'digest', '']; no escapes in either
        if len(parts) != 5 or parts[0] or parts[2] != ": " or parts[4] or "\\" in ln:
            return {"": ""}
        out[parts[1]] = parts[3]
    return out or {"": ""}


class _LibFinder:
    """Finds the group's shared library where the build put it: beside the package, which
    is on sys.path for an installed package but not always for an editable one."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != LIB_NAME:
            return None
        return importlib.util.spec_from_file_location(fullname, _lib_path())


class _SourceFinder:
    """Loads the listed modules from their .py (the compiled build is stale or disabled)."""

    def __init__(self, modules: dict[str, str]) -> None:
        self.modules = modules

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        py = self.modules.get(fullname)
        if py is None:
            return None
        search = [os.path.dirname(py)] if py.endswith("__init__.py") else None
        return importlib.util.spec_from_file_location(
            fullname, py, submodule_search_locations=search
        )


def _decide() -> None:
    global COMPILED_IN_USE, STATE, REASON
    _MODULES.update(compiled_sources(os.path.dirname(_ROOT)))
    if os.environ.get("DISQ_PURE", "") not in ("", "0"):
        STATE, REASON = "disabled", "DISQ_PURE is set"
    else:
        stale, found = _stale(_MODULES)
        if not stale:
            COMPILED_IN_USE, STATE = True, "compiled"
            if not any(isinstance(f, _LibFinder) for f in sys.meta_path):
                sys.meta_path.append(_LibFinder())
            return
        if found == 0:
            STATE, REASON = "pure", "no compiled modules were built"
            return  # nothing to shadow the sources
        STATE = "stale"
        more = ", ..." if len(stale) > 3 else ""
        REASON = (
            f"{len(stale)} of {len(_MODULES)} modules not built or edited since the build"
            f" ({', '.join(stale[:3])}{more})"
        )
        warnings.warn(
            f"disq: compiled modules not used, running the .py sources: {REASON}; "
            "rebuild them (make build, or pip install again)",
            RuntimeWarning,
            stacklevel=3,
        )
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder(dict(_MODULES)))


def compiled_modules() -> list[str]:
    """The modules running compiled now (imported or not yet)."""
    return sorted(_MODULES) if COMPILED_IN_USE else []


def describe() -> str:
    """One line for logs: what runs."""
    if COMPILED_IN_USE:
        return f"compiled (mypyc): {len(_MODULES)} modules"
    return f"pure Python ({STATE}{': ' + REASON if REASON else ''})"


if __name__ == "disq._native":  # not when setup.py reads the list (runpy)
    _decide()
