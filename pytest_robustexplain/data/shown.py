"""How a case reads in a model's prompt: each value, date and history line as text, the numbered history,
the item's name and features. The explainers' prompt (``explainers/prompt.py``) and the faithfulness judge's
(``checks/judge/prompt.py``) show a case alike, so the judge sees the history exactly as the explainer did."""

from __future__ import annotations

import functools
from datetime import datetime, timezone
from typing import Any

from .records import Interaction, Item, UserHistory

UNKNOWN = "unknown"


def format_value(value: Any) -> str:
    """One feature or field value as prompt text: lists joined with ", ", whole floats without ".0"."""
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if isinstance(value, (set, frozenset)):
        # Sets have no order of their own; sort them so the prompt (and the cache key) is stable.
        return ", ".join(sorted(format_value(v) for v in value)) or UNKNOWN
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value) or UNKNOWN
    text = str(value).strip()
    return text or UNKNOWN


@functools.lru_cache(maxsize=8192)
def format_date(timestamp: int | None) -> str:
    """``YYYY-MM-DD`` (UTC) for an epoch-seconds timestamp, ``unknown`` when missing. Cached: a user's
    history is rendered again for each of their pairs, on the sweep's loop, between the model's calls."""
    if timestamp is None:
        return UNKNOWN
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d")


def format_interaction(index: int, interaction: Interaction) -> str:
    """One numbered history line; the id is always appended so the model can tell items apart."""
    title = format_value(interaction.title)
    return (
        f"{index}. {title} (id {interaction.item_id}) — category: {format_value(interaction.category)}; "
        f"rating: {format_value(interaction.rating)}; date: {format_date(interaction.timestamp)}"
    )


def format_history(history: UserHistory) -> str:
    """The numbered interaction list, oldest first (the order the history holds)."""
    if not history.interactions:
        return "(no interactions)"
    return "\n".join(format_interaction(i, it) for i, it in enumerate(history.interactions, start=1))


def format_features(item: Item) -> str:
    """``category: X; key: value; ...`` — category first, then the features in sorted key order."""
    parts = [f"category: {format_value(item.category)}"]
    parts.extend(f"{key}: {format_value(item.features[key])}" for key in sorted(item.features))
    return "; ".join(parts)


def item_name(item: Item) -> str:
    """The item as the prompt names it: its title, or its id when the title is missing."""
    title = (item.title or "").strip()
    return title or item.item_id
