"""The five history perturbations of RobustExplain and their results (the registry: ``registry``).

Every perturbation takes a user's history (oldest first) and a severity ``s`` in 1–5 and returns a new
history plus a JSON-serialisable ``changes`` dict saying exactly what changed. With ``n`` the history
length and "round" meaning round half up (``2.5 → 3``), the built-in kinds are:

``noise_injection`` (alias ``noise``)
    Insert ``max(1, round(0.1·s·n))`` items drawn uniformly from the catalog (without replacement when
    the catalog is large enough) at uniformly random positions of the new history; level 5 adds 50 %.
    Under the paper's literal rule (a registry with ``counts="paper"``: the ``perturbation-counts``
    setting) exactly ``s`` items, as for dilution.
    Changes: ``{"inserted": [{"position": p, "item_id": id, "category": c}, ...]}`` with positions in the
    perturbed history.
``temporal_shuffle`` (alias ``shuffle``)
    Choose ``round(s·n/5)`` positions (at least 2 when ``n ≥ 2``) and permute the items among them with
    a derangement, so every chosen item moves; the timestamp sequence stays in place, so moved items
    appear at the wrong times (each moved interaction takes the timestamp of the slot it lands in and
    keeps its own rating). Level 5 chooses every position: the whole order is randomised. If the result
    equals the original (the chosen items are all alike) the draw is repeated, and as a last resort the
    items are rotated among positions holding different items; only a history of ``n < 2`` or of
    identical items stays unchanged. Changes: ``{"moved": [[from, to], ...]}``.
``behavior_dilution`` (aliases ``dilution``, ``dilute``)
    Insert ``max(1, round(0.1·s·n))`` items from the user's least-engaged categories (see
    :func:`least_engaged_categories`) at random positions, like noise. Changes: ``inserted`` as for noise
    plus ``"categories"``, the pool the items were drawn from.
``category_drift`` (alias ``drift``)
    Replace the most recent ``max(1, round(0.1·s·n))`` interactions (the end of the history) with items
    from one or two (drawn at random) of the user's least-engaged categories; level 5 replaces 50 %. A
    replacement keeps the timestamp and rating of the interaction it replaces: the user's rhythm stays,
    the content drifts. Changes: ``{"replaced": [{"position", "old_item_id", "item_id", "category"}],
    "categories": [...]}``.
``missing_values`` (alias ``missing``)
    Blank (set to ``None``) ``max(1, round(0.1·s·3n))`` of the ``3n`` metadata fields (``rating``,
    ``timestamp``, ``category`` of every interaction), chosen at random among the fields that are still
    present (fewer when fewer are present); level 5 blanks half of them. Changes:
    ``{"blanked": [{"position": p, "field": f}, ...]}``.

Common rules:

* Inserted items carry the catalog's metadata (title, category, features — copied, never shared). Their
  timestamps fit where they land: drawn between the nearest known timestamps before and after (all the
  insertions between the same two known timestamps are drawn together and sorted, so known timestamps
  stay in order); at either end the range is extended by a plausible gap, the median of the
  user's positive gaps between consecutive timestamps (one day when unknown). If the history has no
  timestamps at all, inserted items have none either. Their rating is drawn from the user's own known
  ratings (``None`` if the user has none), so they look like the rest of the history.
* The recommended item (``item_id``) is never inserted into its own history (unless it is the only item
  of the catalog). Every new or changed interaction owns a deep copy of its features.
* Least-engaged categories: the catalog's categories the user never interacted with (an interaction
  without a category counts under the catalog's category of its item). When the user has already seen
  every category of the catalog, this falls back to the least-engaged categories that exist: the
  categories ordered by the user's interaction count (ascending, ties broken by name), first half
  (rounded up). A catalog without any categorised item is a ``DataError`` for dilution and drift. Items
  the user already has are avoided when the pool is large enough.
* A result is a pure function of ``(seed, user_id, item_id, kind, severity, repeat)``: the generator is
  ``numpy.random.default_rng(SeedSequence([seed, h(user_id), h(item_id), h(kind), severity, repeat]))``
  with ``h`` = :func:`stable_hash` (SHA-256 based, independent of ``PYTHONHASHSEED``), so results do not
  depend on call order, threads or processes. There is no global random state.
* Inputs are never mutated (all records are frozen); a perturbation that changes nothing (``n = 1``
  shuffle, blanking fields that are all missing already...) yields a result whose ``identical`` is true,
  and such pairs are filtered from evaluation.
"""

