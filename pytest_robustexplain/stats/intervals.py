"""Cluster-robust intervals by user, the input checks and the small helpers every rule shares."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
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
CODE = {1: PASS, -1: FAIL, 0: INCONCLUSIVE}


# --------------------------------------------------------------------------------------------------
# Student t quantiles


def t_quantile(q: float | FloatArray, df: float | FloatArray) -> FloatArray:
    """Student t quantile (``scipy.stats.t.ppf(q, df)``), elementwise."""
    from scipy.special import stdtrit  # lazy: loads scipy; the plugin's import stays cheap

    q_arr = np.asarray(q, dtype=float)
    # stdtrit answers +inf at q = 0 (scipy 1.17); the quantile there is −inf, as t.ppf says
    return np.where(q_arr == 0, -np.inf, np.asarray(stdtrit(np.asarray(df, dtype=float), q_arr), dtype=float))


# --------------------------------------------------------------------------------------------------
# Cluster-robust interval


@dataclass(frozen=True)
class _ClusterStats:
    mean: float
    se: float  # CR1 cluster-robust standard error; NaN below two clusters
    n_clusters: int
    skew: float  # skewness of the per-cluster residual sums (0 when undefined)


def cluster_stats(values: Sequence[float] | FloatArray, clusters: Sequence[str]) -> _ClusterStats:
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
    return _ClusterStats(mean, math.sqrt(variance), n_clusters, float(skewness(sums[None, :])[0]))


def skewness(u: FloatArray) -> FloatArray:
    """Sample skewness m3/m2^1.5 along the last axis (0 where there is no spread)."""
    dev = u - u.mean(axis=-1, keepdims=True)
    m2, m3 = (dev**2).mean(axis=-1), (dev**3).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, 0.0)


# An allowance for the users a sample did not draw. Per-user means piled against one end of the scale
# with a thin tail towards the other (most users at 0.9–1, a few far below) are the hard case: from 10–20
# users the tail is often not drawn at all, and the sample's spread and skewness then understate the
# population's, so a bound errs on that side far more often than alpha (0.08–0.15 at true means 0.05 and
# 0.95). Each bound is therefore computed as if the sample held, besides its G users, one pseudo-user of
# weight w = _UNSEEN_WEIGHT·√(G/10) at the end of the scale beyond that bound (0 for the lower bound, 1 for
# the upper). It widens a bound a lot where the users sit close together far from that end (the case that
# hides a tail) and little where they are spread out; its share of the variance, w·d²/(G·s²), shrinks like
# 1/√G, the order of the skewness error it stands in for, so the bounds stay asymptotically exact. The
# weight is chosen by simulation: benchmarks/bench_calibration.py, docs/statistics.md.
_UNSEEN_WEIGHT = 0.04
# The confident rule's lower bound adds _UNSEEN_FAILURE / m² to that weight, m being the pairs a user has in
# the gate. A generation failure scores a pair 0. With one pair a user (every kind gate of the balanced
# design) it puts a whole user at 0: a point mass that 10–40 users often do not draw, and that 0.04·√(G/10)
# of a user does not stand for — without this the rule gave false PASS up to 9.7 % at 5 % failures, 16.6 %
# at 20 %. With m pairs a user a failure moves a user's mean by 1/m, and users' means carry their failures as
# spread the sample shows, so the allowance falls fast: 0.3 at m = 1, 0.012 at the full design's 5
# severities, 0.0005 at 25 pairs. At 0.3 false PASS stays at 3.9–4.1 % up to 5 % failures. Chosen by
# simulation: benchmarks/bench_design.py --failure-weights, docs/statistics.md "Unseen failures".
_UNSEEN_FAILURE = 0.3
# Hall's transform is monotone but flat at θ = −3/γ; past |γ|·t/√n ≈ 1 its inverse runs away (bounds far
# outside anything the data suggest). Few users and a large skewness get there, so |γ| is held below this
# fraction of that point: the bound stays at most ≈ 1.8 t half-widths from the mean.
_SKEW_LIMIT = 0.9


def _with_unseen(mean: FloatArray, spread: FloatArray, n: FloatArray, end: float,
                 extra: FloatArray | float = 0.0) -> tuple[FloatArray, FloatArray]:
    """Mean and sd of ``n`` user means (mean ``mean``, sd ``spread``) with the unseen pseudo-user at ``end``.

    The pseudo-user weighs w = ``_UNSEEN_WEIGHT``·√(n/10) + ``extra``; with d = end − mean the weighted
    sample gives mean + w·d/(n + w) and variance ((n − 1)·sd² + n·w·d²/(n + w))/(n + w − 1).
    """
    w = _UNSEEN_WEIGHT * np.sqrt(n / 10.0) + extra
    d = end - mean
    variance = ((n - 1) * spread**2 + n * w * d**2 / (n + w)) / (n + w - 1)
    return mean + w * d / (n + w), np.sqrt(variance)


def _hall_inverse(v: FloatArray, gamma: FloatArray) -> FloatArray:
    """Inverse of Hall's g(θ) = θ + γθ²/3 + γ²θ³/27 = ((1 + γθ/3)³ − 1)/γ, monotone for every γ."""
    small = np.abs(gamma) < 1e-9
    g = np.where(small, 1.0, gamma)
    return np.asarray(np.where(small, v, 3.0 * (np.cbrt(1.0 + g * v) - 1.0) / g), dtype=float)


