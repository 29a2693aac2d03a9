"""How every message counts things: "1 user", "3 users", "1 reply", "2 replies" — one rule, so no writer
says "1 users" or grows its own copy of it (there were four private helpers and eleven inline spellings);
and how every report section writes a number, an interval and outside text, the checks' own sections
(``checks/``) and the writers (``report/``) alike."""

from __future__ import annotations

import math
from typing import Protocol

from .sanitize import visible


class _Interval(Protocol):  # results.Interval, which imports this module
    @property
    def mean(self) -> float: ...

    def fmt(self, digits: int = 3) -> str: ...


def noun(count: int, word: str, plural: str | None = None) -> str:
    """``word`` for one, else ``plural`` (``word`` + "s" unless given: "reply" needs "replies")."""
    return word if count == 1 else plural or f"{word}s"


def count_noun(count: int, word: str, plural: str | None = None) -> str:
    """``"3 users"``: the count and its :func:`noun`."""
    return f"{count} {noun(count, word, plural)}"


def fmt_interval(iv: _Interval | None, digits: int = 3) -> str:
    """``0.513 [0.497, 0.529]``; ``n/a`` when nothing was measured."""
    if iv is None or math.isnan(iv.mean):
        return "n/a"
    return iv.fmt(digits)


def fmt_mean(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def fmt_pct(value: float | None, digits: int = 1) -> str:
    """``−1.7 %`` with a real minus sign; ``n/a`` when undefined."""
    if value is None or math.isnan(value):
        return "n/a"
    sign = "−" if value < 0 else "+"
    return f"{sign}{abs(value):.{digits}f} %"


def fmt_p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_d(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}"


def trim(text: str, limit: int = 200) -> str:
    """Whitespace collapsed, control and bidi characters shown (outside text: :func:`sanitize.visible`), and
    cut at a word boundary near ``limit`` characters, with an ellipsis."""
    flat = visible(" ".join(text.split()))
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
    return cut + "…"


def percent(k: int, n: int) -> str:
    """``25 %`` of ``k`` out of ``n``; ``—`` of none."""
    return f"{100 * k / n:.0f} %" if n else "—"
