"""Registers kombu's ``disq`` transport alias when ``kombu.transport`` is first imported.

kombu finds transports in a plain dict, ``kombu.transport.TRANSPORT_ALIASES``, and has no
entry-point group for them (kombu 5.x; Celery hands ``broker_url`` to kombu as it is). So
``disq-kombu.pth``, which installing disq-server puts in site-packages, runs
``import disq_kombu_alias`` at interpreter start, and this module puts a finder first on
``sys.meta_path`` that waits for ``kombu.transport``: when that module has executed, the
alias is added and the finder removes itself. ``disq://`` URLs then work in
``kombu.Connection`` and Celery's ``broker_url`` with no import in the app.

What it costs a Python start that never imports kombu (a disq node, any tool of the
environment): this module, importing nothing that a start has not loaded already (not even
``typing``: annotations are plain ``object``), and one string comparison per later import.
kombu itself is never imported here.
"""

import sys

ALIAS = "disq"
TARGET = "disq.integrations.kombu_transport:Transport"
_WATCHED = "kombu.transport"


def register(module: object) -> None:
    """Add the alias to a loaded ``kombu.transport`` (an alias already set is kept)."""
    aliases = module.__dict__["TRANSPORT_ALIASES"]
    aliases.setdefault(ALIAS, TARGET)


class _Loader:
    """kombu.transport's own loader, then the alias."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def create_module(self, spec: object) -> object:
        return getattr(self._inner, "create_module")(spec)  # noqa: B009

    def exec_module(self, module: object) -> None:
        getattr(self._inner, "exec_module")(module)  # noqa: B009
        register(module)

    def __getattr__(self, name: str) -> object:  # is_package, get_resource_reader...
        return getattr(self._inner, name)


class _Finder:
    """A meta path finder that finds nothing itself: for ``kombu.transport`` it asks the
    finders after it and wraps the loader of the spec they give."""

    @classmethod
    def find_spec(cls, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != _WATCHED:
            return None
        uninstall()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is None:
                continue
            loader = getattr(spec, "loader", None)
            if loader is not None and hasattr(loader, "exec_module"):
                spec.loader = _Loader(loader)
            return spec
        return None


def install() -> None:
    """Register now if kombu.transport is loaded, else when it is."""
    loaded = sys.modules.get(_WATCHED)
    if loaded is not None:
        register(loaded)
    elif _Finder not in sys.meta_path:  # type: ignore[comparison-overlap]
        sys.meta_path.insert(0, _Finder)  # type: ignore[arg-type]


def uninstall() -> None:
    while _Finder in sys.meta_path:  # type: ignore[comparison-overlap]
        sys.meta_path.remove(_Finder)  # type: ignore[arg-type]


install()