def mean_bounds(mean: FloatArray, se: FloatArray, n: FloatArray, skew: FloatArray, alpha_low: float,
                alpha_high: float, limits: tuple[float, float] = (0.0, 1.0), *,
                pairs_per_user: FloatArray | float | None = None) -> tuple[FloatArray, FloatArray]:
    """One-sided level-``alpha_low`` lower and level-``alpha_high`` upper bounds for a mean of ``n`` users.

    They invert Hall's skewness-corrected Studentized mean (Hall 1992, JRSS-B 54:221),
    T = √n·(g(θ) + γ/(6n)) with θ = (mean − μ)/(se·√n), against Student t on n − 1 df, the measured
    skewness held inside the range where the transform is well behaved (``_SKEW_LIMIT``). Each bound takes
    its mean and spread from the sample with the unseen pseudo-user at the end of the scale beyond it
    (:func:`_with_unseen`: ``limits[0]`` for the lower bound, ``limits[1]`` for the upper), so a sample
    bunched far from that end cannot hide a thin tail there. With γ = 0 and no pseudo-user this is the
    t bound. Where the spread is unknown (SE NaN, fewer than two users) the bounds are ``limits``.
    ``pairs_per_user`` (the confident rule's) adds the allowance for unseen generation failures to the
    lower bound's pseudo-user (``_UNSEEN_FAILURE``).
    """
    mean, se, n = np.asarray(mean, float), np.asarray(se, float), np.asarray(n, float)
    known = np.isfinite(se) & (n >= 2)
    safe_n = np.where(known, n, 2.0)
    gamma = np.where(known, np.asarray(skew, float), 0.0)
    spread = np.where(known, se, 0.0) * np.sqrt(safe_n)
    failures = 0.0 if pairs_per_user is None else _UNSEEN_FAILURE / np.maximum(
        np.asarray(pairs_per_user, float), 1.0) ** 2
    mean_low, spread_low = _with_unseen(mean, spread, safe_n, limits[0], failures)
    mean_high, spread_high = _with_unseen(mean, spread, safe_n, limits[1])
    t_low = t_quantile(1 - alpha_low, safe_n - 1) / np.sqrt(safe_n)
    t_high = t_quantile(1 - alpha_high, safe_n - 1) / np.sqrt(safe_n)
    g_low = np.maximum(gamma, -_SKEW_LIMIT / t_low)
    g_high = np.minimum(gamma, _SKEW_LIMIT / t_high)
    low = mean_low - spread_low * _hall_inverse(t_low - g_low / (6 * safe_n), g_low)
    high = mean_high - spread_high * _hall_inverse(-t_high - g_high / (6 * safe_n), g_high)
    low = np.clip(np.where(known, low, limits[0]), *limits)
    high = np.clip(np.where(known, high, limits[1]), *limits)
    return low, high


