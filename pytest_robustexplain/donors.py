"""Donor users for the cross-user control: whose history replaces the user's in a swap pair.

The guard (``guard.py``) asks the model to explain the same item once more, for a *donor* user ``v``
instead of the evaluated user ``u``. If the explanation for ``v`` is as close to the one for ``u`` as a
perturbed history's is, the explanation does not depend on the history, whatever ρ says. A good donor:

- is another user who has not interacted with the item (the prompt must stay a recommendation);
- has a history whose category profile differs as much as possible from ``u``'s, so a model that reads
  the history has something to react to;
- has a history of about the same length (within :data:`LENGTH_RATIO`): a much longer prompt changes
  the output for reasons other than its content (context limits, truncation);
- is drawn from the :data:`CANDIDATES` best such users rather than always the single most different one,
  which on real data is the same outlier for most users (on MovieLens one horror fan was "most
  different" for 7 of 8 users).

The choice is a pure function of (seed, user, item) and the dataset, so it is the same in every process
(serial, pytest-xdist workers, the CLI) and whatever other cases are planned.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .data import EvalCase, Item, UserHistory, category_counts

CANDIDATES = 8  # donors drawn uniformly among the this-many most different, length-compatible users
LENGTH_RATIO = 1.5  # longest / shortest history of a length-compatible donor


@dataclass(frozen=True)
class _Profile:
    user_id: str
    history: UserHistory
    categories: Mapping[str, float]  # category -> share, unit length (L2)
    items: frozenset[str]


def _profile(history: UserHistory, catalog: Mapping[str, Item]) -> _Profile:
    counts = category_counts(history, catalog)
    norm = math.sqrt(sum(c * c for c in counts.values()))
    shares = {k: c / norm for k, c in counts.items()} if norm else {}
    return _Profile(history.user_id, history, shares, frozenset(history.item_ids))


def profile_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """1 − cosine of two unit category profiles; 0.5 (neither near nor far) when either is unknown."""
    if not a or not b:
        return 0.5
    return 1.0 - sum(v * b.get(k, 0.0) for k, v in a.items())


def _length_gap(a: int, b: int) -> float:
    return abs(math.log(max(a, 1) / max(b, 1)))


def _draw(seed: int, user_id: str, item_id: str, n: int) -> int:
    # sha256, not hash(): str hashes are salted per process and xdist workers must agree.
    digest = hashlib.sha256(f"donor\x1f{seed}\x1f{user_id}\x1f{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


class DonorPool:
    """Every user of a dataset, ready to serve as a donor; :meth:`donor_for` picks one per case."""

    def __init__(self, histories: Mapping[str, UserHistory], catalog: Mapping[str, Item]) -> None:
        self._profiles = [_profile(histories[u], catalog) for u in sorted(histories)]
        self._by_user = {p.user_id: p for p in self._profiles}
        # Every item of a test (each kind and overall) asks for the same cases' donors: choose once.
        self._chosen: dict[tuple[str, str, int], UserHistory | None] = {}

    def donor_for(self, case: EvalCase, seed: int) -> UserHistory | None:
        """The donor of ``case`` (None when no other user could be one)."""
        key = (case.user_id, case.item_id, seed)
        if key not in self._chosen:
            self._chosen[key] = self._choose(case, seed)
        return self._chosen[key]

    def _choose(self, case: EvalCase, seed: int) -> UserHistory | None:
        user = self._by_user.get(case.user_id) or _profile(case.history, {})
        length = len(case.history)
        eligible = [p for p in self._profiles
                    if p.user_id != case.user_id and case.item_id not in p.items and len(p.history) > 0]
        if not eligible:
            return None
        compatible = [p for p in eligible
                      if _length_gap(len(p.history), length) <= math.log(LENGTH_RATIO) + 1e-12]
        if len(compatible) < CANDIDATES:
            # Too few users of a similar length: the nearest in length, twice as many as will be drawn
            # from, so "most different" still has a choice.
            compatible = sorted(eligible, key=lambda p: (_length_gap(len(p.history), length), p.user_id))
            compatible = compatible[: 2 * CANDIDATES]
        ranked = sorted(compatible, key=lambda p: (-profile_distance(user.categories, p.categories),
                                                   p.user_id))
        top = ranked[:CANDIDATES]
        return top[_draw(seed, case.user_id, case.item_id, len(top))].history

    def donors(self, cases: Iterable[EvalCase], seed: int) -> dict[tuple[str, str], UserHistory]:
        """``(user, item) -> donor history`` for every case that has a donor."""
        out: dict[tuple[str, str], UserHistory] = {}
        for case in cases:
            donor = self.donor_for(case, seed)
            if donor is not None:
                out[(case.user_id, case.item_id)] = donor
        return out
