"""Build disq's hot modules into C extensions with mypyc (the rest of the metadata is in
pyproject.toml; setuptools stays the backend).

The list of compiled modules is ``disq/_native.py``'s (the one place it is kept). A pure
install instead, with one line saying why, when ``DISQ_PURE`` is set (not "" or "0"), when
no C compiler runs, or when Python's headers (Python.h) are missing. The pure install
behaves the same: mypyc compiles the same sources.

mypyc runs (type-checks and writes C) only for the commands that build: metadata queries
stay fast. The C is compiled in parallel (every core, or ``DISQ_BUILD_JOBS``);
``DISQ_MYPYC_OPT`` sets the optimisation level (3 unless told).
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = runpy.run_path(os.path.join(HERE, "disq", "_native.py"))
BUILD_DIR = os.path.join("build", "mypyc")  # the generated C (out of the package)
MANIFEST: dict[str, str] = {}  # module -> sha256 of the .py compiled
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def say(msg: str) -> None:
    sys.stderr.write(f"disq setup.py: {msg}\n")
    sys.stderr.flush()


def why_pure() -> str | None:
    """None when the C extensions can be built, else the reason they are not."""
    if os.environ.get("DISQ_PURE", "") not in ("", "0"):
        return "DISQ_PURE is set"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python headers ({include}/Python.h missing)"
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        return f"no C compiler ({cc[0]} not found)"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write("#include <Python.h>\nint main(void) { return 0; }\n")
        r = subprocess.run(
            [*cc, f"-I{include}", "-c", src, "-o", os.path.join(tmp, "t.o")],
            capture_output=True,
        )
        if r.returncode != 0:
            return f"the C compiler failed on a test file ({' '.join(cc)})"
    return None


class BuildExt(build_ext):
    """setuptools' build_ext, compiling in parallel, writing the manifest of compiled sources that
    disq/_native.py checks (a wheel's files get arbitrary times, so mtimes cannot tell)."""

    def build_extension(self, ext: Extension) -> None:
        # mypyc puts every module's C in one extension (the group's shared library) and
        # setuptools compiles an extension's sources one after the other: split them over
        # threads, one compiler process each.
        jobs = int(os.environ.get("DISQ_BUILD_JOBS", "0")) or os.cpu_count() or 1
        compile_one = self.compiler.compile

        def compile_parallel(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            if jobs < 2 or len(sources) < 2:
                return compile_one(sources, *args, **kwargs)
            chunks = [sources[i::jobs] for i in range(jobs)]
            with ThreadPoolExecutor(jobs) as pool:
                done = list(pool.map(lambda c: compile_one(c, *args, **kwargs), chunks))
            objects = [""] * len(sources)
            for i, objs in enumerate(done):
                objects[i::jobs] = objs
            return objects

        self.compiler.compile = compile_parallel  # type: ignore[method-assign]
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_one  # type: ignore[method-assign]

    def run(self) -> None:
        super().run()
        if not MANIFEST:
            return  # a pure build
        if self.inplace:
            remove_leftovers()
        outdir = HERE if self.inplace else self.build_lib
        with open(os.path.join(outdir, "disq", NATIVE["MANIFEST"]), "w") as f:
            json.dump(MANIFEST, f, indent=0, sort_keys=True)


# kombu's `disq` transport alias (disq_kombu_alias.py): this .pth, at the root of
# site-packages, imports the hook at interpreter start. Its one line, and its file name.
KOMBU_PTH = "disq-kombu.pth"
KOMBU_PTH_LINE = "import disq_kombu_alias\n"


class BuildPy(build_py):
    """build_py, plus the .pth at the root of the build (the wheel's root: site-packages)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            with open(os.path.join(self.build_lib, KOMBU_PTH), "w") as f:
                f.write(KOMBU_PTH_LINE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, KOMBU_PTH))
        return outputs


class _WithKombuPth:
    """An editable install's strategy (it writes the wheel's own .pth), writing ours too:
    an editable wheel holds no build_lib files, only what its strategy writes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __call__(self, wheel: Any, files: list[str], mapping: dict[str, str]) -> None:
        self._inner(wheel, files, mapping)
        wheel.writestr(KOMBU_PTH, KOMBU_PTH_LINE.encode())

    def __enter__(self) -> _WithKombuPth:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.__exit__(*exc)


class EditableWheel(editable_wheel):
    """``pip install -e``: the strategy setuptools picks, wrapped to add the .pth. It
    overrides a private method (setuptools has no hook for extra root files); if a release
    renames it, the editable install loses the alias and tests/unit/test_kombu_alias.py,
    which checks the running environment, fails."""

    def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
        return _WithKombuPth(super()._select_strategy(*args, **kwargs))


def remove_leftovers() -> None:
    """Delete the in-place extensions of modules no longer in the list: Python would import
    such a module's old extension instead of its .py, which the stale guard cannot see."""
    suffix = NATIVE["_EXT"]
    listed = {p[: -len(".py")] + suffix for p in NATIVE["compiled_sources"](HERE).values()}
    for dirpath, dirnames, filenames in os.walk(os.path.join(HERE, "disq")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in filenames:
            path = os.path.join(dirpath, fn)
            if fn.endswith(suffix) and path not in listed:
                os.remove(path)
                say(f"removed {os.path.relpath(path, HERE)}: no longer compiled")


def ext_modules() -> list[object]:
    if not BUILD_COMMANDS & set(sys.argv[1:]):
        return []  # metadata, sdist, clean: nothing to compile
    reason = why_pure()
    if reason is not None:
        say(f"pure Python install (no compiled modules): {reason}")
        return []
    from mypyc.build import mypycify

    sources = NATIVE["compiled_sources"](HERE)
    say(f"compiling {len(sources)} modules with mypyc")
    # The digests of the sources mypyc read: BuildExt writes them once the build succeeded.
    for mod, path in sources.items():
        MANIFEST[mod] = NATIVE["source_digest"](path)
    exts = mypycify(
        [os.path.relpath(p, HERE) for p in sources.values()],
        opt_level=os.environ.get("DISQ_MYPYC_OPT", "3"),
        multi_file=True,  # one C file per module: gcc runs in parallel, recompiles less
        group_name=NATIVE["GROUP_NAME"],
        target_dir=BUILD_DIR,
    )
    return exts


setup(
    ext_modules=ext_modules(),
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy, "editable_wheel": EditableWheel},
)