from __future__ import annotations

import bisect
import copy
import functools
import hashlib
import itertools
import json
import math
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..data import Catalog, Interaction, Item, UserHistory
from ..errors import ConfigError, DataError
from ..results import COUNTS_PAPER, COUNTS_PROPORTIONAL, PerturbationResult
from .describe import describe
from .registry import DEFAULT_REGISTRY, KindRegistry, register_builtin

NOISE = "noise_injection"
SHUFFLE = "temporal_shuffle"
DILUTION = "behavior_dilution"
DRIFT = "category_drift"
MISSING = "missing_values"
KINDS: tuple[str, ...] = (NOISE, SHUFFLE, DILUTION, DRIFT, MISSING)
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)

METADATA_FIELDS: tuple[str, ...] = ("rating", "timestamp", "category")
_DEFAULT_GAP_S = 86_400  # one day: the fallback spacing when a history has too few timestamps
_MAX_SHUFFLE_DRAWS = 20


# ---------------------------------------------------------------------------------- seeds and checks


@functools.lru_cache(maxsize=65_536)  # a user, an item and a kind are hashed again for every perturbation
def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same in every process (unlike the built-in ``hash``)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def perturbation_rng(seed: int, user_id: str, item_id: str, kind: str, severity: int,
                     repeat: int) -> np.random.Generator:
    """The generator of one perturbation, derived from its keys only."""
    entropy = [seed, stable_hash(user_id), stable_hash(item_id), stable_hash(kind), severity, repeat]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def _as_int(value: object, name: str, minimum: int, maximum: int | None = None) -> int:
    # operator.index accepts int and numpy integers but not floats or strings; bool is rejected apart
    # because True would silently mean 1.
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"≥ {minimum}"
        raise ConfigError(f"{name} must be an integer {bounds}, got {value!r}")
    return number


def validate_severity(severity: object) -> int:
    """``severity`` as an int in 1–5, or a ``ConfigError`` naming the value."""
    return _as_int(severity, "perturbation severity", 1, 5)


# --------------------------------------------------------------------------------------------- helpers