def cluster_interval(values: Sequence[float], clusters: Sequence[str], *, confidence: float = 0.95,
                     bounds: tuple[float, float] = (0.0, 1.0), skew_corrected: bool = True) -> Interval:
    """Mean of ``values`` with a CR1 cluster-robust, skewness-corrected confidence interval.

    The standard error sums residuals within each cluster (user) and scales by G/(G−1); the bounds are
    :func:`_bounds` at (1 − confidence)/2 each side, so they lean the way the per-user means are skewed
    (scores near the top of the scale: longer below the mean) and allow for a user the sample did not draw
    at either end of ``bounds`` (users bunched near one end may hide a thin tail towards the other). The
    interval is therefore never a point: ten users all at 1.0 do not show that the mean is 1. With fewer
    than two clusters nothing can be said about the spread, so the interval is the whole range ``bounds``;
    it is clipped to ``bounds``.
    ``skew_corrected=False`` gives the plain Student t interval on G − 1 df (for a rule whose vectorised
    twin, and so its calibration, is written for that interval).
    """
    cs = cluster_stats(values, clusters)
    mean, n_clusters = cs.mean, cs.n_clusters
    n = len(clusters)
    if n == 0:
        return Interval(math.nan, bounds[0], bounds[1], 0, 0, confidence)
    if n_clusters < 2:
        return Interval(mean, bounds[0], bounds[1], n, n_clusters, confidence)
    tail = (1 - confidence) / 2
    if not skew_corrected:
        return _t_interval(cs, n, confidence, bounds)
    low, high = mean_bounds(np.array([mean]), np.array([cs.se]), np.array([float(n_clusters)]),
                        np.array([cs.skew]), tail, tail, bounds)
    return Interval(mean, float(low[0]), float(high[0]), n, n_clusters, confidence)


def _t_interval(cs: _ClusterStats, n: int, confidence: float, bounds: tuple[float, float]) -> Interval:
    half = float(t_quantile(0.5 + confidence / 2, cs.n_clusters - 1)) * cs.se
    return Interval(cs.mean, max(bounds[0], cs.mean - half), min(bounds[1], cs.mean + half), n, cs.n_clusters,
                    confidence)


def _ratio(num: Mapping[str, float], den: Mapping[str, float], n: int, alpha: float,
           bounds: Callable[[FloatArray, FloatArray, float], tuple[float, float]]) -> Interval | None:
    """Σnum / Σden over users with the two-sided (1 − alpha) interval ``bounds(num, den, ratio)`` gives
    from the users' terms (in user order); None when Σden ≤ 0, unbounded with fewer than two users."""
    total_den = math.fsum(den.values())
    if total_den <= 1e-12:
        return None
    ratio = math.fsum(num.values()) / total_den
    users = sorted(num)
    if len(users) < 2:
        return Interval(ratio, -math.inf, math.inf, n, len(users), 1 - alpha)
    low, high = bounds(np.array([num[u] for u in users], dtype=float),
                       np.array([den[u] for u in users], dtype=float), ratio)
    return Interval(ratio, low, high, n, len(users), 1 - alpha)


