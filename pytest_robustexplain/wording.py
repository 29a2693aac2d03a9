"""How every message counts things: "1 user", "3 users", "1 reply", "2 replies" — one rule, so no writer
says "1 users" or grows its own copy of it (there were four private helpers and eleven inline spellings)."""

from __future__ import annotations


def noun(count: int, word: str, plural: str | None = None) -> str:
    """``word`` for one, else ``plural`` (``word`` + "s" unless given: "reply" needs "replies")."""
    return word if count == 1 else plural or f"{word}s"


def count_noun(count: int, word: str, plural: str | None = None) -> str:
    """``"3 users"``: the count and its :func:`noun`."""
    return f"{count} {noun(count, word, plural)}"
