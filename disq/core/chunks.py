"""Cutting a whole-table sync into messages of bounded size (the routes table's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def chunked(items: Iterable[T], size_of: Callable[[T], int], limit: int) -> list[list[T]]:
    """``items`` in order, in chunks that each end with the item that brings their size
    (``size_of`` summed) to ``limit`` or past it; then the rest, possibly empty, which is
    the last message of the sync (the one that says so)."""
    chunks: list[list[T]] = []
    chunk: list[T] = []
    size = 0
    for item in items:
        chunk.append(item)
        size += size_of(item)
        if size >= limit:
            chunks.append(chunk)
            chunk, size = [], 0
    chunks.append(chunk)
    return chunks