def ratio_interval(num: Mapping[str, float], den: Mapping[str, float], n: int,
                   alpha: float) -> Interval | None:
    """Σnum / Σden over users with a cluster-robust (linearised) two-sided (1 − alpha) interval; None when
    Σden ≤ 0. ``n`` is the number of observations behind the users' terms (the interval's ``n``)."""
    def linearised(d: FloatArray, s: FloatArray, ratio: float) -> tuple[float, float]:
        g = len(d)
        z = [float(v) for v in d - ratio * s]
        se = math.sqrt(g / (g - 1) * math.fsum(v * v for v in z)) / math.fsum(s.tolist())
        half = float(t_quantile(1 - alpha / 2, g - 1)) * se
        return ratio - half, ratio + half

    return _ratio(num, den, n, alpha, linearised)


def fieller_interval(num: Mapping[str, float], den: Mapping[str, float], n: int,
                     alpha: float) -> Interval | None:
    """Σnum / Σden over users with Fieller's two-sided (1 − alpha) interval; None when Σden ≤ 0.

    The interval holds every r that a t test on the users' ``num − r·den`` does not reject: unlike the
    linearised (delta-method) interval of :func:`ratio_interval`, it carries the denominator's own
    uncertainty, which the delta method drops (with weak readers and a few niche users its one-sided bound
    at the limit failed up to 7.2 % of runs at alpha 5 % when issue 44 replaced it). A t test is exact only
    for normal terms: where niche users skew them, Fieller's bound at alpha 5 % failed up to 5.5 % of runs,
    and the gate runs it at ``checks.controls.FIELLER_SHARE`` of its alpha: at most 4.4 % (docs/guard.md).
    Unbounded (±inf) when Σden is not itself clear of 0 at this confidence.
    """
    def fieller(d: FloatArray, s: FloatArray, ratio: float) -> tuple[float, float]:
        g = len(d)
        c = float(t_quantile(1 - alpha / 2, g - 1)) ** 2 / g
        dm, sm = float(d.mean()), float(s.mean())
        v_dd, v_ss = float(d.var(ddof=1)), float(s.var(ddof=1))
        v_ds = float(((d - dm) * (s - sm)).sum() / (g - 1))
        # (dm − r·sm)² = c·(v_dd − 2r·v_ds + r²·v_ss): a·r² − 2b·r + e = 0.
        a, b, e = sm * sm - c * v_ss, dm * sm - c * v_ds, dm * dm - c * v_dd
        if a <= 0:
            return -math.inf, math.inf
        root = math.sqrt(max(0.0, b * b - a * e))
        return (b - root) / a, (b + root) / a

    return _ratio(num, den, n, alpha, fieller)


# --------------------------------------------------------------------------------------------------
# Distribution-free bounds: users are the unit and nothing is assumed about the shape of their values


# Up to this many users the band is the exact one-sided Kolmogorov–Smirnov value (2 ms at 1,000 users, 2.5 s
# at 100,000); beyond it Massart's DKW bound sqrt(ln(1/alpha) / 2n), which is wider, so still valid.
_EXACT_BAND_USERS = 2000


def share_lower_bound(k: float, n: int, alpha: float) -> float:
    """One-sided exact (Clopper–Pearson) lower (1 − alpha) bound of a proportion k/n (``k`` may be a sum of
    users' shares: :func:`user_share`)."""
    if n <= 0 or k <= 0:
        return 0.0
    from scipy.special import betaincinv  # lazy: loads scipy (the Beta quantile)

    return float(betaincinv(k, n - k + 1, alpha))


def share_upper_bound(k: float, n: int, alpha: float) -> float:
    """One-sided exact (Clopper–Pearson) upper (1 − alpha) bound of a proportion k/n."""
    if n <= 0 or k >= n:
        return 1.0
    from scipy.special import betaincinv  # lazy: loads numpy, scipy

    return float(betaincinv(k + 1, n - k, 1 - alpha))


