"""Prompt parsing: what the fake reads out of an explanation prompt (layout of ``explainers/prompt.py``)."""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass

_HISTORY_LINE = re.compile(r"^\s*\d+\.\s+(.*\S)\s*$")
_ITEM = re.compile(r'the item "([^"\n]*)"')
_FEATURES = re.compile(r"with features (.*?) is recommended", re.DOTALL)
_CATEGORY = re.compile(r"category:\s*([^;\n]+)")
_RATING = re.compile(r"rating:\s*([^;\n]+)")
_MISSING = {"", "unknown", "none", "n/a"}


@dataclass(frozen=True)
class HistoryEntry:
    """What the fake reads from one numbered history line (``None`` where unknown)."""

    title: str | None
    category: str | None
    rating: float | None


@dataclass(frozen=True)
class ParsedPrompt:
    """The parts of an explanation prompt the reply model uses."""

    history: tuple[HistoryEntry, ...]
    history_block: str  # the history lines joined with "\n" (the whole prompt when there are none)
    item: str
    features: str

    def feature_pairs(self) -> list[tuple[str, str]]:
        """``category: X; brand: Y`` as ``[("category", "X"), ("brand", "Y")]``, unknown values dropped."""
        pairs = []
        for part in self.features.split(";"):
            key, sep, value = part.partition(":")
            if sep and _known(value) and key.strip():
                pairs.append((key.strip(), value.strip()))
        return pairs


def _known(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in _MISSING else text


def _parse_history_line(text: str) -> HistoryEntry:
    cut = len(text)
    for marker in (" (id ", " — "):
        pos = text.find(marker)
        if pos != -1:
            cut = min(cut, pos)
    category = _CATEGORY.search(text)
    rating_match = _RATING.search(text)
    rating = None
    if rating_match and _known(rating_match.group(1)):
        with contextlib.suppress(ValueError):
            rating = float(rating_match.group(1).strip())
    return HistoryEntry(
        title=_known(text[:cut]),
        category=_known(category.group(1)) if category else None,
        rating=rating if rating is not None and math.isfinite(rating) else None,
    )


def parse_prompt(prompt: str) -> ParsedPrompt:
    """Read history lines, item and features out of an explanation prompt (never fails)."""
    lines = [m.group(1) for m in map(_HISTORY_LINE.match, prompt.splitlines()) if m]
    item = _ITEM.search(prompt)
    features = _FEATURES.search(prompt)
    block = "\n".join(line.strip() for line in prompt.splitlines() if _HISTORY_LINE.match(line))
    return ParsedPrompt(
        history=tuple(_parse_history_line(line) for line in lines),
        history_block=block or prompt,
        item=item.group(1).strip() if item else "",
        features=features.group(1).strip() if features else "",
    )
