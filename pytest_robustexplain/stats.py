"""Statistics: cluster-robust intervals, verdicts, sequential tests, comparisons, the paper's analyses.

Pairs that share a user are not independent (same history, same original explanation), so every
interval here is cluster-robust by user. scipy is imported lazily inside functions: this module is
imported by reports that may run where only the tables are wanted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .results import Interval


def cluster_interval(values: Sequence[float], clusters: Sequence[str], *, confidence: float = 0.95,
                     bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """Mean of ``values`` with a CR1 cluster-robust confidence interval.

    The standard error sums residuals within each cluster (user), scales by G/(G−1), and uses Student's
    t on G−1 degrees of freedom. With fewer than two clusters nothing can be said about the spread, so the
    interval is the whole range ``bounds``. The interval is clipped to ``bounds`` (scores live in [0, 1]).
    """
    y = np.asarray(values, dtype=float)
    if y.size != len(clusters):
        raise ValueError(f"{y.size} values but {len(clusters)} cluster labels")
    if y.size == 0:
        return Interval(math.nan, bounds[0], bounds[1], 0, 0, confidence)
    mean = float(y.mean())
    _, codes = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    n_clusters = int(codes.max()) + 1
    if n_clusters < 2:
        return Interval(mean, bounds[0], bounds[1], int(y.size), n_clusters, confidence)
    sums = np.bincount(codes, weights=y - mean, minlength=n_clusters)
    variance = n_clusters / (n_clusters - 1) * float(np.sum(sums**2)) / y.size**2
    from scipy import stats as sps

    half = float(sps.t.ppf(0.5 + confidence / 2, df=n_clusters - 1)) * math.sqrt(variance)
    low = max(bounds[0], mean - half)
    high = min(bounds[1], mean + half)
    return Interval(mean, low, high, int(y.size), n_clusters, confidence)