def user_share(rows: Sequence[tuple[str, bool | float]]) -> tuple[float, int]:
    """(Σ over users of the user's share of flagged rows, users): a share with users as the unit.

    A user's cases are not independent — a model that copies for one user's prompt copies for all of
    them — so a share over cases claimed more certainty than it had (the copy rate at its limit was
    exceeded in 6–10 % of runs at alpha 5 %). The exact bounds take users as the trials and each user's
    share as their success; with one case a user this is the exact binomial bound it always was.
    """
    grouped: dict[str, list[float]] = {}
    for user, flag in rows:
        grouped.setdefault(user, []).append(float(flag))
    return math.fsum(math.fsum(v) / len(v) for v in grouped.values()), len(grouped)


def user_share_bounds(rows: Sequence[tuple[str, bool | float]], alpha: float) -> tuple[float, float]:
    """One-sided exact (1 − alpha) lower and upper bounds of a share with users as the unit
    (:func:`user_share`); (0, 1) when nothing was measured."""
    k, g = user_share(rows)
    return share_lower_bound(k, g, alpha), share_upper_bound(k, g, alpha)


def ks_band(n: int, alpha: float) -> float:
    """ε with P(sup(F_n − F) > ε) ≤ alpha for n users: the width of the one-sided band around their CDF."""
    if n > _EXACT_BAND_USERS:
        return math.sqrt(math.log(1 / alpha) / (2 * n))
    from scipy.special import smirnovi  # lazy: loads numpy, scipy

    return float(smirnovi(n, float(alpha)))


def free_lower_bounds(values: FloatArray, alpha: float, floor: float) -> FloatArray:
    """Per row of ``values`` (runs, users), a one-sided (1 − alpha) lower confidence bound of the mean that
    holds whatever the distribution of values ≥ ``floor`` (Anderson 1969).

    The mean is floor + ∫(1 − F); with probability 1 − alpha the true F lies below the empirical CDF plus
    ε, the exact one-sided Kolmogorov–Smirnov critical value for n users (``scipy.special.smirnovi``), so
    the mean is at least floor + Σ (x₍ᵢ₎ − x₍ᵢ₋₁₎)·max(0, 1 − (i − 1)/n − ε), x₍₀₎ = floor. Why not
    Student t: when a minority of users barely depend on the history and the rest sit bunched just above
    the threshold, a sample of five that happens to hold no one from the minority looks like a tight cluster
    above it, and t passes 12–20 % of runs at a mean exactly at the threshold; this bound charges the share
    it cannot have seen (ε) to the floor, and passed none (docs/guard.md).
    """
    x = np.sort(np.asarray(values, dtype=float), axis=-1)
    n = x.shape[-1]
    if n == 0:
        return np.full(x.shape[:-1], float(floor))
    eps = ks_band(n, alpha)
    gaps = np.diff(x, axis=-1, prepend=np.full((*x.shape[:-1], 1), float(floor)))
    weights = np.clip(1.0 - np.arange(n) / n - eps, 0.0, None)
    return np.asarray(float(floor) + (np.clip(gaps, 0.0, None) * weights).sum(axis=-1), dtype=float)


def free_lower_bound(values: Sequence[float], alpha: float, floor: float) -> float:
    """:func:`free_lower_bounds` of one sample."""
    return float(free_lower_bounds(np.asarray([list(values)], dtype=float), alpha, floor)[0])


def free_users_needed(values: Sequence[float], alpha: float, floor: float, target: float,
                      most: int = 100_000) -> int | None:
    """About how many users :func:`free_lower_bound` needs to clear ``target`` if the values' spread
    holds (the same empirical distribution, more users); None when their mean is not above the target."""
    x = np.sort(np.asarray(list(values), dtype=float))
    g = len(x)
    if g == 0 or float(x.mean()) <= target:
        return None
    gaps = np.clip(np.diff(x, prepend=float(floor)), 0.0, None)
    steps = 1.0 - np.arange(g) / g

    def bound(eps: float) -> float:
        return float(floor) + float((gaps * np.clip(steps - eps, 0.0, None)).sum())

    low, high = 0.0, 1.0  # the largest band width that still clears the target, by bisection
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if bound(mid) > target else (low, mid)
    if ks_band(most, alpha) > low:
        return None
    small, big = g, most  # the band narrows with n: the fewest users whose band is at most that wide
    while big - small > 1:
        mid = (small + big) // 2
        small, big = (small, mid) if ks_band(mid, alpha) <= low else (mid, big)
    return big


