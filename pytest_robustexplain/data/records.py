"""The records: interactions, items, user histories, catalogs, evaluation cases and datasets.

Timestamps are integer seconds since the Unix epoch (UTC). Every field of an interaction but the item id
may be missing (``None``), because real histories have gaps and the ``missing_values`` perturbation
creates more of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A read-only view keeps the dataclasses effectively immutable without copying on every access.
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Interaction:
    """One thing a user did with one item."""

    item_id: str
    category: str | None = None
    timestamp: int | None = None
    rating: float | None = None
    title: str | None = None
    features: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", _frozen(self.features))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"item_id": self.item_id}
        for name in ("category", "timestamp", "rating", "title"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.features:
            out["features"] = dict(self.features)
        return out


@dataclass(frozen=True)
class Item:
    """A catalog item: what can be recommended."""

    item_id: str
    title: str | None = None
    category: str | None = None
    features: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", _frozen(self.features))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"item_id": self.item_id}
        if self.title is not None:
            out["title"] = self.title
        if self.category is not None:
            out["category"] = self.category
        if self.features:
            out["features"] = dict(self.features)
        return out

    def as_interaction(self, *, timestamp: int | None = None, rating: float | None = None) -> Interaction:
        """An interaction with this item, carrying the item's metadata."""
        return Interaction(item_id=self.item_id, category=self.category, timestamp=timestamp,
                           rating=rating, title=self.title, features=self.features)


@dataclass(frozen=True)
class UserHistory:
    """A user's interactions, oldest first (the order the model sees)."""

    user_id: str
    interactions: tuple[Interaction, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "interactions", tuple(self.interactions))

    def __len__(self) -> int:
        return len(self.interactions)

    def __iter__(self) -> Iterator[Interaction]:
        return iter(self.interactions)

    @property
    def item_ids(self) -> tuple[str, ...]:
        return tuple(i.item_id for i in self.interactions)

    def to_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "interactions": self.to_dicts()}

    def to_dicts(self) -> list[dict[str, Any]]:
        """The interactions as plain dicts, oldest first — the shape of the Python API and of the method's
        own examples (``item_id``, and ``category``, ``timestamp``, ``rating``, ``title``, ``features`` when
        known)."""
        return [i.to_dict() for i in self.interactions]


class Catalog(Mapping[str, Item]):
    """All items, by id, in a stable order (the order they were given)."""

    def __init__(self, items: Iterable[Item]) -> None:
        self._items: dict[str, Item] = {}
        for item in items:
            self._items[item.item_id] = item

    def __getitem__(self, item_id: str) -> Item:
        return self._items[item_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Catalog({len(self)} items)"

    @property
    def items_list(self) -> tuple[Item, ...]:
        return tuple(self._items.values())

    @property
    def categories(self) -> tuple[str, ...]:
        """Distinct categories, sorted, so that seeded draws from them are reproducible."""
        return tuple(sorted({i.category for i in self._items.values() if i.category is not None}))

    def by_category(self, category: str) -> tuple[Item, ...]:
        return tuple(i for i in self._items.values() if i.category == category)


@dataclass(frozen=True)
class EvalCase:
    """A user history and the item recommended to that user: one unit of evaluation."""

    history: UserHistory
    item: Item

    @property
    def user_id(self) -> str:
        return self.history.user_id

    @property
    def item_id(self) -> str:
        return self.item.item_id


@dataclass(frozen=True)
class Dataset:
    """A catalog, every user's history and the evaluation cases drawn from them."""

    catalog: Catalog
    histories: Mapping[str, UserHistory]
    cases: tuple[EvalCase, ...]
    name: str = "dataset"
