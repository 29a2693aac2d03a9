"""Cluster-robust intervals by user, the input checks and the small helpers every rule shares."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ..results import (
    FAIL,
    INCONCLUSIVE,
    METRICS,
    PASS,
    Interval,
    PairResult,
    is_control,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MatchKey = tuple[str, str, str, int, int]

GATED: tuple[str, ...] = ("combined", *METRICS)
LABELS: dict[str, str] = {"combined": "Overall ρ", "semantic": "Semantic", "keyword": "Keyword",
                          "structural": "Structural", "length": "Length"}
POLICIES: tuple[str, ...] = ("fail", "pass", "warn")
GATE_MODES: tuple[str, ...] = ("mean", "confident")
_CODE = {1: PASS, -1: FAIL, 0: INCONCLUSIVE}


# --------------------------------------------------------------------------------------------------
# Cluster-robust interval


@dataclass(frozen=True)
class _ClusterStats:
    mean: float
    se: float  # CR1 cluster-robust standard error; NaN below two clusters
    n_clusters: int
    skew: float  # skewness of the per-cluster residual sums (0 when undefined)


def _cluster_stats(values: Sequence[float] | FloatArray, clusters: Sequence[str]) -> _ClusterStats:
    """Mean, CR1 standard error, number of clusters and cluster-level skewness of ``values``."""
    y = np.asarray(values, dtype=float)
    if y.size != len(clusters):
        raise ValueError(f"{y.size} values but {len(clusters)} cluster labels")
    if y.size == 0:
        return _ClusterStats(math.nan, math.nan, 0, 0.0)
    mean = float(y.mean())
    _, codes = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    codes = codes.reshape(-1)
    n_clusters = int(codes.max()) + 1
    if n_clusters < 2:
        return _ClusterStats(mean, math.nan, n_clusters, 0.0)
    sums = np.asarray(np.bincount(codes, weights=y - mean, minlength=n_clusters), dtype=float)
    variance = n_clusters / (n_clusters - 1) * float(np.sum(sums**2)) / y.size**2
    return _ClusterStats(mean, math.sqrt(variance), n_clusters, float(_skewness(sums[None, :])[0]))


def _skewness(u: FloatArray) -> FloatArray:
    """Sample skewness m3/m2^1.5 along the last axis (0 where there is no spread)."""
    dev = u - u.mean(axis=-1, keepdims=True)
    m2, m3 = (dev**2).mean(axis=-1), (dev**3).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, 0.0)


def cluster_interval(values: Sequence[float], clusters: Sequence[str], *, confidence: float = 0.95,
                     bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """Mean of ``values`` with a CR1 cluster-robust confidence interval.

    The standard error sums residuals within each cluster (user), scales by G/(G−1), and uses Student's
    t on G−1 degrees of freedom. With fewer than two clusters nothing can be said about the spread, so the
    interval is the whole range ``bounds``. The interval is clipped to ``bounds`` (scores live in [0, 1]).
    """
    cs = _cluster_stats(values, clusters)
    mean, se, n_clusters = cs.mean, cs.se, cs.n_clusters
    n = len(clusters)
    if n == 0:
        return Interval(math.nan, bounds[0], bounds[1], 0, 0, confidence)
    if n_clusters < 2:
        return Interval(mean, bounds[0], bounds[1], n, n_clusters, confidence)
    from scipy import stats as sps

    half = float(sps.t.ppf(0.5 + confidence / 2, df=n_clusters - 1)) * se
    low = max(bounds[0], mean - half)
    high = min(bounds[1], mean + half)
    return Interval(mean, low, high, n, n_clusters, confidence)


# --------------------------------------------------------------------------------------------------
# Input checks and small helpers


def _check_thresholds(thresholds: Mapping[str, float]) -> dict[str, float]:
    if not thresholds:
        raise ConfigError("thresholds: at least one gated quantity is needed (combined or a metric)")
    out: dict[str, float] = {}
    for name, value in thresholds.items():
        if name not in GATED:
            raise ConfigError(f"thresholds[{name!r}]: unknown quantity; expected one of {', '.join(GATED)}")
        try:
            threshold = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"thresholds[{name!r}]={value!r}: not a number") from None
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"thresholds[{name!r}]={value!r}: must lie in [0, 1] (scores do)")
        out[name] = threshold
    return out


def _check_alpha(alpha: float, name: str = "alpha") -> float:
    if not (isinstance(alpha, (int, float)) and 0.0 < float(alpha) < 1.0):
        raise ConfigError(f"{name}={alpha!r}: must be a number strictly between 0 and 1")
    return float(alpha)


def _check_quantities(quantities: Iterable[str], option: str = "quantities") -> tuple[str, ...]:
    out = tuple(quantities)
    if not out:
        raise ConfigError(f"{option}: at least one quantity is needed")
    for q in out:
        if q not in GATED:
            raise ConfigError(f"{option}: unknown quantity {q!r}; expected one of {', '.join(GATED)}")
    return out


def _perturbation_pairs(pairs: Iterable[PairResult]) -> list[PairResult]:
    return [p for p in pairs if not is_control(p.key.kind)]


def _values(pairs: Sequence[PairResult], quantity: str) -> FloatArray:
    """One score per pair; a non-finite score is a bug upstream and must not become a silent FAIL."""
    out = np.fromiter((p.metric(quantity) for p in pairs), dtype=float, count=len(pairs))
    if not np.all(np.isfinite(out)):
        bad = pairs[int(np.flatnonzero(~np.isfinite(out))[0])]
        raise ValueError(f"pair {bad.key.label()}: field {quantity!r} is {bad.metric(quantity)!r}, "
                         "not a finite score")
    return out


def _users(pairs: Sequence[PairResult]) -> list[str]:
    return [p.key.user_id for p in pairs]


def _user_means(pairs: Sequence[PairResult], quantity: str) -> dict[str, float]:
    """Per-user mean of ``quantity``, users in first-seen order."""
    sums: dict[str, list[float]] = {}
    for pair, value in zip(pairs, _values(pairs, quantity), strict=True):
        sums.setdefault(pair.key.user_id, []).append(float(value))
    return {user: float(np.mean(vals)) for user, vals in sums.items()}


def _phi_upper(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _fmt_threshold(value: float) -> str:
    return f"{value:g}"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _none_if_nan(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _name(quantity: str) -> str:
    return "ρ (combined)" if quantity == "combined" else quantity


def _single_model(pairs: Sequence[PairResult], where: str) -> None:
    models = sorted({p.key.model for p in pairs})
    if len(models) > 1:
        raise ValueError(f"{where}: pairs from several models ({', '.join(models)}); "
                         "gate one model at a time")
