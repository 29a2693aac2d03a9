"""A change in a run history: did a quantity (ρ, R, …) move between one run and the next and stay there?

Pettitt's (1979) statistic finds the split of a series where the runs before and after differ most in
rank: with ``r_i`` the ranks of the ``n`` values (ties share their mean rank), ``U_t = 2·Σ_{i≤t} r_i −
t·(n + 1)``, standardised by its spread ``√(t·(n − t)·(n + 1) / 3)`` so that a change near either end of the
history weighs as one in the middle, and ``K = max_t`` of it; the change lies after the ``t`` that attains
``K``. Its p-value here is
a permutation test, not Pettitt's approximation: every ordering of the values is equally likely when the
runs are exchangeable (no change), so the share of orderings whose ``K`` reaches the observed one is exact —
all of them for up to :data:`EXACT_UP_TO` runs, a seeded sample of :data:`PERMUTATIONS` above (the
``(1 + hits) / (1 + B)`` form keeps that test valid too). Ranks make it indifferent to skewed, clipped or
heavy-tailed values; ties (a warm rerun that replays the cache gives the same ρ again) only lower ``K``.

What it assumes is what a history is not always: runs of one signature whose values differ only by the
model's sampling. Runs that drift slowly, or whose errors are correlated from one run to the next, reject
more often than alpha (``benchmarks/bench_history_trend.py`` measures both); and a history tested after
every run is tested many times. So the change is *reported* beside the numbers, never a gate.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

EXACT_UP_TO = 8  # 8! = 40,320 orderings: every one is counted up to here
PERMUTATIONS = 1999
MIN_RUNS = 8  # with 7 runs the rarest ordering has p = 2/35 > 0.05: nothing could be said below 8


@dataclass(frozen=True)
class Change:
    """The most likely change in a series: the first run after it (``at``, 0-based), the median before and
    after, the permutation p-value of Pettitt's ``K``, and whether it is below ``alpha``."""

    at: int
    before: float
    after: float
    p: float
    alpha: float

    @property
    def significant(self) -> bool:
        return self.p <= self.alpha


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share their mean rank
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _statistic(ranks: Sequence[float]) -> tuple[float, int]:
    """The largest standardised |U_t| and the split t (1..n-1) that attains it (the first such)."""
    n, best, at, total = len(ranks), -1.0, 1, 0.0
    for t in range(1, n):
        total += ranks[t - 1]
        z = abs(2 * total - t * (n + 1)) / _spread(n)[t - 1]
        if z > best + 1e-9:
            best, at = z, t
    return best, at


@functools.lru_cache(maxsize=64)
def _spread(n: int) -> tuple[float, ...]:
    """The standard deviation of U_t without ties, t = 1..n-1 (so a split near either end is not
    outweighed by the middle's larger sums)."""
    return tuple(math.sqrt(t * (n - t) * (n + 1) / 3) for t in range(1, n))


def _null_share(ranks: Sequence[float], observed: float, seed: int) -> float:
    """The share of orderings of ``ranks`` whose K reaches ``observed``: every ordering up to
    :data:`EXACT_UP_TO` runs, else a seeded sample (the observed ordering counted in: still a valid test)."""
    n = len(ranks)
    if n <= EXACT_UP_TO:
        shuffled = np.asarray(ranks, dtype=float)[_orderings(n)]
    else:
        rng = np.random.default_rng(seed)
        shuffled = np.asarray(ranks, dtype=float)[np.argsort(rng.random((PERMUTATIONS, n)), axis=1)]
    partial = np.cumsum(shuffled[:, :-1], axis=1)
    z = np.abs(2 * partial - np.arange(1, n) * (n + 1)) / np.asarray(_spread(n))
    hits = int((z.max(axis=1) >= observed - 1e-9).sum())
    return hits / len(shuffled) if n <= EXACT_UP_TO else (1 + hits) / (1 + PERMUTATIONS)


@functools.lru_cache(maxsize=EXACT_UP_TO)
def _orderings(n: int) -> Any:
    return np.array(list(itertools.permutations(range(n))), dtype=np.intp)


def change_point(values: Sequence[float], *, alpha: float = 0.05, seed: int = 0) -> Change | None:
    """The most likely change in ``values`` (in run order) with its p-value; None below :data:`MIN_RUNS`
    runs, or when a value is not finite."""
    if len(values) < MIN_RUNS or not all(math.isfinite(v) for v in values):
        return None
    ranks = _ranks(values)
    observed, at = _statistic(ranks)
    p = 1.0 if observed <= 0 else _null_share(ranks, observed, seed)
    before, after = sorted(values[:at]), sorted(values[at:])
    return Change(at, statistics.median(before), statistics.median(after), p, alpha)


