"""Lexical helpers, as Redis's C has them: ``sdssplitargs`` (:func:`split_args`),
``sdscatrepr`` (:func:`quote_arg`), ``memtoll`` (:func:`parse_memory`),
``rewriteConfigFormatMemory`` (:func:`format_memory`), ``stringmatch`` (:func:`string_match`).
"""

from __future__ import annotations

import re

LLONG_MAX = (1 << 63) - 1
_SPACE = " \t\n\v\f\r"  # C isspace() in the C locale; str.isspace() would take Unicode spaces
_HEX = "0123456789abcdefABCDEF"
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a"}


def _encode(text: str) -> bytes:
    # surrogateescape: bytes that are not UTF-8 survive a read/parse/rewrite round trip.
    return text.encode("utf-8", "surrogateescape")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def split_args(line: str) -> list[str] | None:
    """Split ``line`` as Redis's ``sdssplitargs``; None when a quote is unbalanced.

    Double quotes take ``\\n \\r \\t \\b \\a \\xHH`` and ``\\<any>`` (the character itself);
    single quotes take only ``\\'``. A closing quote must be followed by a space or the end.
    A quote inside a bare word opens a quoted part of the same word (``a"b c"`` is ``ab c``).
    Arguments are built as bytes, as in C, so ``"\\xc3\\xa9"`` is ``é``.
    """
    args: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        current = bytearray()
        in_dq = in_sq = False
        while True:
            c = line[i] if i < n else ""
            nxt = line[i + 1] if i + 1 < n else ""
            if in_dq:
                if (
                    c == "\\"
                    and nxt == "x"
                    and i + 3 < n
                    and line[i + 2] in _HEX
                    and line[i + 3] in _HEX
                ):
                    current.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == "\\" and nxt:
                    i += 1
                    current += _encode(_ESCAPES.get(nxt, nxt))
                elif c == '"':
                    if nxt and nxt not in _SPACE:
                        return None  # closing quote must be followed by a space or nothing
                    i += 1
                    break
                elif not c:
                    return None  # unterminated quotes
                else:
                    current += _encode(c)
            elif in_sq:
                if c == "\\" and nxt == "'":
                    i += 1
                    current += b"'"
                elif c == "'":
                    if nxt and nxt not in _SPACE:
                        return None
                    i += 1
                    break
                elif not c:
                    return None
                else:
                    current += _encode(c)
            elif c in ("", " ", "\n", "\r", "\t"):
                # Only these end a bare word (sdssplitargs' switch), not \v or \f.
                break
            elif c == '"':
                in_dq = True
            elif c == "'":
                in_sq = True
            else:
                current += _encode(c)
            i += 1
        args.append(_decode(bytes(current)))


def quote_arg(value: str) -> str:
    """Quote ``value`` as Redis's ``sdscatrepr``: always double-quoted, bytes escaped.

    :func:`split_args` reads the result back to ``value``.
    """
    out = ['"']
    for byte in _encode(value):
        ch = chr(byte)
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\a":
            out.append("\\a")
        elif ch == "\b":
            out.append("\\b")
        elif 0x20 <= byte <= 0x7E:
            out.append(ch)
        else:
            out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)


_MEMORY_RE = re.compile(r"(-?[0-9]+)([A-Za-z]*)")
_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000 * 1000,
    "mb": 1024 * 1024,
    "g": 1000 * 1000 * 1000,
    "gb": 1024 * 1024 * 1024,
}


def parse_memory(text: str) -> int | None:
    """Redis's ``memtoll``, strictly: ``1k`` = 1000, ``1kb`` = 1024 (m/mb, g/gb alike), units
    case-insensitive. None when ``text`` is not such a value (Redis would read garbage as 0)."""
    m = _MEMORY_RE.fullmatch(text)
    if m is None:
        return None
    mul = _MEMORY_UNITS.get(m.group(2).lower())
    if mul is None:
        return None
    value = int(m.group(1)) * mul
    if not -LLONG_MAX - 1 <= value <= LLONG_MAX:
        return None
    return value


def format_memory(n: int) -> str:
    """Redis's ``rewriteConfigFormatMemory``: the largest exact gb/mb/kb unit, else bytes."""
    for unit, size in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def string_match(pattern: str, string: str, nocase: bool = True) -> bool:
    """Redis's ``stringmatchlen`` glob: ``*``, ``?``, ``[abc]``, ``[^a-z]``, ``\\x``."""
    return _match(pattern, 0, string, 0, nocase)


def _eq(a: str, b: str, nocase: bool) -> bool:
    return a.lower() == b.lower() if nocase else a == b


def _match(p: str, pi: int, s: str, si: int, nocase: bool) -> bool:
    plen, slen = len(p), len(s)
    while pi < plen and si < slen:
        c = p[pi]
        if c == "*":
            while pi + 1 < plen and p[pi + 1] == "*":
                pi += 1
            if pi + 1 == plen:
                return True
            while si < slen:
                if _match(p, pi + 1, s, si, nocase):
                    return True
                si += 1
            return False
        if c == "?":
            si += 1
        elif c == "[":
            pi += 1
            negate = pi < plen and p[pi] == "^"
            if negate:
                pi += 1
            matched = False
            while True:
                if pi >= plen:
                    pi -= 1  # unterminated class: Redis steps back so the outer ++ ends it
                    break
                if p[pi] == "\\" and pi + 1 < plen:
                    pi += 1
                    if p[pi] == s[si]:
                        matched = True
                elif p[pi] == "]":
                    break
                elif pi + 2 < plen and p[pi + 1] == "-":
                    start, end, ch = p[pi], p[pi + 2], s[si]
                    if start > end:
                        start, end = end, start
                    if nocase:
                        start, end, ch = start.lower(), end.lower(), ch.lower()
                    pi += 2
                    if start <= ch <= end:
                        matched = True
                elif _eq(p[pi], s[si], nocase):
                    matched = True
                pi += 1
            if negate:
                matched = not matched
            if not matched:
                return False
            si += 1
        else:
            if c == "\\" and pi + 1 < plen:
                pi += 1
            if not _eq(p[pi], s[si], nocase):
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == "*":
                pi += 1
            break
    return pi == plen and si == slen
