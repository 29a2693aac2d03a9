"""Formatting shared by every report writer, so the formats never disagree: intervals, means, percentages,
p-values, trimmed outside text, what a perturbation changed, timings, and JSON-native values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..results import Interval, PairResult
from ..sanitize import visible
from ..wording import count_noun


def fmt_interval(iv: Interval | None, digits: int = 3) -> str:
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


def explanation_text(pair: PairResult, which: str, limit: int | None = 200) -> str:
    """The original or perturbed explanation for display; a failed generation says so instead."""
    text = pair.original if which == "original" else pair.perturbed
    if not text.strip() and pair.failure:
        return f"(generation failed: {pair.failure})"
    return trim(text, limit) if limit else text


def describe_changes(changes: dict[str, Any], limit: int = 160) -> str:
    """What the perturbation changed, in one line, for the built-in change records and any other."""
    parts = []
    rest = dict(changes)
    categories = rest.pop("categories", None)
    for key, verb in (("inserted", "inserted"), ("replaced", "replaced"), ("blanked", "blanked")):
        entries = rest.pop(key, None)
        if isinstance(entries, list):
            noun = "field" if key == "blanked" else "item"
            parts.append(f"{verb} {count_noun(len(entries), noun)} "
                         f"at positions {_positions(entries)}")
    moved = rest.pop("moved", None)
    if isinstance(moved, list):
        parts.append(f"moved {len(moved)} items")
    if categories:
        parts.append("categories " + ", ".join(str(c) for c in categories))
    for key, value in rest.items():
        parts.append(f"{key}: {_short(value)}")
    return trim("; ".join(parts), limit) if parts else "(nothing recorded)"


def _positions(entries: list[Any]) -> str:
    positions = sorted({str(e["position"]) for e in entries if isinstance(e, dict) and "position" in e},
                       key=lambda p: (len(p), p))  # numeric order for integer positions
    if not positions:
        return "?"
    return ", ".join(positions[:8]) + (", …" if len(positions) > 8 else "")


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        head = ", ".join(str(v) for v in value[:6])
        return head + (f", … ({len(value)} in all)" if len(value) > 6 else "")
    return str(value)


# Internal timing keys (``wall_s``) as a person reads them.
_TIMING_LABELS = {"wall_s": "wall", "cpu_s": "CPU"}


def timings_text(timings: Mapping[str, float]) -> str:
    """``2.4 s wall · 1.9 s CPU``: the run's timings without their record keys."""
    def label(key: str) -> str:
        return _TIMING_LABELS.get(key, key.removesuffix("_s").replace("_", " "))

    return " · ".join(f"{value:.1f} s {label(key)}" for key, value in timings.items())


def finite(value: float | None) -> float | None:
    """None for NaN/inf: JSON has no such numbers."""
    return value if value is not None and math.isfinite(value) else None


def finite_dict(data: dict[str, Any]) -> dict[str, Any]:
    return {k: finite(v) if isinstance(v, float) else v for k, v in data.items()}


def interval_dict(iv: Interval) -> dict[str, Any]:
    return finite_dict(iv.to_dict())
