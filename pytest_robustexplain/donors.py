"""Donor users for the cross-user control: whose interactions replace the user's in a swap pair.

The guard (``guard.py``) asks the model to explain the same item once more, with a *donor* user ``v``'s
interactions in place of the evaluated user ``u``'s. If that explanation is as close to the one for ``u``
as a perturbed history's is, the explanation does not depend on what the user did, whatever ρ says.

The control is **content-only**: the donor's interactions are shown under ``u``'s identity — ``u``'s
user id, ``u``'s number of interactions (the donor's most recent ones, cut to ``u``'s length) and
``u``'s timestamps, in order — so the only difference between the two prompts is *what* the user did
(items, titles, categories, ratings, features). An explainer that writes the user id, the number of
interactions or the day span into a constant sentence varies with the user without depending on the
behaviour; against the swapped *user* it looked sensitive (ρ_swap 0.92, S 0.08: PASS), against this
control it is word for word the same (INSENSITIVE). A good donor:

- is another user who has not interacted with the item (the prompt must stay a recommendation);
- has at least as many interactions as ``u``, so the cut control is exactly ``u``'s length: a model that
  reads only short prompts (or only long ones) meets a control of the same length as the user, which an
  explainer that is blind beyond some length cannot tell apart;
- has a history whose category profile differs as much as possible from ``u``'s, so a model that reads
  the history has something to react to;
- is drawn from the :data:`CANDIDATES` best such users rather than always the single most different one,
  which on real data is the same outlier for most users (on MovieLens one horror fan was "most
  different" for 7 of 8 users).

When fewer than :data:`CANDIDATES` users are long enough (``u`` is among the longest histories), the
longest users are the candidates and the control is as long as the donor's history: its length is
recorded (``control_length``), so the reports can say where the lengths differ.

The choice is a pure function of (seed, user, item) and the dataset, so it is the same in every process
(serial, pytest-xdist workers, the CLI) and whatever other cases are planned.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from .data import EvalCase, Item, UserHistory, category_counts

CANDIDATES = 8  # donors drawn uniformly among the this-many most different, long-enough users


@dataclass(frozen=True)
class Control:
    """A case's content-only control: the donor's interactions under the evaluated user's identity."""

    donor_id: str
    history: UserHistory  # the evaluated user's id and timestamps, the donor's interactions
    donor_length: int  # interactions the donor has
    length_matched: bool  # as long as the user's history (the donor had enough interactions)


def content_only(user: UserHistory, donor: UserHistory) -> Control:
    """The donor's most recent interactions, as many as the user has, under the user's id and the user's
    timestamps (oldest first, position by position): only what was done differs from the user's own."""
    n = len(user)
    taken = donor.interactions[-n:] if n else ()
    # A shorter donor's interactions take the user's most recent timestamps: the control ends when the
    # user's history does.
    times = [i.timestamp for i in user.interactions[n - len(taken):]]
    interactions = tuple(replace(i, timestamp=t) for i, t in zip(taken, times, strict=True))
    return Control(donor.user_id, UserHistory(user.user_id, interactions), len(donor), len(taken) == n)


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


def _draw(seed: int, user_id: str, item_id: str, n: int) -> int:
    # sha256, not hash(): str hashes are salted per process and xdist workers must agree.
    digest = hashlib.sha256(f"donor\x1f{seed}\x1f{user_id}\x1f{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


class DonorPool:
    """Every user of a dataset, ready to serve as a donor; :meth:`donor_for` picks one per case."""

    def __init__(self, histories: Mapping[str, UserHistory], catalog: Mapping[str, Item]) -> None:
        self._profiles = [_profile(histories[u], catalog) for u in sorted(histories)]
        self._by_user = {p.user_id: p for p in self._profiles}
        # Every item of a test (each kind and overall) asks for the same cases' controls: choose once.
        self._chosen: dict[tuple[str, str, int], Control | None] = {}

    def donor_for(self, case: EvalCase, seed: int) -> Control | None:
        """The content-only control of ``case`` (None when no other user could be its donor)."""
        key = (case.user_id, case.item_id, seed)
        if key not in self._chosen:
            donor = self._choose(case, seed)
            self._chosen[key] = None if donor is None else content_only(case.history, donor)
        return self._chosen[key]

    def _choose(self, case: EvalCase, seed: int) -> UserHistory | None:
        user = self._by_user.get(case.user_id) or _profile(case.history, {})
        length = len(case.history)
        eligible = [p for p in self._profiles
                    if p.user_id != case.user_id and case.item_id not in p.items and len(p.history) > 0]
        if not eligible:
            return None
        long_enough = [p for p in eligible if len(p.history) >= length]
        if len(long_enough) < CANDIDATES:
            # Too few users as long as this one: the longest, twice as many as will be drawn from, so
            # "most different" still has a choice.
            long_enough = sorted(eligible, key=lambda p: (-len(p.history), p.user_id))[: 2 * CANDIDATES]
        ranked = sorted(long_enough, key=lambda p: (-profile_distance(user.categories, p.categories),
                                                    p.user_id))
        top = ranked[:CANDIDATES]
        return top[_draw(seed, case.user_id, case.item_id, len(top))].history

    def donors(self, cases: Iterable[EvalCase], seed: int) -> dict[tuple[str, str], Control]:
        """``(user, item) -> content-only control`` for every case that has a donor."""
        out: dict[tuple[str, str], Control] = {}
        for case in cases:
            control = self.donor_for(case, seed)
            if control is not None:
                out[(case.user_id, case.item_id)] = control
        return out
