"""The records: interactions, items, user histories, catalogs, evaluation cases and datasets.

Timestamps are integer seconds since the Unix epoch (UTC). Every field of an interaction but the item id
may be missing (``None``), because real histories have gaps and the ``missing_values`` perturbation
creates more of them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, overload

# The features of every record that has none: one read-only view, shared (nothing can change it). Planning
# makes millions of interactions; two containers each that the garbage collector walks made its passes over
# a large dry run a third of its time.
_NO_FEATURES: Mapping[str, Any] = MappingProxyType({})


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A read-only view keeps the dataclasses effectively immutable without copying on every access.
    return MappingProxyType(dict(mapping)) if mapping else _NO_FEATURES


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
        """An interaction with this item, carrying the item's metadata. Its features are the item's own
        read-only view, shared: nothing can change them (the view's mapping is a copy only the item
        holds), and a copy for each of a MovieLens history's interactions was a third of its memory."""
        interaction = Interaction(item_id=self.item_id, category=self.category, timestamp=timestamp,
                                  rating=rating, title=self.title)
        object.__setattr__(interaction, "features", self.features)
        return interaction


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

    @property
    def diversity(self) -> float:
        """How varied the interactions are: the effective number of categories, exp of the Shannon entropy
        of the category shares (Hill's number of order 1) — 1.0 when every interaction is in one category,
        k when k categories are equally frequent, less when a few dominate. Interactions without a category
        count as one category of their own; an empty history is 0."""
        counts = Counter(i.category for i in self.interactions)
        n = len(self.interactions)
        return math.exp(-math.fsum(c / n * math.log(c / n) for c in counts.values())) if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "interactions": self.to_dicts()}

    def to_dicts(self) -> list[dict[str, Any]]:
        """The interactions as plain dicts, oldest first — the shape of the Python API and of the method's
        own examples (``item_id``, and ``category``, ``timestamp``, ``rating``, ``title``, ``features`` when
        known)."""
        return [i.to_dict() for i in self.interactions]


class Catalog(Mapping[str, Item]):
    """All items, by id, in a stable order (the order they were given).

    Immutable once built, so its list, its sorted categories and its per-category index are computed once
    (each perturbation reads them: rebuilt per call they made planning grow with users × catalog size), and
    :meth:`without` is a view that leaves one item out without copying the rest.
    """

    def __init__(self, items: Iterable[Item]) -> None:
        self._items: dict[str, Item] = {}
        for item in items:
            self._items[item.item_id] = item
        self._list: tuple[Item, ...] | None = None
        self._index: dict[str, tuple[Item, ...]] | None = None
        self._positions: dict[str, int] | None = None
        self._in_category: dict[str, int] | None = None

    def __getitem__(self, item_id: str) -> Item:
        return self._items[item_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Catalog({len(self)} items)"

    @property
    def items_list(self) -> Sequence[Item]:
        if self._list is None:
            self._list = tuple(self._items.values())
        return self._list

    @property
    def categories(self) -> tuple[str, ...]:
        """Distinct categories, sorted, so that seeded draws from them are reproducible."""
        return tuple(sorted(self._by_category()))

    def by_category(self, category: str) -> tuple[Item, ...]:
        """The items of ``category``, in the catalog's order."""
        return self._by_category().get(category, ())

    def without(self, item_id: str) -> Catalog:
        """The catalog without ``item_id`` — the same items in the same order, as a view — or itself when
        the item is not in it."""
        return _WithoutOne(self, item_id) if item_id in self._items else self

    def position(self, item_id: str) -> int:
        """The item's place in :attr:`items_list` (a KeyError when it is not in the catalog)."""
        if self._positions is None:
            self._positions = {item.item_id: i for i, item in enumerate(self.items_list)}
        return self._positions[item_id]

    def category_position(self, item_id: str) -> int:
        """The item's place in :meth:`by_category` of its category (a KeyError when it is not in the
        catalog or has no category)."""
        if self._in_category is None:
            self._in_category = {item.item_id: i for items in self._by_category().values()
                                 for i, item in enumerate(items)}
        return self._in_category[item_id]

    def _by_category(self) -> dict[str, tuple[Item, ...]]:
        if self._index is None:
            index: dict[str, list[Item]] = {}
            for item in self._items.values():
                if item.category is not None:
                    index.setdefault(item.category, []).append(item)
            self._index = {c: tuple(items) for c, items in index.items()}
        return self._index


class _SkipOne(Sequence[Item]):
    """A tuple of items with the one at ``skip`` left out, read in place (no copy of the others)."""

    def __init__(self, items: Sequence[Item], skip: int) -> None:
        self._items, self._skip = items, skip

    def __len__(self) -> int:
        return len(self._items) - 1

    @overload
    def __getitem__(self, index: int) -> Item: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Item]: ...

    def __getitem__(self, index: int | slice) -> Item | Sequence[Item]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(index)
        index %= n
        return self._items[index if index < self._skip else index + 1]


class _WithoutOne(Catalog):
    """:meth:`Catalog.without`: the base catalog with one item left out, as a view."""

    def __init__(self, base: Catalog, item_id: str) -> None:  # a view: no items of its own
        self._base, self._left_out = base, base[item_id]
        self._position = base.position(item_id)

    def __getitem__(self, item_id: str) -> Item:
        if item_id == self._left_out.item_id:
            raise KeyError(item_id)
        return self._base[item_id]

    def __iter__(self) -> Iterator[str]:
        return (item_id for item_id in self._base if item_id != self._left_out.item_id)

    def __len__(self) -> int:
        return len(self._base) - 1

    @property
    def items_list(self) -> Sequence[Item]:
        return _SkipOne(self._base.items_list, self._position)

    @property
    def categories(self) -> tuple[str, ...]:
        category = self._left_out.category
        if category is not None and len(self._base.by_category(category)) == 1:
            return tuple(c for c in self._base.categories if c != category)  # its only item left out
        return self._base.categories

    def by_category(self, category: str) -> tuple[Item, ...]:
        items = self._base.by_category(category)
        if category != self._left_out.category:
            return items
        return tuple(item for item in items if item.item_id != self._left_out.item_id)

    def category_position(self, item_id: str) -> int:
        self[item_id]  # the one left out is not here: a KeyError
        found = self._base.category_position(item_id)
        left_out = self._left_out
        if self._base[item_id].category == left_out.category and found > self._base.category_position(
                left_out.item_id):
            return found - 1  # after the one left out, one place earlier
        return found

    def without(self, item_id: str) -> Catalog:
        return Catalog(self.items_list).without(item_id)


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
