"""C-compatible number parsing: Redis 3's ``getLongLongFromObject`` (``strtoll`` on the C
string: ``+5``, ``007`` and even the empty string are numbers, `` 5`` is not), ``strtoul``
for cursors (``-1`` wraps around) and ``strtod`` for DEBUG SLEEP."""

from __future__ import annotations

import re

_LLONG_MAX = (1 << 63) - 1
_ULONG_MAX = (1 << 64) - 1
_SIGNS = frozenset(b"+-")


def _c_number(s: bytes) -> tuple[bool, int] | None:
    """``strtol``'s view of ``s`` as Redis checks it: (negative, magnitude), or None.

    Redis reads arguments as C strings, so a NUL ends them. A leading blank is refused
    (Redis tests ``isspace(s[0])``), trailing junk too (``eptr[0] != '\\0'``); the empty
    string is a valid 0 (``strtoll("")`` consumes nothing and stops at the NUL).
    """
    nul = s.find(b"\0")
    if nul >= 0:
        s = s[:nul]
    if not s:
        return (False, 0)
    neg = False
    if s[0] in _SIGNS:
        neg = s[0] == 0x2D
        s = s[1:]
    if not s.isdigit():  # ASCII digits only; b"" (a lone sign) is not a number
        return None
    digits = s.lstrip(b"0")
    if len(digits) > 20:  # past any 64-bit value; also keeps int() away from huge strings
        return None
    return (neg, int(digits) if digits else 0)


def parse_ll(s: bytes) -> int | None:
    """``getLongLongFromObject``: a signed 64-bit integer, or None (ERANGE or junk)."""
    r = _c_number(s)
    if r is None:
        return None
    neg, mag = r
    if neg:
        return -mag if mag <= _LLONG_MAX + 1 else None
    return mag if mag <= _LLONG_MAX else None


def parse_cursor(s: bytes) -> int | None:
    """``strtoul`` as ``parseScanCursorOrReply`` uses it: ``-n`` wraps around modulo 2**64
    (C's unsigned negation), only a magnitude past 2**64-1 is out of range."""
    r = _c_number(s)
    if r is None:
        return None
    neg, mag = r
    if mag > _ULONG_MAX:
        return None
    return (-mag) & _ULONG_MAX if neg else mag


_STRTOD_PREFIX = re.compile(rb"[ \t\n\v\f\r]*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def parse_strtod(s: bytes) -> float:
    """``strtod`` without error checks, as DEBUG SLEEP uses it: the leading number, else 0."""
    m = _STRTOD_PREFIX.match(s)
    return float(m.group(1)) if m else 0.0