def units_to_change(severity: int, units: int) -> int:
    """``max(1, round(0.1·severity·units))`` with round half up, in exact integer arithmetic."""
    return max(1, (severity * units + 5) // 10)


# Values a new interaction can share with the one it copies: nothing can change them.
_IMMUTABLE = (str, int, float, bool, type(None))


def _owned(features: Mapping[str, Any]) -> Mapping[str, Any]:
    """``features`` as a new interaction may hold them: nothing mutable shared with the catalog or another
    history. Equal to a deep copy; only a value that is not a scalar or a list or tuple of scalars (a
    dict, a nested list) is deep-copied — planning copies the features of every inserted or moved
    interaction, and ``copy.deepcopy`` of a MovieLens genre list was a fifth of a dry run's time."""
    owned = {}
    for name, value in features.items():
        if type(value) in _IMMUTABLE:
            owned[name] = value
        elif type(value) in (list, tuple) and all(type(v) in _IMMUTABLE for v in value):
            owned[name] = list(value) if type(value) is list else value
        else:
            owned[name] = copy.deepcopy(value)
    return owned


def fresh_interaction(item: Item, *, timestamp: int | None, rating: float | None) -> Interaction:
    # Own copies of the features, so nothing mutable is shared between the catalog and a perturbed history.
    return Interaction(item_id=item.item_id, category=item.category, timestamp=timestamp, rating=rating,
                       title=item.title, features=_owned(item.features))


def _copy(interaction: Interaction, **changes: Any) -> Interaction:
    """``interaction`` with ``changes``, owning a copy of its features (nothing mutable shared)."""
    return replace(interaction, features=_owned(interaction.features), **changes)


def _category_of(interaction: Interaction, catalog: Catalog) -> str | None:
    if interaction.category is not None:
        return interaction.category
    item = catalog.get(interaction.item_id)
    return item.category if item is not None else None


def least_engaged_categories(history: UserHistory, catalog: Catalog) -> tuple[str, ...]:
    """The catalog categories the user engages with least (see the module docstring), by name."""
    categories = catalog.categories
    if not categories:
        raise DataError("no item has a category, so there are no categories to dilute or drift towards",
                        source="catalog", field="category")
    counts = Counter(_category_of(i, catalog) for i in history.interactions)
    unseen = tuple(c for c in categories if counts[c] == 0)
    if unseen:
        return unseen
    # The user has seen every category: fall back to the less-engaged half (ties broken by name).
    ordered = sorted(categories, key=lambda c: (counts[c], c))
    return tuple(sorted(ordered[: math.ceil(len(ordered) / 2)]))


def _draw_items(catalog: Catalog, categories: Sequence[str], count: int, rng: np.random.Generator,
                avoid: set[str]) -> list[Item]:
    """``count`` items of ``categories`` (the pool: their items in order, category by category), drawn
    from those not in ``avoid`` when there are enough, else from the whole pool.

    The pool is never built: an index is mapped to its item through the categories' lengths, and an
    index among the items not avoided past the avoided ones' places — the draws and the items are those
    of a list built and filtered (``tests/test_perturbations.py`` compares the two), which cost a dry run
    a sixth of its time at 10,000 items."""
    segments = [catalog.by_category(c) for c in categories]
    ends = list(itertools.accumulate(len(s) for s in segments))
    total = ends[-1] if ends else 0
    order = {c: i for i, c in enumerate(categories)}
    skipped = sorted(_pool_index(catalog, item_id, order, ends, segments) for item_id in avoid
                     if item_id in catalog and catalog[item_id].category in order)
    fresh = total - len(skipped)
    size = fresh if fresh >= count else total
    picks = rng.choice(size, size=count, replace=count > size)
    found = []
    for pick in picks:
        index = int(pick)
        if size == fresh:  # an index among the items not avoided: step past each avoided place up to it
            for place in skipped:
                if place > index:
                    break
                index += 1
        segment = bisect.bisect_right(ends, index)
        found.append(segments[segment][index - (ends[segment - 1] if segment else 0)])
    return found


def _pool_index(catalog: Catalog, item_id: str, order: Mapping[str, int], ends: Sequence[int],
                segments: Sequence[Sequence[Item]]) -> int:
    """Where ``item_id`` sits in the pool :func:`_draw_items` reads (its category is one of the pool's)."""
    segment = order[catalog[item_id].category]  # type: ignore[index]
    start = ends[segment] - len(segments[segment])
    return start + catalog.category_position(item_id)


def plausible_gap(timestamps: Sequence[int]) -> int:
    """The median gap between consecutive increasing timestamps (truncated), as ``numpy.median`` gives it —
    computed here on the sorted gaps: numpy's call cost more than the rest of an insertion."""
    gaps = sorted(b - a for a, b in itertools.pairwise(timestamps) if b > a)
    if not gaps:
        return _DEFAULT_GAP_S
    middle = len(gaps) // 2
    return int(gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2)


def _draw_ratings(ratings: Sequence[float], count: int, rng: np.random.Generator) -> list[float | None]:
    """``count`` ratings drawn from ``ratings`` (None each when there are none). One call for all: the
    generator gives the values ``count`` calls of one would, in order (numpy's bounded draws share one
    routine and keep the half-used word in the generator's state), at a fraction of the calls' cost."""
    if not ratings:
        return [None] * count
    return [float(ratings[int(i)]) for i in rng.integers(len(ratings), size=count)]


def _gap_bounds(lo: int | None, hi: int | None, gap: int) -> tuple[int, int] | None:
    """The range an insertion between known timestamps ``lo`` and ``hi`` (None: an end) may take."""
    if lo is None and hi is None:
        return None
    if lo is None:
        assert hi is not None
        # Extend before the first timestamp, without crossing the epoch when the data does not.
        lo = max(0, hi - gap) if hi >= 0 else hi - gap
    if hi is None:
        hi = lo + gap
    return (lo, hi) if lo <= hi else (hi, lo)  # an unsorted input must not crash the draw


def _insertion_timestamps(original: Sequence[Interaction], gap_of: Sequence[int],
                          rng: np.random.Generator) -> list[int | None]:
    """Timestamps for insertions landing after ``gap_of[j]`` original interactions (non-decreasing in j)."""
    known = [i.timestamp for i in original]
    gap = plausible_gap([t for t in known if t is not None])
    # Insertions between the same two known timestamps (possibly several gaps apart, when the
    # interactions in between have none) share one bracket and are drawn together, sorted, so that
    # the known timestamps stay in order.
    last_known_before = [-1] * (len(original) + 1)
    for g in range(1, len(original) + 1):
        last_known_before[g] = g - 1 if known[g - 1] is not None else last_known_before[g - 1]
    brackets: dict[int, list[int]] = {}
    for j, g in enumerate(gap_of):
        brackets.setdefault(last_known_before[g], []).append(j)
    stamps: list[int | None] = [None] * len(gap_of)
    for before, members in brackets.items():
        lo = known[before] if before >= 0 else None
        hi = next((t for t in known[before + 1:] if t is not None), None)
        bounds = _gap_bounds(lo, hi, gap)
        if bounds is not None:
            draws = sorted(int(t) for t in rng.integers(bounds[0], bounds[1] + 1, size=len(members)))
            for j, stamp in zip(members, draws, strict=True):
                stamps[j] = stamp
    return stamps


def _insert(history: UserHistory, items: Sequence[Item],
            rng: np.random.Generator) -> tuple[tuple[Interaction, ...], list[int]]:
    """Insert ``items`` at random positions; returns the new interactions and the inserted positions."""
    original = history.interactions
    n, k = len(original), len(items)
    positions = sorted(int(p) for p in rng.choice(n + k, size=k, replace=False))
    # The j-th insertion (in position order) lands after p - j original interactions.
    stamps = _insertion_timestamps(original, [p - j for j, p in enumerate(positions)], rng)
    ratings = _draw_ratings([i.rating for i in original if i.rating is not None], k, rng)
    new = iter([fresh_interaction(item, timestamp=stamp, rating=rating)
                for item, stamp, rating in zip(items, stamps, ratings, strict=True)])
    source = iter(original)
    position_set = set(positions)
    return tuple(next(new) if p in position_set else next(source) for p in range(n + k)), positions


def _inserted_changes(interactions: Sequence[Interaction], positions: Sequence[int]) -> list[dict[str, Any]]:
    return [{"position": p, "item_id": interactions[p].item_id, "category": interactions[p].category}
            for p in positions]


# -------------------------------------------------------------------------------------- the five kinds


def inserted_count(severity: int, n: int, counts: str = COUNTS_PROPORTIONAL) -> int:
    """How many items noise and dilution insert into a history of ``n``: ``round(0.1·s·n)`` (at least 1), or
    exactly ``s`` under the paper's literal rule (``counts="paper"``)."""
    return severity if counts == COUNTS_PAPER else units_to_change(severity, n)


def noise_injection(history: UserHistory, severity: int, catalog: Catalog, rng: np.random.Generator, *,
                    counts: str = COUNTS_PROPORTIONAL) -> tuple[UserHistory, dict[str, Any]]:
    """Insert random catalog items at random positions (see the module docstring)."""
    if len(catalog) == 0:
        raise DataError("the catalog is empty, so there is nothing to inject", source="catalog")
    count = inserted_count(severity, len(history), counts)
    pool = catalog.items_list
    picks = rng.choice(len(pool), size=count, replace=count > len(pool))
    interactions, positions = _insert(history, [pool[int(i)] for i in picks], rng)
    changes = {"inserted": _inserted_changes(interactions, positions)}
    return UserHistory(history.user_id, interactions), changes


def behavior_dilution(history: UserHistory, severity: int, catalog: Catalog, rng: np.random.Generator, *,
                      counts: str = COUNTS_PROPORTIONAL) -> tuple[UserHistory, dict[str, Any]]:
    """Insert items from the user's least-engaged categories (see the module docstring)."""
    categories = least_engaged_categories(history, catalog)
    items = _draw_items(catalog, categories, inserted_count(severity, len(history), counts), rng,
                        set(history.item_ids))
    interactions, positions = _insert(history, items, rng)
    changes = {"inserted": _inserted_changes(interactions, positions), "categories": list(categories)}
    return UserHistory(history.user_id, interactions), changes


def category_drift(history: UserHistory, severity: int, catalog: Catalog,
                   rng: np.random.Generator) -> tuple[UserHistory, dict[str, Any]]:
    """Replace the most recent interactions with items from rarely-engaged categories."""
    n = len(history)
    count = min(n, units_to_change(severity, n))
    candidates = least_engaged_categories(history, catalog)
    how_many = min(len(candidates), int(rng.integers(1, 3)))
    targets = [candidates[int(i)] for i in sorted(rng.choice(len(candidates), size=how_many, replace=False))]
    items = _draw_items(catalog, targets, count, rng, set(history.item_ids))
    interactions = list(history.interactions)
    replaced = []
    for position, item in zip(range(n - count, n), items, strict=True):
        old = interactions[position]
        interactions[position] = fresh_interaction(item, timestamp=old.timestamp, rating=old.rating)
        replaced.append({"position": position, "old_item_id": old.item_id, "item_id": item.item_id,
                         "category": item.category})
    return UserHistory(history.user_id, tuple(interactions)), {"replaced": replaced, "categories": targets}


def _derangement(size: int, rng: np.random.Generator) -> list[int]:
    # Rejection sampling gives a uniform derangement in e ≈ 2.7 draws on average; the rotation is a
    # (practically unreachable) bound on the loop.
    for _ in range(100):
        perm = [int(i) for i in rng.permutation(size)]
        if all(perm[i] != i for i in range(size)):
            return perm
    return [(i + 1) % size for i in range(size)]


def _permute(original: tuple[Interaction, ...], positions: Sequence[int],
             perm: Sequence[int]) -> tuple[tuple[Interaction, ...], list[list[int]]]:
    # The item at positions[i] moves to positions[perm[i]] and takes that slot's timestamp.
    out = list(original)
    moves = []
    for i, target_index in enumerate(perm):
        src, dst = positions[i], positions[target_index]
        out[dst] = _copy(original[src], timestamp=original[dst].timestamp)
        moves.append([src, dst])
    return tuple(out), moves


def _content_key(interaction: Interaction) -> tuple[Any, ...]:
    """What a shuffle can change of an interaction: everything but its timestamp, which stays in place."""
    i = interaction
    return (i.item_id, i.category, i.rating, i.title, i.features)


def _rotation_fallback(original: tuple[Interaction, ...],
                       positions: list[int]) -> tuple[tuple[Interaction, ...], list[list[int]]]:
    # Rotating by one changes a sequence unless all its elements are equal, so make sure the chosen
    # positions hold at least two different items (swapping one in if needed).
    chosen = set(positions)
    first = _content_key(original[positions[0]])
    if all(_content_key(original[p]) == first for p in positions):
        other = next((p for p in range(len(original)) if p not in chosen
                      and _content_key(original[p]) != first), None)
        if other is not None:
            positions = sorted([*positions[1:], other])
    return _permute(original, positions, [(i + 1) % len(positions) for i in range(len(positions))])


def temporal_shuffle(history: UserHistory, severity: int, catalog: Catalog,
                     rng: np.random.Generator) -> tuple[UserHistory, dict[str, Any]]:
    """Permute the items among a fraction s/5 of positions, leaving the timestamps in place."""
    original = history.interactions
    n = len(original)
    if n < 2:
        return UserHistory(history.user_id, original), {"moved": []}
    count = min(n, max(2, (2 * severity * n + 5) // 10))
    for _ in range(_MAX_SHUFFLE_DRAWS):
        positions = sorted(int(p) for p in rng.choice(n, size=count, replace=False))
        interactions, moves = _permute(original, positions, _derangement(count, rng))
        if interactions != original:
            break
    else:
        interactions, moves = _rotation_fallback(original, positions)
    moves.sort()
    return UserHistory(history.user_id, interactions), {"moved": moves}


def missing_values(history: UserHistory, severity: int, catalog: Catalog,
                   rng: np.random.Generator) -> tuple[UserHistory, dict[str, Any]]:
    """Blank a fraction 0.1·s of the rating/timestamp/category fields."""
    original = history.interactions
    present = [(p, name) for p, interaction in enumerate(original) for name in METADATA_FIELDS
               if getattr(interaction, name) is not None]
    count = min(len(present), units_to_change(severity, len(METADATA_FIELDS) * len(original)))
    picks = sorted(int(i) for i in rng.choice(len(present), size=count, replace=False)) if count else []
    blanked = [present[i] for i in picks]
    per_position: dict[int, dict[str, None]] = {}
    for position, name in blanked:
        per_position.setdefault(position, {})[name] = None
    interactions = list(original)
    for position, fields in per_position.items():
        interactions[position] = _copy(original[position], **fields)
    changes = {"blanked": [{"position": p, "field": name} for p, name in blanked]}
    return UserHistory(history.user_id, tuple(interactions)), changes


def noise_changes(history: UserHistory, catalog: Catalog) -> bool:
    """Noise surely changes a history with an interaction when the catalog has an item: it inserts at least
    one (the recommended item is left out of the catalog only when another remains)."""
    return len(history) > 0 and len(catalog) > 0


def dilution_changes(history: UserHistory, catalog: Catalog) -> bool:
    """Dilution surely changes a history with an interaction when two catalog items have a category: with
    the recommended item left out a category remains, so it has one to draw from and inserts at least one
    item (:func:`least_engaged_categories` raises only without any)."""
    return len(history) > 0 and sum(len(catalog.by_category(c)) for c in catalog.categories) >= 2


def shuffle_changes(history: UserHistory, catalog: Catalog) -> bool:
    """The shuffle surely changes a history of two or more interactions that are not all alike (timestamps
    aside): it draws again until the order changed, and its fallback rotation changes any such sequence."""
    interactions = history.interactions
    if len(interactions) < 2:
        return False
    first = _content_key(interactions[0])
    return any(_content_key(i) != first for i in interactions[1:])


def missing_changes(history: UserHistory, catalog: Catalog) -> bool:
    """Missing values surely change a history with a rating, timestamp or category to blank: it blanks
    at least one."""
    return any(getattr(i, name) is not None for i in history.interactions for name in METADATA_FIELDS)


register_builtin(NOISE, noise_injection, ("noise",), takes_counts=True, changes=noise_changes)
register_builtin(SHUFFLE, temporal_shuffle, ("shuffle",), changes=shuffle_changes)
register_builtin(DILUTION, behavior_dilution, ("dilution", "dilute"), takes_counts=True,
                 changes=dilution_changes)
register_builtin(DRIFT, category_drift, ("drift",))
register_builtin(MISSING, missing_values, ("missing",), changes=missing_changes)


# ------------------------------------------------------------------------------------------ entry point


def _without_item(catalog: Catalog, item_id: str) -> Catalog:
    # The recommended item must not show up in its own history; keep it if it is all there is. A view:
    # copying the catalog for every perturbation made planning grow with users × catalog size.
    if item_id not in catalog or len(catalog) < 2:
        return catalog
    return catalog.without(item_id)


def _checked_output(kind: str, history: UserHistory, output: object, *, builtin: bool = False
                    ) -> tuple[UserHistory, dict[str, Any]]:
    # Custom perturbations come from other plugins: check their output once here, loudly. The built-in
    # kinds' output is known to be well formed (their tests say so); serialising every change of every
    # planned pair to check it cost a dry run a twentieth of its time.
    if builtin:
        return output  # type: ignore[return-value]
    if not (isinstance(output, tuple) and len(output) == 2):
        raise ConfigError(f"perturbation {kind!r} must return (new_history, changes), got {output!r}")
    new_history, changes = output
    if not isinstance(new_history, UserHistory) or new_history.user_id != history.user_id:
        raise ConfigError(f"perturbation {kind!r} must return a UserHistory of user {history.user_id!r}, "
                          f"got {new_history!r}")
    if not isinstance(changes, dict):
        raise ConfigError(f"perturbation {kind!r} must return its changes as a dict, got {changes!r}")
    try:
        json.dumps(changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"perturbation {kind!r} returned changes that are not JSON-serialisable: "
                          f"{exc}") from None
    return new_history, changes


def apply_perturbation(history: UserHistory, kind: str, severity: int, *, catalog: Catalog, seed: int,
                       item_id: str = "", repeat: int = 0, kinds: KindRegistry | None = None
                       ) -> PerturbationResult:
    """Perturb ``history`` with ``kind`` at ``severity`` (1–5); see the module docstring for the semantics.

    The result depends only on ``(seed, history.user_id, item_id, kind, severity, repeat)`` and the
    inputs. ``kinds`` is the registry that knows ``kind`` (default: :data:`DEFAULT_REGISTRY`; a run passes
    its own, which also has the kinds its conftests registered). Raises ``ConfigError`` for an unknown kind
    or a bad severity/seed/repeat and ``DataError`` for an empty history or a catalog that cannot serve the
    kind.
    """
    registry = kinds or DEFAULT_REGISTRY
    canonical = registry.canonical(kind)
    level = validate_severity(severity)
    seed_value = _as_int(seed, "perturbation seed", 0)
    repeat_value = _as_int(repeat, "perturbation repeat", 0)
    if len(history) == 0:
        raise DataError("the history is empty, so there is nothing to perturb",
                        record=f"user {history.user_id!r}")
    rng = perturbation_rng(seed_value, history.user_id, item_id, canonical, level, repeat_value)
    entry = registry.entry(canonical)
    # The injection kind plants the run's payload families: the built-ins and what its conftests added.
    extra: dict[str, Any] = {"payloads": registry.payloads()} if entry.takes_payloads else {}
    if entry.takes_counts:
        extra["counts"] = registry.counts
    output = entry.fn(history, level, _without_item(catalog, item_id), rng, **extra)
    # The injection's changes carry payloads conftests registered: checked like a plugin's output.
    trusted = entry.builtin and not entry.takes_payloads
    perturbed, changes = _checked_output(canonical, history, output, builtin=trusted)
    said = describe(canonical, level, changes, random_items=canonical == NOISE)
    return PerturbationResult(kind=canonical, severity=level, repeat=repeat_value, original=history,
                              perturbed=perturbed, changes=changes, description=said)
