"""What every part of the HTML page shares: :func:`e`, the one escape of outside text in markup, the
length an explanation is cut to, and the gate colour scale that the kind × severity table (:func:`_shade`)
and the heatmap chart (:func:`_gate_position`) both read.
"""

from __future__ import annotations

import html
from typing import Any

# Characters of each explanation the page shows: in the worst-pairs table and in the all-pairs table's JSON
# (the JSON report keeps them whole).
EXPLANATION_LIMIT = 2000


def e(value: Any) -> str:
    """HTML-escape any value (quotes included, so it is safe in attributes too)."""
    return html.escape(str(value), quote=True)


_DARK_RED, _RED, _YELLOW, _GREEN = (165, 0, 38), (248, 105, 107), (255, 235, 132), (99, 190, 123)
# The gate's colour scale, by position (gate_position): every cell below the gate is a red, darker the
# further below (a failing 0.31 under a 0.5 gate was orange before); the gate itself is yellow; above it,
# yellow to green. The kind × severity table and the heatmap chart read the same stops.
GATE_STOPS: tuple[tuple[float, tuple[int, int, int]], ...] = (
    (0.0, _DARK_RED), (0.4999, _RED), (0.5, _YELLOW), (1.0, _GREEN))


def gate_shade(value: float, gate: float) -> str:
    """Diverging at the gate on the fixed scale 0–1: red below it, yellow at it, green above it.

    Anchored to the gate, not to the run's range, so one colour means the same in every run: a cell
    above the gate is never red, however close the run's other cells are, and one below it is never
    anything but red.
    """
    u = gate_position(value, gate)
    start, end, u = (_DARK_RED, _RED, u * 2) if u < 0.5 else (_YELLOW, _GREEN, u * 2 - 1)
    red, green, blue = (round(a + (b - a) * u) for a, b in zip(start, end, strict=True))
    return f"rgb({red},{green},{blue})"


def gate_position(value: float, gate: float) -> float:
    """Where ``value`` sits on a 0–1 scale whose middle (0.5) is the gate: [0, gate] → [0, 0.5],
    [gate, 1] → [0.5, 1] (a gate of 0 or 1 leaves one half unused)."""
    value = min(1.0, max(0.0, value))
    if value < gate:
        return 0.5 * value / gate
    return 1.0 if gate >= 1 else 0.5 + 0.5 * (value - gate) / (1 - gate)
