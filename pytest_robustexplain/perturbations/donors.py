"""Donor users for the cross-user control: whose interactions replace the user's in a swap pair.

The guard (``checks/controls``) asks the model to explain the same item once more, with a *donor* user ``v``'s
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

import numpy as np

from ..data import EvalCase, Item, UserHistory, category_counts

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
        # Every item of a test (each kind and overall) asks for the same cases' controls: choose once.
        self._chosen: dict[tuple[str, str, int], Control | None] = {}
        # The pool as arrays (users in id order), so that choosing a donor reads every user in a few vector
        # operations instead of a Python loop each: planning 6,000 users was quadratic in Python (issue 41).
        self._index = {p.user_id: i for i, p in enumerate(self._profiles)}
        self._lengths = np.array([len(p.history) for p in self._profiles], dtype=np.int64)
        # By category, the users with a share of it and their shares (sparse: a catalog may have thousands
        # of categories, each user a handful).
        columns: dict[str, tuple[list[int], list[float]]] = {}
        for i, p in enumerate(self._profiles):
            for category, share in p.categories.items():
                users, shares = columns.setdefault(category, ([], []))
                users.append(i)
                shares.append(share)
        self._columns = {k: (np.array(u, dtype=np.int64), np.array(v)) for k, (u, v) in columns.items()}
        self._unknown = np.array([not p.categories for p in self._profiles], dtype=bool)
        holders: dict[str, list[int]] = {}
        for i, p in enumerate(self._profiles):
            for item in p.items:
                holders.setdefault(item, []).append(i)
        self._holders = {item: np.array(users, dtype=np.int64) for item, users in holders.items()}

    def donor_for(self, case: EvalCase, seed: int) -> Control | None:
        """The content-only control of ``case`` (None when no other user could be its donor)."""
        key = (case.user_id, case.item_id, seed)
        if key not in self._chosen:
            donor = self._choose(case, seed)
            self._chosen[key] = None if donor is None else content_only(case.history, donor)
        return self._chosen[key]

    def _choose(self, case: EvalCase, seed: int) -> UserHistory | None:
        """Among the users who are not this one, do not hold the item and are at least as long (else the
        longest), the CANDIDATES most different by category profile (ties by user id), one drawn by seed."""
        position = self._index.get(case.user_id)
        user = self._profiles[position] if position is not None else _profile(case.history, {})
        eligible = self._lengths > 0
        if position is not None:
            eligible[position] = False
        if case.item_id in self._holders:
            eligible[self._holders[case.item_id]] = False
        if not eligible.any():
            return None
        pool = np.flatnonzero(eligible & (self._lengths >= len(case.history)))
        if len(pool) < CANDIDATES:
            # Too few users as long as this one: the longest, twice as many as will be drawn from, so
            # "most different" still has a choice (a stable sort keeps ties in user-id order).
            longest = np.flatnonzero(eligible)
            pool = np.sort(longest[np.argsort(-self._lengths[longest], kind="stable")][: 2 * CANDIDATES])
        ranked = sorted((self._profiles[i] for i in self._shortlist(user.categories, pool)),
                        key=lambda p: (-profile_distance(user.categories, p.categories), p.user_id))
        top = ranked[:CANDIDATES]
        return top[_draw(seed, case.user_id, case.item_id, len(top))].history

    def _shortlist(self, categories: Mapping[str, float], pool: object) -> list[int]:
        """The users of ``pool`` (indices) that can be among the CANDIDATES most different: every one whose
        distance, computed here in vectors, is within 1e-9 of the CANDIDATES-th largest. The ranking itself
        stays :func:`profile_distance`'s, exactly as before, so no float rounding of the vector sum can
        change which donor is drawn."""
        indices = np.asarray(pool, dtype=np.int64)
        if len(indices) <= 4 * CANDIDATES or not categories:
            return [int(i) for i in indices]
        overlap = np.zeros(len(self._profiles))
        for category, share in categories.items():
            if category in self._columns:
                users, shares = self._columns[category]
                overlap[users] += share * shares
        distance = np.where(self._unknown[indices], 0.5, 1.0 - overlap[indices])
        kth = np.partition(-distance, CANDIDATES - 1)[CANDIDATES - 1]
        return [int(i) for i in indices[-distance <= kth + 1e-9]]

    def donors(self, cases: Iterable[EvalCase], seed: int) -> dict[tuple[str, str], Control]:
        """``(user, item) -> content-only control`` for every case that has a donor."""
        out: dict[tuple[str, str], Control] = {}
        for case in cases:
            control = self.donor_for(case, seed)
            if control is not None:
                out[(case.user_id, case.item_id)] = control
        return out
