"""Formatting shared by every report writer, so the formats never disagree: intervals, means, percentages,
p-values, trimmed outside text, what a perturbation changed, timings, and JSON-native values."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from typing import Any

from ..results import Interval, PairResult
from ..wording import count_noun, fmt_d, fmt_interval, fmt_mean, fmt_p, fmt_pct, trim

# fmt_* and trim live in wording.py, below the checks that word their report sections with them; handed on
# here, where every writer has always imported them.
__all__ = ["count_noun", "describe_changes", "explanation_text", "finite", "finite_dict", "fmt_d",
           "fmt_interval", "fmt_mean", "fmt_p", "fmt_pct", "interval_dict", "timings_text", "trim", "wrap"]


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


def wrap(text: str, width: int, *, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width``, never splitting a word or "Holm-corrected" / "L1-L5" at the
    hyphen (the terminal report and the paper tables alike)."""
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False,
                         initial_indent=initial_indent, subsequent_indent=subsequent_indent)
