"""The one line that says what a perturbation changed ("inserted 2 random items … at positions 3, 7"), read
from its change record's keys, so that a custom perturbation reusing the keys reads as well as a built-in."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..wording import count_noun


def _positions_text(positions: Sequence[int], limit: int = 8) -> str:
    """``"position 3"`` or ``"positions 2, 7, …"``: long lists are cut so the summary stays one line."""
    shown = ", ".join(str(p) for p in positions[:limit])
    extra = len(positions) - limit
    listed = f"{shown}, … (+{extra} more)" if extra > 0 else shown
    return f"position {listed}" if len(positions) == 1 else f"positions {listed}"


def describe(kind: str, severity: int, changes: dict[str, Any], *, random_items: bool = False) -> str:
    """A perturbation's one-line description from its change record (the reports show it beside a pair);
    ``random_items``: the inserted items were drawn at random (noise injection)."""
    try:
        return _describe_known(changes, random_items)
    except (KeyError, TypeError, ValueError, AttributeError):
        # A custom perturbation used a known key with another layout: show its raw changes instead.
        pass
    raw = json.dumps(changes, sort_keys=True)
    return f"{kind} L{severity}: {raw if len(raw) <= 120 else raw[:119] + '…'}"


def _describe_known(changes: dict[str, Any], random_items: bool) -> str:
    # Built on the change keys rather than the kind, so custom perturbations that reuse the keys read well.
    categories = ", ".join(str(c) for c in changes.get("categories", []))
    if "inserted" in changes:
        entries = changes["inserted"]
        what = count_noun(len(entries), "random item" if random_items else "item")
        source = f" from least-engaged categories {categories}" if categories else ""
        return f"inserted {what}{source} at {_positions_text([e['position'] for e in entries])}"
    if "moved" in changes:
        moved = changes["moved"]
        if not moved:
            return "moved no items"
        positions = sorted(int(src) for src, _ in moved)
        return (f"moved {count_noun(len(moved), 'item')} among {_positions_text(positions)} "
                "(timestamps kept in place)")
    if "replaced" in changes:
        entries = changes["replaced"]
        source = f" with items from {categories}" if categories else ""
        what = "the most recent item" if len(entries) == 1 else f"the {len(entries)} most recent items"
        return f"replaced {what} ({_positions_text([e['position'] for e in entries])}){source}"
    if "blanked" in changes:
        entries = changes["blanked"]
        if not entries:
            return "blanked no fields (none was present)"
        per_field = Counter(e["field"] for e in entries)
        detail = ", ".join(f"{count} {name}" for name, count in sorted(per_field.items()))
        positions = sorted({e["position"] for e in entries})
        return f"blanked {count_noun(len(entries), 'field')} ({detail}) at {_positions_text(positions)}"
    if "flipped" in changes:
        entries = changes["flipped"]
        if not entries:
            return "flipped no ratings (no rated interaction with a category)"
        return (f"inverted {count_noun(len(entries), 'rating')} of {changes['category']} "
                f"({100 * float(changes['share']):.0f} % of its rated interactions) at "
                f"{_positions_text([e['position'] for e in entries])}")
    raise KeyError("no known change key")
