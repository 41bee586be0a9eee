"""disq: a replicated task queue that speaks beanstalkd and Disque.

``disq.Worker``, ``disq.Client`` and ``disq.AsyncClient`` are imported on first use, so
``import disq`` (the node, the Spark source) does not load gRPC's client side.
"""

from __future__ import annotations

# First: decides whether the compiled (mypyc) modules may load, before any of them is imported.
from disq import _native  # noqa: F401

# typing.TYPE_CHECKING without importing typing (mypy reads any TYPE_CHECKING as true): this
# package is imported before disq-node binds its port (disq/node_main.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Worker": "disq.worker",
    "Client": "disq.client",
    "AsyncClient": "disq.client",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'disq' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
