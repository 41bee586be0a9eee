"""Topic patterns as kombu's virtual transport matches them (kombu/transport/virtual/
exchange.py, TopicExchange.key_to_pattern), without ``re``.

kombu splits a binding key on ".", turns a word that is exactly ``*`` into ``[^.]+`` (one
word, never empty) and a word that is exactly ``#`` into ``.*?`` (any text, dots included,
empty included), keeps every other word literal and joins the words with literal dots; the
whole key must match. So ``a.#`` matches ``a.`` and ``a.b.c`` but not ``a`` (AMQP's ``#``
would also match ``a``: kombu's rule wins here, since kombu's producers and consumers are
who this serves), ``#.x`` matches ``b.x`` and ``.x`` but not ``x``, and ``#`` matches any
key. One difference, on purpose: kombu leaves ``*`` and ``#`` inside a longer word
unescaped, so in its regex ``a*`` is "zero or more a" and ``*a`` fails to compile; here a
word that is not exactly ``*`` or ``#`` is plain text.

A pattern compiles to tokens (literal runs, STAR, HASH); matching walks the set of reachable
positions in the key, token by token (no backtracking blow-up: a key is at most 1,000 bytes).
"""

from __future__ import annotations

from typing import Final

STAR: Final = 1
HASH: Final = 2
LITERAL: Final = 0

Token = tuple[int, str]


def compile_pattern(binding_key: str) -> list[Token]:
    tokens: list[Token] = []
    text = ""
    for i, word in enumerate(binding_key.split(".")):
        if i:
            text += "."
        if word == "*" or word == "#":
            if text:
                tokens.append((LITERAL, text))
                text = ""
            tokens.append((STAR if word == "*" else HASH, ""))
        else:
            text += word
    if text:
        tokens.append((LITERAL, text))
    return tokens


def matches(tokens: list[Token], key: str) -> bool:
    n = len(key)
    reach: list[int] = [0]
    for kind, text in tokens:
        if not reach:
            return False
        nxt: list[int] = []
        if kind == LITERAL:
            size = len(text)
            for pos in reach:
                if key.startswith(text, pos):
                    nxt.append(pos + size)
        elif kind == STAR:
            seen: set[int] = set()
            for pos in reach:
                end = pos
                while end < n and key[end] != ".":
                    end += 1
                    if end not in seen:
                        seen.add(end)
                        nxt.append(end)
            nxt.sort()
        else:  # HASH: anything from the first reachable position on
            nxt = list(range(reach[0], n + 1))
        reach = nxt
    return n in reach


def topic_matches(binding_key: str, routing_key: str) -> bool:
    return matches(compile_pattern(binding_key), routing_key)