def failable(thr: FloatArray) -> int:
    """How many gated quantities could fail: a threshold of 0 is met by every score, so takes no alpha."""
    return max(1, int(np.count_nonzero(np.asarray(thr) > 0)))


# --------------------------------------------------------------------------------------------------
# Input checks and small helpers


def check_thresholds(thresholds: Mapping[str, float], user: Iterable[str] = ()) -> dict[str, float]:
    """The thresholds by quantity, checked: ρ, the four and the ``user`` metrics the pairs carry."""
    if not thresholds:
        raise ConfigError("thresholds: at least one gated quantity is needed (combined or a metric)")
    known = (*GATED, *user)
    out: dict[str, float] = {}
    for name, value in thresholds.items():
        if name not in known:
            raise ConfigError(f"thresholds[{name!r}]: unknown quantity; expected one of {', '.join(known)}")
        try:
            threshold = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"thresholds[{name!r}]={value!r}: not a number") from None
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"thresholds[{name!r}]={value!r}: must lie in [0, 1] (scores do)")
        out[name] = threshold
    return out


def check_alpha(alpha: float, name: str = "alpha") -> float:
    if not (isinstance(alpha, (int, float)) and 0.0 < float(alpha) < 1.0):
        raise ConfigError(f"{name}={alpha!r}: must be a number strictly between 0 and 1")
    return float(alpha)


def check_quantities(quantities: Iterable[str], option: str = "quantities", user: Iterable[str] = ()
                     ) -> tuple[str, ...]:
    """The quantities, checked: ρ, the four and the ``user`` metrics the pairs carry."""
    out = tuple(quantities)
    if not out:
        raise ConfigError(f"{option}: at least one quantity is needed")
    known = (*GATED, *user)
    for q in out:
        if q not in known:
            raise ConfigError(f"{option}: unknown quantity {q!r}; expected one of {', '.join(known)}")
    return out


def perturbation_pairs(pairs: Iterable[PairResult]) -> list[PairResult]:
    return [p for p in pairs if not is_control(p.key.kind)]


def pair_values(pairs: Sequence[PairResult], quantity: str) -> FloatArray:
    """One score per pair; a non-finite score is a bug upstream and must not become a silent FAIL."""
    out = np.fromiter((p.metric(quantity) for p in pairs), dtype=float, count=len(pairs))
    if not np.all(np.isfinite(out)):
        bad = pairs[int(np.flatnonzero(~np.isfinite(out))[0])]
        raise ValueError(f"pair {bad.key.label()}: field {quantity!r} is {bad.metric(quantity)!r}, "
                         "not a finite score")
    return out


def pair_users(pairs: Sequence[PairResult]) -> list[str]:
    return [p.key.user_id for p in pairs]


def per_user_means(pairs: Sequence[PairResult], quantity: str) -> dict[str, float]:
    """Per-user mean of ``quantity``, users in first-seen order."""
    sums: dict[str, list[float]] = {}
    for pair, value in zip(pairs, pair_values(pairs, quantity), strict=True):
        sums.setdefault(pair.key.user_id, []).append(float(value))
    return {user: float(np.mean(vals)) for user, vals in sums.items()}


def fmt_threshold(value: float) -> str:
    return f"{value:g}"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def none_if_nan(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def quantity_name(quantity: str) -> str:
    return "ρ (combined)" if quantity == "combined" else quantity


def single_model(pairs: Sequence[PairResult], where: str) -> None:
    models = sorted({p.key.model for p in pairs})
    if len(models) > 1:
        raise ValueError(f"{where}: pairs from several models ({', '.join(models)}); "
                         "gate one model at a time")
