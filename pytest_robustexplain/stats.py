"""Statistics: cluster-robust intervals, verdicts, sequential tests, comparisons, the paper's analyses.

Pairs that share a user are not independent (same history, same original explanation), so every
interval here is cluster-robust by user and every test whose sampling unit matters uses per-user means.
scipy is imported lazily inside functions: this module is imported by reports that may run where only
the tables are wanted.

Gated quantities are ``"combined"`` (ρ) and the metric names of :data:`METRICS`. Control pairs
(``kind == CONTROL_KIND``) measure the model's own noise floor and are left out of everything but
:func:`noise_floor`; cross-user swap pairs feed only :mod:`pytest_robustexplain.guard`. Generation-failure
pairs stay in with their 0 scores (the method's rule).

Verdicts: :func:`gate` with ``mode="mean"`` (the method's rule, plus a fragility flag) or
``mode="confident"`` (PASS / FAIL only when the data say so, one-sided bounds with Hall's 1992 skewness
correction); :class:`SequentialGate` tests by betting (Waudby-Smith & Ramdas 2023) after every user and
stops early on clear cases. :func:`simulate_confident` and :func:`simulate_sequential` run the same rules
vectorised over many simulated runs (tests, benchmarks).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import ConfigError
from .results import (
    CONTROL_KIND,
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    METRICS,
    PASS,
    GateCheck,
    Interval,
    PairResult,
    Verdict,
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

# Power assumed by the "how many users would decide it" estimate.
_PLANNING_POWER = 0.8
# Sequential betting: bets are truncated at this fraction of the largest bet that cannot lose everything
# (Waudby-Smith & Ramdas use 1/2–3/4 for confidence sequences; a test wants to stop early, so bolder).
_BET_CAP = 0.9
# Prior pseudo-observation of the plug-in mean/variance estimates (WSR use weight 1 on mean 1/2, var 1/4;
# a quarter lets the first real users dominate sooner, which matters when decisions come after ~10 users).
_PRIOR_MEAN, _PRIOR_VAR, _PRIOR_WEIGHT = 0.5, 0.25, 0.25
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


# --------------------------------------------------------------------------------------------------
# The confident rule, vectorised: shared by gate(mode="confident"), the sequential fallback and simulations


def _hall_inverse(v: FloatArray, gamma: FloatArray) -> FloatArray:
    """Inverse of Hall's g(θ) = θ + γθ²/3 + γ²θ³/27 = ((1 + γθ/3)³ − 1)/γ, monotone for every γ."""
    small = np.abs(gamma) < 1e-9
    g = np.where(small, 1.0, gamma)
    return np.asarray(np.where(small, v, 3.0 * (np.cbrt(1.0 + g * v) - 1.0) / g), dtype=float)


def _confident_codes(mean: FloatArray, se: FloatArray, n: FloatArray, skew: FloatArray, thr: FloatArray,
                     alpha_pass: float, alpha_fail: float) -> tuple[IntArray, FloatArray, FloatArray]:
    """Per-quantity codes (+1 PASS, −1 FAIL, 0 undecided) with the decision bounds.

    ``low`` is the one-sided level-``alpha_pass`` lower bound, ``high`` the one-sided level-``alpha_fail``
    upper bound, from ``n`` clusters (users). They invert Hall's skewness-corrected Studentized mean
    (Hall 1992, JRSS-B 54:221), T = √n·(g(θ) + γ/(6n)) with θ = (mean − μ)/(se·√n), against Student t
    on n − 1 df. Per-user means of bounded scores near a low threshold are skewed, and the plain t test
    then errs on one side more often than alpha (about 0.069 instead of 0.05 for 20 users around 0.2 in
    simulation; 0.054 with the correction). With γ = 0 this is exactly the t bound. Where the spread is
    unknown (SE NaN, fewer than two users) the bounds are [0, 1].
    """
    from scipy import stats as sps

    mean, se, n = np.asarray(mean, float), np.asarray(se, float), np.asarray(n, float)
    known = np.isfinite(se) & (n >= 2)
    safe_n = np.where(known, n, 2.0)
    gamma = np.where(known, np.asarray(skew, float), 0.0)
    spread = np.where(known, se, 0.0) * np.sqrt(safe_n)
    t_pass = sps.t.ppf(1 - alpha_pass, safe_n - 1) / np.sqrt(safe_n)
    t_fail = sps.t.ppf(1 - alpha_fail, safe_n - 1) / np.sqrt(safe_n)
    bias = gamma / (6 * safe_n)
    low = np.where(known, mean - spread * _hall_inverse(t_pass - bias, gamma), 0.0)
    high = np.where(known, mean - spread * _hall_inverse(-t_fail - bias, gamma), 1.0)
    low, high = np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
    codes = np.where(low >= thr, 1, np.where(high < thr, -1, 0)).astype(np.int64)
    return codes, low, high


def _combine_codes(codes: IntArray) -> IntArray:
    """Across the last axis: FAIL if any quantity fails, PASS if all pass, else undecided."""
    all_pass = np.where((codes == 1).all(axis=-1), 1, 0)
    return np.where((codes == -1).any(axis=-1), -1, all_pass).astype(np.int64)


def _users_needed(mean: FloatArray, se: FloatArray, n_clusters: int, thr: FloatArray,
                  codes: IntArray, alpha: float) -> int | None:
    """Users in total that would likely settle an undecided confident verdict (normal approximation).

    The cluster-robust SE shrinks like 1/sqrt(users), so at n users it is ``se·sqrt(G/n)``. A quantity at
    distance ``gap`` from its threshold is settled with power 80 % once ``gap ≥ (z_a + z_0.8)·se_n``, i.e.
    ``n = G·((z_a + z_0.8)·se/gap)²``, assuming the measured means hold. If some undecided quantity sits
    below its threshold the likely verdict is FAIL and the first such quantity to settle decides it
    (minimum); otherwise PASS needs every undecided quantity settled (maximum).
    """
    if n_clusters < 2:
        return None
    k = len(thr)
    undecided = np.flatnonzero(codes == 0)
    z_power = NormalDist().inv_cdf(_PLANNING_POWER)
    needs: list[tuple[bool, float]] = []
    for i in undecided:
        gap = float(mean[i] - thr[i])
        below = gap < 0
        z_a = NormalDist().inv_cdf(1 - (alpha / k if below else alpha))
        if gap == 0 or not math.isfinite(float(se[i])):
            needs.append((below, math.inf))
        else:
            needs.append((below, n_clusters * ((z_a + z_power) * float(se[i]) / abs(gap)) ** 2))
    if not needs:
        return None
    fail_side = [n for below, n in needs if below]
    total = min(fail_side) if fail_side else max(n for _, n in needs)
    if not math.isfinite(total):
        return None
    return max(n_clusters + 1, math.ceil(total))


# --------------------------------------------------------------------------------------------------
# Fixed-sample verdicts


def gate(pairs: Sequence[PairResult], *, thresholds: Mapping[str, float], mode: str = "mean",
         alpha: float = 0.05, inconclusive_policy: str = "fail") -> Verdict:
    """The verdict for one gated slice of one model's pairs.

    ``thresholds`` maps each gated quantity (``"combined"`` and/or metric names) to its minimum. Control
    pairs are ignored; generation failures count with their 0 scores.

    ``mode="mean"`` is the method's rule: a quantity passes when its mean reaches the threshold. A check
    whose (1−alpha) interval straddles the threshold is flagged ``fragile`` with the probability that a
    rerun lands on the other side.

    ``mode="confident"`` passes only when every quantity is confidently above its threshold and fails when
    any is confidently below; otherwise the verdict is INCONCLUSIVE, with an estimate of how many users
    would settle it. ``inconclusive_policy`` ("fail", "pass", "warn") is recorded in the message; the
    caller applies it with :func:`apply_policy`.
    """
    thr = _check_thresholds(thresholds)
    alpha = _check_alpha(alpha)
    if mode not in GATE_MODES:
        raise ConfigError(f"mode={mode!r}: expected one of {', '.join(GATE_MODES)} "
                          "(sequential verdicts come from SequentialGate.verdict)")
    if inconclusive_policy not in POLICIES:
        raise ConfigError(f"inconclusive_policy={inconclusive_policy!r}: "
                          f"expected one of {', '.join(POLICIES)}")
    scored = _perturbation_pairs(pairs)
    if not scored:
        raise ValueError("gate: no perturbation pairs to gate (control pairs are not gated)")
    _single_model(scored, "gate")
    if mode == "mean":
        return _gate_mean(scored, thr, alpha)
    return _gate_confident(scored, thr, alpha, inconclusive_policy)


def _gate_mean(pairs: Sequence[PairResult], thr: dict[str, float], alpha: float) -> Verdict:
    users = _users(pairs)
    checks = []
    for quantity, threshold in thr.items():
        values = _values(pairs, quantity)
        interval = cluster_interval(values.tolist(), users, confidence=1 - alpha)
        cs = _cluster_stats(values, users)
        outcome = PASS if interval.mean >= threshold else FAIL
        fragile = interval.low < threshold < interval.high
        checks.append(GateCheck(quantity, threshold, interval, outcome, fragile,
                                _flip_probability(interval.mean, cs.se, cs.n_clusters, threshold)))
    outcome = PASS if all(c.outcome == PASS for c in checks) else FAIL
    return Verdict(outcome, tuple(checks), mode="mean", message=_mean_message(outcome, checks, alpha))


def _flip_probability(mean: float, se: float, n_clusters: int, threshold: float) -> float | None:
    """Chance that a rerun's mean lands on the other side of the threshold.

    Normal approximation that treats the measured mean as the true one: a rerun's mean is taken as
    N(mean, se²) with the cluster-robust SE, so the chance is Φ(−|mean − threshold| / se). It ignores the
    uncertainty of the measured mean itself (a posterior-predictive version would use √2·se and give
    somewhat larger values) and is meant as a readable "how shaky is this" figure, not a test.
    """
    if n_clusters < 2 or not math.isfinite(se):
        return None
    if se == 0:
        return 0.0
    return _phi_upper(abs(mean - threshold) / se)


def _gate_confident(pairs: Sequence[PairResult], thr: dict[str, float], alpha: float,
                    policy: str) -> Verdict:
    users = _users(pairs)
    names = list(thr)
    k = len(names)
    stats = [_cluster_stats(_values(pairs, q), users) for q in names]
    mean = np.array([s.mean for s in stats])
    se = np.array([s.se for s in stats])
    skew = np.array([s.skew for s in stats])
    n_clusters = stats[0].n_clusters
    thresholds = np.array([thr[q] for q in names])
    # PASS needs *every* quantity confidently above: an intersection–union test. A false PASS needs the
    # one quantity that is truly below to be declared above, which happens with probability ≤ alpha on its
    # own, so no multiplicity correction is due on this side. FAIL needs only *one* quantity confidently
    # below: a union of k tests, so Bonferroni splits alpha across them to keep false FAILs ≤ alpha.
    codes, low, high = _confident_codes(mean, se, np.full(k, float(n_clusters)), skew, thresholds,
                                        alpha, alpha / k)
    confidence = 1 - alpha - alpha / k  # low is a one-sided alpha bound, high a one-sided alpha/k bound
    checks = tuple(
        GateCheck(q, thr[q], Interval(float(mean[i]), float(low[i]), float(high[i]), len(pairs), n_clusters,
                                      confidence), _CODE[int(codes[i])])
        for i, q in enumerate(names))
    outcome = _CODE[int(_combine_codes(codes))]
    needed = (_users_needed(mean, se, n_clusters, thresholds, codes, alpha)
              if outcome == INCONCLUSIVE else None)
    message = _confident_message(outcome, checks, alpha, k, n_clusters, needed, policy)
    return Verdict(outcome, checks, mode="confident", message=message, users_needed=needed)


def _describe(check: GateCheck) -> str:
    return f"{_name(check.quantity)} {check.interval.fmt()}"


def _sample_note(checks: Sequence[GateCheck]) -> str:
    interval = checks[0].interval
    return (f"{interval.n} pairs from {interval.n_clusters} users; intervals are cluster-robust by user "
            "(generation failures count as 0).")


def _mean_message(outcome: str, checks: Sequence[GateCheck], alpha: float) -> str:
    failed = [c for c in checks if c.outcome == FAIL]
    if failed:
        parts = [f"{_describe(c)} is below its threshold {_fmt_threshold(c.threshold)}" for c in failed]
        head = f"FAIL (mean rule): {'; '.join(parts)}."
    else:
        parts = [f"{_describe(c)} ≥ {_fmt_threshold(c.threshold)}" for c in checks]
        head = f"PASS (mean rule): every gated quantity meets its threshold ({'; '.join(parts)})."
    fragile = []
    for c in checks:
        if c.fragile:
            chance = ("unknown" if c.flip_probability is None
                      else f"≈ {100 * c.flip_probability:.0f} %")
            fragile.append(f"{_name(c.quantity)} — its interval straddles {_fmt_threshold(c.threshold)}, "
                           f"a rerun lands on the other side with chance {chance} (normal approximation)")
    tail = f" Fragile: {'; '.join(fragile)}." if fragile else ""
    level = f"{100 * (1 - alpha):g} %"
    return f"{head}{tail} {level} intervals, {_sample_note(checks)}"


def _confident_message(outcome: str, checks: Sequence[GateCheck], alpha: float, k: int, n_users: int,
                       needed: int | None, policy: str) -> str:
    bounds = (f"Bounds: one-sided {100 * (1 - alpha):g} % lower, one-sided {100 * (1 - alpha / k):g} % "
              f"upper (alpha split across {k} quantities for FAIL); {_sample_note(checks)}")
    if outcome == FAIL:
        parts = [f"{_describe(c)} is confidently below its threshold {_fmt_threshold(c.threshold)}"
                 for c in checks if c.outcome == FAIL]
        return f"FAIL (confident rule): {'; '.join(parts)}. {bounds}"
    if outcome == PASS:
        parts = [f"{_describe(c)} ≥ {_fmt_threshold(c.threshold)}" for c in checks]
        return ("PASS (confident rule): every gated quantity is confidently above its threshold "
                f"({'; '.join(parts)}). {bounds}")
    parts = [f"{_describe(c)} vs {_fmt_threshold(c.threshold)}" for c in checks if c.outcome == INCONCLUSIVE]
    if needed is None:
        more = ("No realistic number of users would settle it (a mean sits on its threshold or the spread "
                "is unknown).")
    else:
        more = (f"About {needed} users in total (now {n_users}) would likely settle it (80 % power if the "
                "measured means hold).")
    return ("INCONCLUSIVE (confident rule): not confidently above nor below the threshold: "
            f"{'; '.join(parts)}. {more} Inconclusive policy {policy!r}: {_policy_effect(policy)} {bounds}")


def _policy_effect(policy: str) -> str:
    return {"fail": "this counts as a failure.", "pass": "this counts as a pass.",
            "warn": "this passes with a warning."}[policy]


def apply_policy(verdict: Verdict, policy: str) -> tuple[bool, bool]:
    """``(passed, warn)`` for a verdict under an inconclusive policy ("fail", "pass", "warn").

    PASS passes and FAIL and INSENSITIVE fail whatever the policy. INCONCLUSIVE fails under "fail", passes
    under "pass", and passes with a warning under "warn". A PASS with a fragile check (mean mode) also asks
    for a warning: a rerun could well flip it; so does a passing verdict whose guard found the
    explanations insensitive under ``guard="warn"``.
    """
    if policy not in POLICIES:
        raise ConfigError(f"inconclusive_policy={policy!r}: expected one of {', '.join(POLICIES)}")
    guard = verdict.guard
    guard_warns = guard is not None and guard.policy == "warn" and guard.outcome == INSENSITIVE
    if verdict.outcome == PASS:
        return True, guard_warns or any(c.fragile for c in verdict.checks)
    if verdict.outcome in (FAIL, INSENSITIVE):
        return False, False
    if verdict.outcome != INCONCLUSIVE:
        raise ValueError(f"verdict outcome {verdict.outcome!r}: expected PASS, FAIL, INCONCLUSIVE or "
                         "INSENSITIVE")
    return policy != "fail", policy == "warn" or (policy == "pass" and guard_warns)


# --------------------------------------------------------------------------------------------------
# Sequential testing by betting (Waudby-Smith & Ramdas 2023, JRSS-B)


def _log_wealth(x: FloatArray, thr: FloatArray, sign: int) -> FloatArray:
    """Log wealth after each observation of one-sided betting tests, shape (runs, users, quantities).

    ``sign=+1`` tests H0: mean ≤ thr (its rejection is evidence for PASS); ``sign=−1`` tests
    H0: mean ≥ thr (evidence for FAIL). Wealth is Π(1 + λ_i·sign·(x_i − thr)) with λ_i chosen from the
    users before i only (predictable), so under H0 it is a non-negative supermartingale and by Ville's
    inequality P(wealth ever ≥ 1/a) ≤ a: the test may be checked after every user.

    Bets follow aGRAPA (WSR §5.3): λ = edge/(σ̂² + edge²) with edge = sign·(μ̂ − thr), floored at 0
    (never bet against the alternative) and capped at ``_BET_CAP`` of the largest bet that a worst-case
    observation (0 or 1) cannot bankrupt. μ̂ and σ̂² are WSR's running plug-in estimates with a prior
    pseudo-observation.
    """
    t = np.arange(1, x.shape[1] + 1, dtype=float)[None, :, None]
    mu = (_PRIOR_MEAN * _PRIOR_WEIGHT + np.cumsum(x, axis=1)) / (_PRIOR_WEIGHT + t)
    var = (_PRIOR_VAR * _PRIOR_WEIGHT + np.cumsum((x - mu) ** 2, axis=1)) / (_PRIOR_WEIGHT + t)
    mu_prev = np.concatenate([np.full_like(mu[:, :1], _PRIOR_MEAN), mu[:, :-1]], axis=1)
    var_prev = np.concatenate([np.full_like(var[:, :1], _PRIOR_VAR), var[:, :-1]], axis=1)
    edge = sign * (mu_prev - thr)
    # The worst observation is 0 when betting on "above" (loses thr per unit) and 1 when betting on
    # "below" (loses 1 − thr); a bet of c/room keeps at least (1 − c) of the wealth.
    room = np.maximum(thr if sign > 0 else 1.0 - thr, 1e-12)
    lam = np.clip(edge / (var_prev + edge**2), 0.0, _BET_CAP / room)
    return np.asarray(np.cumsum(np.log1p(sign * lam * (x - thr)), axis=1), dtype=float)


@dataclass(frozen=True)
class _Paths:
    log_above: FloatArray  # (runs, users, k)
    log_below: FloatArray
    rejected_above: npt.NDArray[np.bool_]  # sticky: rejected at or before each step
    rejected_below: npt.NDArray[np.bool_]
    decided: npt.NDArray[np.bool_]  # (runs, users)
    fail: npt.NDArray[np.bool_]


def _paths(x: FloatArray, thr: FloatArray, alpha_seq: float) -> _Paths:
    k = x.shape[-1]
    log_above, log_below = _log_wealth(x, thr, +1), _log_wealth(x, thr, -1)
    # Once wealth has crossed 1/a the hypothesis stays rejected: Ville bounds the chance of *ever* crossing.
    rej_above = np.maximum.accumulate(log_above >= math.log(1 / alpha_seq), axis=1)
    rej_below = np.maximum.accumulate(log_below >= math.log(k / alpha_seq), axis=1)
    fail = np.asarray(rej_below.any(axis=-1), dtype=bool)
    decided = np.asarray(fail | rej_above.all(axis=-1), dtype=bool)
    return _Paths(log_above, log_below, rej_above, rej_below, decided, fail)


def _check_user_means(x: FloatArray) -> FloatArray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 3:
        raise ValueError(f"user_means: expected shape (runs, users, quantities), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min(initial=0.0) < 0 or arr.max(initial=0.0) > 1:
        raise ValueError("user_means: every per-user mean must be a finite number in [0, 1]")
    return arr


# Alpha is split evenly between the betting tests and the fixed fallback at the cap. Giving the bets more
# (0.8) saves one user of twenty on very clear cases but lets the fallback decide fewer close cases
# (agreement with the fixed protocol at a gap of 0.1 drops from 98.8 % to 95 % in simulation).
DEFAULT_FALLBACK_SHARE = 0.5


def _alpha_parts(alpha: float, fallback_share: float) -> tuple[float, float]:
    if not (isinstance(fallback_share, (int, float)) and 0.0 <= float(fallback_share) < 1.0):
        raise ConfigError(f"fallback_share={fallback_share!r}: must lie in [0, 1)")
    return alpha * (1 - fallback_share), alpha * fallback_share


def simulate_sequential(user_means: FloatArray, thresholds: Mapping[str, float], *, alpha: float = 0.05,
                        fallback_share: float = DEFAULT_FALLBACK_SHARE) -> tuple[IntArray, IntArray]:
    """Vectorised :class:`SequentialGate` over many runs: ``(outcome codes, users used)`` per run.

    ``user_means`` has shape (runs, users, quantities), the quantities in the order of ``thresholds``;
    each run feeds its users in order and stops at the first decision, or falls back to the confident
    rule after the last user (the cap). Codes: +1 PASS, −1 FAIL, 0 INCONCLUSIVE. Used by the simulation
    tests and benchmarks; :class:`SequentialGate` runs exactly this computation on one run.
    """
    thr = np.array(list(_check_thresholds(thresholds).values()))
    alpha_seq, alpha_fix = _alpha_parts(_check_alpha(alpha), fallback_share)
    x = _check_user_means(user_means)
    if x.shape[-1] != thr.size:
        raise ValueError(f"user_means has {x.shape[-1]} quantities but {thr.size} thresholds")
    paths = _paths(x, thr, alpha_seq)
    has = paths.decided.any(axis=1)
    first = np.argmax(paths.decided, axis=1)
    rows = np.arange(x.shape[0])
    codes = np.where(paths.fail[rows, first], -1, 1)
    fallback = _fallback_codes(x, thr, alpha_fix)
    outcome = np.where(has, codes, fallback).astype(np.int64)
    used = np.where(has, first + 1, x.shape[1]).astype(np.int64)
    return outcome, used


def _fallback_codes(x: FloatArray, thr: FloatArray, alpha_fix: float,
                    per_quantity: bool = False) -> IntArray:
    """The confident rule on per-user means at level ``alpha_fix`` (0 everywhere when it has no alpha)."""
    n = x.shape[1]
    if alpha_fix <= 0 or n < 2:
        shape = x.shape[::2] if per_quantity else x.shape[:1]
        return np.zeros(shape, dtype=np.int64)
    mean = x.mean(axis=1)
    se = x.std(axis=1, ddof=1) / math.sqrt(n)
    skew = _skewness(np.moveaxis(x, 1, -1))
    codes, _, _ = _confident_codes(mean, se, np.full_like(mean, float(n)), skew, thr,
                                   alpha_fix, alpha_fix / thr.size)
    return codes if per_quantity else _combine_codes(codes)


def simulate_confident(user_means: FloatArray, thresholds: Mapping[str, float], *,
                       alpha: float = 0.05) -> IntArray:
    """Vectorised ``gate(mode="confident")`` over many runs, from per-user means (codes as above).

    With equally many pairs per user the CR1 cluster-robust SE of the pair mean equals the ordinary SE of
    the per-user means, so this is exactly the confident rule on such runs.
    """
    thr = np.array(list(_check_thresholds(thresholds).values()))
    x = _check_user_means(user_means)
    return _fallback_codes(x, thr, _check_alpha(alpha))


def user_order(user_ids: Iterable[str], seed: int) -> list[str]:
    """A seeded random order of the users, the same in every process and for any input order.

    The sequential test is valid when users arrive in an order that does not depend on their scores;
    feed results to :meth:`SequentialGate.update` in this order (buffer those that finish early).
    """
    ids = [str(u) for u in user_ids]
    if len(set(ids)) != len(ids):
        dupes = sorted({u for u in ids if ids.count(u) > 1})
        raise ValueError(f"user_order: duplicate user ids {', '.join(dupes[:5])}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed={seed!r}: must be a non-negative integer")
    base = sorted(ids)
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    return [base[int(i)] for i in rng.permutation(len(base))]


class SequentialGate:
    """Anytime-valid gate that looks after every user and stops as soon as the verdict is clear.

    For each gated quantity two one-sided tests by betting run on the per-user means (the sampling unit;
    Waudby-Smith & Ramdas 2023): H0 mean ≤ threshold (rejected → evidence for PASS) and H0 mean ≥
    threshold (rejected → evidence for FAIL). PASS once every quantity's "above" test has rejected (an
    intersection–union rule, no correction needed); FAIL once any "below" test has rejected, with its
    alpha split across the quantities. If both happen on the same user, FAIL wins.

    ``alpha`` is shared between the betting tests (``1 − fallback_share``) and the fixed confident rule
    that decides on what was seen when the cap ``max_users`` is reached or :meth:`finish` is called; the
    two routes' error chances add up, so the split keeps false PASS and false FAIL each ≤ alpha.

    A limit of the method worth knowing: observations are only known to lie in [0, 1], so a test valid for
    every such distribution cannot grow its wealth faster than (1 + gap/threshold) per user; near a 0.5
    threshold a gap of 0.1 needs about 20 users to reach 1/0.025, so early stops come from large gaps.
    """

    def __init__(self, thresholds: Mapping[str, float], *, alpha: float = 0.05, max_users: int | None = None,
                 fallback_share: float = DEFAULT_FALLBACK_SHARE) -> None:
        self.thresholds = _check_thresholds(thresholds)
        self.alpha = _check_alpha(alpha)
        if max_users is not None and (isinstance(max_users, bool) or not isinstance(max_users, int)
                                      or max_users < 1):
            raise ConfigError(f"max_users={max_users!r}: must be a positive integer or None")
        self.max_users = max_users
        self.fallback_share = float(fallback_share)
        self._alpha_seq, self._alpha_fix = _alpha_parts(self.alpha, fallback_share)
        self._names = tuple(self.thresholds)
        self._thr = np.array([self.thresholds[q] for q in self._names])
        self._obs: list[list[float]] = []
        self._paths: _Paths | None = None
        self._outcome: str | None = None
        self._decided_by: str | None = None
        self._check_codes: dict[str, str] = {}

    # -- feeding -----------------------------------------------------------------------------------

    def update(self, user_means: Mapping[str, float]) -> None:
        """Add one user's per-quantity means (extra quantities are ignored); may decide the gate."""
        if self.decided:
            raise RuntimeError(f"SequentialGate already decided ({self._outcome}) after {self.n_users} "
                               "users; stop feeding it (check .decided first)")
        row = []
        for q in self._names:
            if q not in user_means:
                raise ValueError(f"user_means: missing gated quantity {q!r}")
            value = float(user_means[q])
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"user_means[{q!r}]={user_means[q]!r}: must be a finite number in [0, 1]")
            row.append(value)
        self._obs.append(row)
        self._paths = _paths(np.asarray(self._obs, dtype=float)[None], self._thr, self._alpha_seq)
        if bool(self._paths.decided[0, -1]):
            self._decide_sequential()
        elif self.max_users is not None and self.n_users >= self.max_users:
            self._fall_back()

    def finish(self) -> None:
        """No more users will come: decide now with the fixed confident rule on what was seen."""
        if not self.decided:
            self._fall_back()

    def _decide_sequential(self) -> None:
        assert self._paths is not None
        fail = bool(self._paths.fail[0, -1])
        self._outcome, self._decided_by = (FAIL if fail else PASS), "sequential"
        above, below = self._paths.rejected_above[0, -1], self._paths.rejected_below[0, -1]
        self._check_codes = {q: FAIL if below[i] else PASS if above[i] else INCONCLUSIVE
                             for i, q in enumerate(self._names)}

    def _fall_back(self) -> None:
        x = np.asarray(self._obs, dtype=float).reshape(1, -1, len(self._names))
        codes = _fallback_codes(x, self._thr, self._alpha_fix, per_quantity=True)[0]
        self._check_codes = {q: _CODE[int(codes[i])] for i, q in enumerate(self._names)}
        self._outcome = _CODE[int(_combine_codes(codes))]
        self._decided_by = "fallback"

    # -- state -------------------------------------------------------------------------------------

    @property
    def decided(self) -> bool:
        """True once a verdict is reached (early, at the cap, or after :meth:`finish`): stop feeding."""
        return self._outcome is not None

    @property
    def outcome(self) -> str | None:
        """PASS, FAIL or INCONCLUSIVE once decided, else None."""
        return self._outcome

    @property
    def decided_by(self) -> str | None:
        """``"sequential"`` (a betting test rejected), ``"fallback"`` (the fixed rule at the end) or None."""
        return self._decided_by

    @property
    def n_users(self) -> int:
        return len(self._obs)

    @property
    def wealth(self) -> dict[str, dict[str, float]]:
        """Current wealth of each quantity's "above" (→ PASS) and "below" (→ FAIL) test."""
        if self._paths is None:
            return {q: {"above": 1.0, "below": 1.0} for q in self._names}
        return {q: {"above": float(np.exp(self._paths.log_above[0, -1, i])),
                    "below": float(np.exp(self._paths.log_below[0, -1, i]))}
                for i, q in enumerate(self._names)}

    @property
    def rejected(self) -> dict[str, dict[str, bool]]:
        """Whether each test has rejected its null so far (rejections are permanent)."""
        if self._paths is None:
            return {q: {"above": False, "below": False} for q in self._names}
        return {q: {"above": bool(self._paths.rejected_above[0, -1, i]),
                    "below": bool(self._paths.rejected_below[0, -1, i])}
                for i, q in enumerate(self._names)}

    @property
    def rejection_levels(self) -> dict[str, float]:
        """Wealth each test must reach: 1/a for "above", k/a for "below" (a = the betting tests' alpha)."""
        return {"above": 1 / self._alpha_seq, "below": len(self._names) / self._alpha_seq}

    # -- verdict -----------------------------------------------------------------------------------

    def verdict(self, pairs: Sequence[PairResult]) -> Verdict:
        """The verdict (mode "sequential") with (1 − alpha) intervals from the pairs seen."""
        scored = _perturbation_pairs(pairs)
        if not scored:
            raise ValueError("SequentialGate.verdict: no perturbation pairs (control pairs are not gated)")
        _single_model(scored, "SequentialGate.verdict")
        users = _users(scored)
        checks = []
        stats = []
        for q in self._names:
            values = _values(scored, q)
            stats.append(_cluster_stats(values, users))
            interval = cluster_interval(values.tolist(), users, confidence=1 - self.alpha)
            checks.append(GateCheck(q, self.thresholds[q], interval, self._check_codes.get(q, INCONCLUSIVE)))
        outcome = self._outcome or INCONCLUSIVE
        needed = None
        if outcome == INCONCLUSIVE:
            mean = np.array([s.mean for s in stats])
            se = np.array([s.se for s in stats])
            codes = np.zeros(len(self._names), dtype=np.int64)
            needed = _users_needed(mean, se, stats[0].n_clusters, self._thr, codes, self.alpha)
        return Verdict(outcome, tuple(checks), mode="sequential",
                       message=self._message(outcome, checks, needed), users_needed=needed)

    def _message(self, outcome: str, checks: Sequence[GateCheck], needed: int | None) -> str:
        cap = f" of at most {self.max_users}" if self.max_users is not None else ""
        seen = f"after {self.n_users}{cap} users"
        wealth = self.wealth
        levels = self.rejection_levels
        note = (f"{100 * (1 - self.alpha):g} % intervals; {_sample_note(checks)} Betting tests use "
                f"alpha {self._alpha_seq:g}, the fallback rule {self._alpha_fix:g}.")
        if self._decided_by == "sequential" and outcome == FAIL:
            parts = [f"{_describe(c)} is below {_fmt_threshold(c.threshold)} (wealth "
                     f"{wealth[c.quantity]['below']:.3g} ≥ {levels['below']:.3g})"
                     for c in checks if c.outcome == FAIL]
            return f"FAIL (sequential test, decided {seen}): {'; '.join(parts)}. {note}"
        if self._decided_by == "sequential":
            parts = [f"{_describe(c)} ≥ {_fmt_threshold(c.threshold)} (wealth "
                     f"{wealth[c.quantity]['above']:.3g})" for c in checks]
            return (f"PASS (sequential test, decided {seen}): every gated quantity is above its threshold, "
                    f"each betting test reached {levels['above']:.3g}: {'; '.join(parts)}. {note}")
        if self._decided_by == "fallback" and outcome != INCONCLUSIVE:
            word = "confidently below" if outcome == FAIL else "confidently above"
            parts = [f"{_describe(c)} vs {_fmt_threshold(c.threshold)}" for c in checks
                     if c.outcome == outcome]
            return (f"{outcome} (sequential test undecided {seen}; fixed confident rule on the user means): "
                    f"{word} its threshold: {'; '.join(parts)}. {note}")
        parts = [f"{_describe(c)} vs {_fmt_threshold(c.threshold)}" for c in checks
                 if c.outcome == INCONCLUSIVE]
        state = ("no decision yet" if self._decided_by is None
                 else "neither the betting tests nor the fallback rule decided")
        more = (f" About {needed} users in total would likely settle it (80 % power, normal approximation)."
                if needed is not None else "")
        return f"INCONCLUSIVE (sequential test, {state} {seen}): {'; '.join(parts)}.{more} {note}"


# --------------------------------------------------------------------------------------------------
# Noise floor


def noise_floor(pairs: Sequence[PairResult], *, confidence: float = 0.95) -> Interval | None:
    """ρ of control pairs (same history, resampled): the model's own agreement with itself, or None."""
    controls = [p for p in pairs if p.key.kind == CONTROL_KIND]
    if not controls:
        return None
    return cluster_interval(_values(controls, "combined").tolist(), _users(controls), confidence=confidence)


# --------------------------------------------------------------------------------------------------
# Matching two runs


def _index(pairs: Iterable[PairResult], side: str) -> dict[MatchKey, PairResult]:
    out: dict[MatchKey, PairResult] = {}
    for p in _perturbation_pairs(pairs):
        key = p.key.match_key()
        if key in out:
            raise ValueError(f"{side}: two pairs with the same key ({p.key.label()}); one run per side, "
                             "one model per side")
        out[key] = p
    return out


@dataclass(frozen=True)
class _Matched:
    left: list[PairResult]
    right: list[PairResult]
    only_left: tuple[MatchKey, ...]
    only_right: tuple[MatchKey, ...]


def _match(left: Sequence[PairResult], right: Sequence[PairResult], names: tuple[str, str]) -> _Matched:
    a, b = _index(left, names[0]), _index(right, names[1])
    common = sorted(a.keys() & b.keys())
    if not common:
        raise ValueError(f"{names[0]} and {names[1]} share no pairs (matched on user, item, kind, severity, "
                         "repeat): were they run on the same data with the same seed?")
    return _Matched([a[k] for k in common], [b[k] for k in common],
                    tuple(sorted(a.keys() - b.keys())), tuple(sorted(b.keys() - a.keys())))


def _paired_user_means(m: _Matched, quantity: str) -> tuple[list[str], FloatArray, FloatArray]:
    ua, ub = _user_means(m.left, quantity), _user_means(m.right, quantity)
    users = list(ua)
    return users, np.array([ua[u] for u in users]), np.array([ub[u] for u in users])


# --------------------------------------------------------------------------------------------------
# Baseline regression (non-inferiority)


@dataclass(frozen=True)
class NonInferiorityRow:
    """One quantity: mean of per-user differences (current − baseline) with its (1 − 2·alpha) interval.

    That interval's low end is the one-sided test's bound: the row passes when it lies above −margin.
    """

    quantity: str
    diff: Interval
    p_value: float | None
    passed: bool
    n_users: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NonInferiorityResult:
    """Is the current run no worse than the baseline by more than ``margin`` on every quantity?"""

    passed: bool
    margin: float
    alpha: float
    rows: tuple[NonInferiorityRow, ...]
    n_matched: int
    unmatched_baseline: tuple[MatchKey, ...]
    unmatched_current: tuple[MatchKey, ...]
    message: str

    @property
    def failed_rows(self) -> tuple[NonInferiorityRow, ...]:
        return tuple(r for r in self.rows if not r.passed)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["n_unmatched_baseline"] = len(self.unmatched_baseline)
        out["n_unmatched_current"] = len(self.unmatched_current)
        return out


def _one_sided_greater(values: FloatArray) -> float | None:
    """p of a one-sample t test of H0: mean ≤ 0 against mean > 0 (scipy), with the degenerate cases."""
    from scipy import stats as sps

    if values.size < 2:
        return None
    if np.all(values == values[0]):
        # No spread: scipy returns NaN (or a precision warning); the answer is certain either way.
        return 0.0 if values[0] > 0 else 1.0
    return float(sps.ttest_1samp(values, 0.0, alternative="greater").pvalue)


def non_inferiority(baseline: Sequence[PairResult], current: Sequence[PairResult], *, margin: float,
                    alpha: float = 0.05, quantities: Sequence[str] = GATED) -> NonInferiorityResult:
    """Test, per quantity, H0: mean(current − baseline) ≤ −margin against "no worse than margin".

    Pairs are matched on (user, item, kind, severity, repeat); control pairs are left out. The sampling
    unit is the user: each user's matched pairs give one mean difference d, and ``scipy.stats.ttest_1samp``
    tests d + margin > 0 (one-sided). Overall passed when every quantity passes.
    """
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ConfigError(f"margin={margin!r}: must be a non-negative number")
    alpha = _check_alpha(alpha)
    names = _check_quantities(quantities)
    matched = _match(baseline, current, ("baseline", "current"))
    rows = []
    for q in names:
        users, base, cur = _paired_user_means(matched, q)
        d = cur - base
        p = _one_sided_greater(d + margin)
        diff = cluster_interval(d.tolist(), users, confidence=1 - 2 * alpha, bounds=(-1.0, 1.0))
        rows.append(NonInferiorityRow(q, diff, p, p is not None and p < alpha, len(users)))
    passed = all(r.passed for r in rows)
    message = _non_inferiority_message(passed, rows, margin, alpha, matched)
    return NonInferiorityResult(passed, float(margin), alpha, tuple(rows), len(matched.left),
                                matched.only_left, matched.only_right, message)


def _non_inferiority_message(passed: bool, rows: Sequence[NonInferiorityRow], margin: float, alpha: float,
                             matched: _Matched) -> str:
    unmatched = ""
    if matched.only_left or matched.only_right:
        unmatched = (f" Unmatched pairs: {len(matched.only_left)} only in the baseline, "
                     f"{len(matched.only_right)} only in the current run (listed in the JSON report).")
    level = f"{100 * (1 - 2 * alpha):g} %"
    basis = (f"{len(matched.left)} matched pairs from {rows[0].n_users} users; per-user mean differences "
             f"(current − baseline), one-sided t test at alpha {alpha:g}, {level} intervals.")
    if passed:
        head = (f"No regression beyond the margin {margin:g}: every quantity's difference is confidently "
                f"above −{margin:g} ({'; '.join(f'{_name(r.quantity)} {r.diff.fmt()}' for r in rows)}).")
    else:
        parts = []
        for r in rows:
            if r.passed:
                continue
            why = ("fewer than two users, cannot test" if r.p_value is None
                   else f"p = {_fmt_p(r.p_value)}")
            parts.append(f"{_name(r.quantity)} changed by {r.diff.fmt()} ({why})")
        head = (f"Possible regression: not shown to be within −{margin:g} of the baseline for "
                f"{'; '.join(parts)}.")
    return f"{head} {basis}{unmatched}"


# --------------------------------------------------------------------------------------------------
# Model comparison


@dataclass(frozen=True)
class ComparisonRow:
    """One quantity compared between two models on matched pairs (Δ and d_z are B relative to A)."""

    quantity: str
    label: str
    mean_a: Interval
    mean_b: Interval
    delta_pct: float | None
    p_value: float | None
    p_holm: float | None
    d_z: float | None
    significant: bool
    n_units: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """The model comparison table: Overall ρ and each metric, Holm-corrected across the rows."""

    names: tuple[str, str]
    rows: tuple[ComparisonRow, ...]
    alpha: float
    unit: str
    n_matched: int
    unmatched_a: tuple[MatchKey, ...]
    unmatched_b: tuple[MatchKey, ...]
    conclusion: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm step-down adjusted p-values (None entries stay None and are not counted in the family)."""
    valid = [(p, i) for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    m = len(valid)
    for rank, (p, i) in enumerate(sorted(valid)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def _paired_test(a: FloatArray, b: FloatArray) -> tuple[float | None, float | None]:
    """(p of scipy's paired t test, Cohen's d_z = mean(b − a)/sd(b − a)) with the degenerate cases."""
    from scipy import stats as sps

    d = b - a
    if d.size < 2:
        return None, None
    if np.all(d == d[0]):
        # No spread in the differences: scipy returns NaN; identical models differ by nothing (p = 1),
        # a constant non-zero shift is certain (p = 0) but has no finite effect size.
        return (1.0, 0.0) if d[0] == 0 else (0.0, None)
    p = float(sps.ttest_rel(b, a).pvalue)
    return p, float(d.mean() / d.std(ddof=1))


def compare_models(pairs_a: Sequence[PairResult], pairs_b: Sequence[PairResult], *,
                   names: tuple[str, str] = ("A", "B"), alpha: float = 0.01,
                   unit: str = "user") -> Comparison:
    """Compare two models on matched pairs: means with intervals, Δ %, paired t test, d_z, Holm.

    ``unit="user"`` (default) runs ``scipy.stats.ttest_rel`` and d_z on per-user means of the matched
    pairs, which respects that pairs of one user are not independent; ``unit="pair"`` uses the pairs
    themselves, as the paper did (smaller p-values, but they overstate the evidence). Rows are flagged
    significant when the Holm-adjusted p is below ``alpha`` (the paper recommends 0.01).
    """
    alpha = _check_alpha(alpha)
    if unit not in ("user", "pair"):
        raise ConfigError(f"unit={unit!r}: expected 'user' or 'pair'")
    if len(names) != 2 or names[0] == names[1]:
        raise ConfigError(f"names={names!r}: two different names are needed")
    matched = _match(pairs_a, pairs_b, (str(names[0]), str(names[1])))
    users = _users(matched.left)
    raw = []
    for q in GATED:
        va, vb = _values(matched.left, q), _values(matched.right, q)
        if unit == "user":
            _, ua, ub = _paired_user_means(matched, q)
            p, d_z = _paired_test(ua, ub)
            n_units = len(ua)
        else:
            p, d_z = _paired_test(va, vb)
            n_units = len(va)
        ia, ib = cluster_interval(va.tolist(), users), cluster_interval(vb.tolist(), users)
        delta = (ib.mean - ia.mean) / ia.mean * 100 if ia.mean != 0 else None
        raw.append((q, ia, ib, delta, p, d_z, n_units))
    adjusted = holm([r[4] for r in raw])
    rows = tuple(ComparisonRow(q, LABELS[q], ia, ib, delta, p, adj, d_z, adj is not None and adj < alpha, n)
                 for (q, ia, ib, delta, p, d_z, n), adj in zip(raw, adjusted, strict=True))
    conclusion = _conclusion(rows, (str(names[0]), str(names[1])), alpha)
    return Comparison((str(names[0]), str(names[1])), rows, alpha, unit, len(matched.left),
                      matched.only_left, matched.only_right, conclusion)


def _gain(row: ComparisonRow, names: tuple[str, str]) -> tuple[str, str]:
    """(more robust model, "+x.x %" of its gain over the other) for a row."""
    b_better = row.mean_b.mean >= row.mean_a.mean
    winner, base, top = (names[1], row.mean_a.mean, row.mean_b.mean) if b_better else (
        names[0], row.mean_b.mean, row.mean_a.mean)
    pct = f"+{(top - base) / base * 100:.1f} %" if base else f"+{top - base:.3f}"
    return winner, pct


def _conclusion(rows: Sequence[ComparisonRow], names: tuple[str, str], alpha: float) -> str:
    significant = [r for r in rows if r.significant]
    overall = rows[0]
    if overall.significant:
        winner, pct = _gain(overall, names)
        same_side = [r for r in significant if _gain(r, names)[0] == winner]
        best = max(same_side, key=lambda r: abs(r.mean_b.mean - r.mean_a.mean) / max(
            min(r.mean_a.mean, r.mean_b.mean), 1e-12))
        _, best_pct = _gain(best, names)
        return (f"{winner} is more robust: overall ρ {pct} (Holm p {_fmt_p(overall.p_holm)}); largest gain "
                f"{best.label.lower()} {best_pct}.")
    if significant:
        best = max(significant, key=lambda r: abs(r.mean_b.mean - r.mean_a.mean) / max(
            min(r.mean_a.mean, r.mean_b.mean), 1e-12))
        winner, pct = _gain(best, names)
        return (f"No significant difference in overall robustness (Holm p {_fmt_p(overall.p_holm)} ≥ "
                f"{alpha:g}); largest significant metric difference: {best.label.lower()} {pct} "
                f"for {winner}.")
    return (f"No significant difference between {names[0]} and {names[1]} (Holm-corrected p ≥ {alpha:g} "
            "on every row).")


# --------------------------------------------------------------------------------------------------
# The paper's analyses


def severity_degradation(pairs: Sequence[PairResult]) -> float | None:
    """Relative change of mean ρ from severity 1 to severity 5, in % (negative = less robust at L5).

    The paper reports 1.7 % degradation for 0.533 → 0.524, i.e. −1.7 here. None when either level is
    missing or ρ at L1 is 0.
    """
    scored = _perturbation_pairs(pairs)
    l1 = [p.combined for p in scored if p.key.severity == 1]
    l5 = [p.combined for p in scored if p.key.severity == 5]
    if not l1 or not l5:
        return None
    m1, m5 = float(np.mean(l1)), float(np.mean(l5))
    return None if m1 == 0 else (m5 - m1) / m1 * 100


@dataclass(frozen=True)
class AnovaResult:
    """One-way ANOVA of ρ across perturbation kinds (pairs as observations, as in the paper)."""

    f: float | None
    p: float | None
    df_between: int
    df_within: int
    partial_eta_sq: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TukeyRow:
    """Tukey HSD for one pair of kinds: mean ρ(kind_a) − mean ρ(kind_b) with its 95 % interval."""

    kind_a: str
    kind_b: str
    diff: float
    p: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KindDifferences:
    """Do perturbation kinds differ? Friedman on per-user kind means, ANOVA and Tukey HSD on pairs.

    Friedman respects that each user sees every kind (users are blocks); the ANOVA and Tukey table treat
    pairs as independent, as the paper did, and so overstate the evidence when users differ.
    """

    kinds: tuple[str, ...]
    kind_means: dict[str, float]
    friedman: tuple[float, float] | None
    friedman_users: int
    anova: AnovaResult | None
    tukey: tuple[TukeyRow, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _friedman(scored: Sequence[PairResult], kinds: Sequence[str], notes: list[str]) -> tuple[
        tuple[float, float] | None, int]:
    from scipy import stats as sps

    per_user: dict[str, dict[str, list[float]]] = {}
    for p in scored:
        per_user.setdefault(p.key.user_id, {}).setdefault(p.key.kind, []).append(p.combined)
    complete = [u for u, by_kind in per_user.items() if all(k in by_kind for k in kinds)]
    if len(complete) < len(per_user):
        notes.append(f"Friedman: {len(per_user) - len(complete)} users without every kind were left out.")
    if len(kinds) < 3 or len(complete) < 2:
        notes.append("Friedman needs at least 3 kinds and 2 users with all of them.")
        return None, len(complete)
    samples = [[float(np.mean(per_user[u][k])) for u in complete] for k in kinds]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.friedmanchisquare(*samples)
    stat, p_value = _none_if_nan(float(res.statistic)), _none_if_nan(float(res.pvalue))
    if stat is None or p_value is None:
        notes.append("Friedman is undefined here (every user ranks the kinds as ties).")
        return None, len(complete)
    return (stat, p_value), len(complete)


def _anova_tukey(groups: Sequence[FloatArray], kinds: Sequence[str], notes: list[str]) -> tuple[
        AnovaResult | None, tuple[TukeyRow, ...]]:
    from scipy import stats as sps

    n = sum(g.size for g in groups)
    df_b, df_w = len(groups) - 1, n - len(groups)
    if len(groups) < 2 or df_w < 1:
        notes.append("ANOVA and Tukey HSD need at least 2 kinds and more pairs than kinds.")
        return None, ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant groups: scipy warns and returns NaN, reported as None
        res = sps.f_oneway(*groups)
    f, p = _none_if_nan(float(res.statistic)), _none_if_nan(float(res.pvalue))
    eta = None if f is None else f * df_b / (f * df_b + df_w)
    anova = AnovaResult(f, p, df_b, df_w, eta)
    if f is None:
        notes.append("ANOVA is undefined here (no variation within kinds).")
        return anova, ()
    tk = sps.tukey_hsd(*groups)
    ci = tk.confidence_interval(confidence_level=0.95)
    rows = tuple(TukeyRow(kinds[i], kinds[j], float(tk.statistic[i, j]), float(tk.pvalue[i, j]),
                          float(ci.low[i, j]), float(ci.high[i, j]))
                 for i in range(len(kinds)) for j in range(i + 1, len(kinds)))
    return anova, rows


def kind_differences(pairs: Sequence[PairResult]) -> KindDifferences:
    """Friedman (per-user kind means), one-way ANOVA with partial η², and Tukey HSD across kinds (ρ)."""
    scored = _perturbation_pairs(pairs)
    kinds = tuple(sorted({p.key.kind for p in scored}))
    groups = [np.array([p.combined for p in scored if p.key.kind == k], dtype=float) for k in kinds]
    notes: list[str] = []
    friedman, n_users = _friedman(scored, kinds, notes)
    anova, tukey = _anova_tukey(groups, kinds, notes)
    means = {k: float(g.mean()) for k, g in zip(kinds, groups, strict=True)}
    return KindDifferences(kinds, means, friedman, n_users, anova, tukey, tuple(notes))


@dataclass(frozen=True)
class MetricCorrelations:
    """Pearson r (and p) between the four metrics over scored pairs; None where undefined."""

    r: dict[str, dict[str, float | None]]
    p: dict[str, dict[str, float | None]]
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def metric_correlations(pairs: Sequence[PairResult]) -> MetricCorrelations:
    """4×4 Pearson correlations (scipy.stats.pearsonr) between the metrics.

    Generation failures are left out: they score 0 on every metric at once and would manufacture
    correlation that says nothing about how the metrics relate.
    """
    from scipy import stats as sps

    scored = [p for p in _perturbation_pairs(pairs) if p.failure is None]
    cols = {m: _values(scored, m) for m in METRICS}
    r: dict[str, dict[str, float | None]] = {m: {} for m in METRICS}
    p: dict[str, dict[str, float | None]] = {m: {} for m in METRICS}
    for i, a in enumerate(METRICS):
        for b in METRICS[i:]:
            if len(scored) < 3 or np.ptp(cols[a]) == 0 or np.ptp(cols[b]) == 0:
                rv, pv = None, None
            elif a == b:
                rv, pv = 1.0, 0.0
            else:
                res = sps.pearsonr(cols[a], cols[b])
                rv, pv = _none_if_nan(float(res.statistic)), _none_if_nan(float(res.pvalue))
            r[a][b] = r[b][a] = rv
            p[a][b] = p[b][a] = pv
    return MetricCorrelations(r, p, len(scored))


@dataclass(frozen=True)
class Stratum:
    """Users whose history length falls in one tertile, with their mean ρ."""

    label: str
    min_length: float
    max_length: float
    n_users: int
    mean: Interval

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UserSpread:
    """Per-user mean ρ, their spread, and (when the spread is large) a split by history length."""

    user_means: dict[str, float]
    sd: float | None
    sd_limit: float
    stratified: bool
    strata: tuple[Stratum, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def user_spread(pairs: Sequence[PairResult], *, sd_limit: float = 0.2) -> UserSpread:
    """Per-user means of ρ and their sd; above ``sd_limit`` (the paper's 0.2) strata by history length.

    A user's history length is the mean of ``history_length`` over their pairs. Users are cut into
    tertiles of it (ties may leave a tertile empty; empty ones are skipped), each with a cluster-robust
    mean ρ over its users' pairs.
    """
    scored = _perturbation_pairs(pairs)
    means = _user_means(scored, "combined")
    sd = float(np.std(list(means.values()), ddof=1)) if len(means) >= 2 else None
    if sd is None or sd <= sd_limit:
        return UserSpread(means, sd, sd_limit, False, ())
    lengths: dict[str, list[int]] = {}
    for p in scored:
        lengths.setdefault(p.key.user_id, []).append(p.history_length)
    per_user = {u: float(np.mean(v)) for u, v in lengths.items()}
    cuts = np.quantile(list(per_user.values()), [1 / 3, 2 / 3])
    tertile = {u: int(np.searchsorted(cuts, length, side="left")) for u, length in per_user.items()}
    strata = []
    for t, label in enumerate(("short", "medium", "long")):
        members = {u for u, tt in tertile.items() if tt == t}
        if not members:
            continue
        chosen = [p for p in scored if p.key.user_id in members]
        ls = [per_user[u] for u in members]
        strata.append(Stratum(label, min(ls), max(ls), len(members),
                              cluster_interval(_values(chosen, "combined").tolist(), _users(chosen))))
    return UserSpread(means, sd, sd_limit, True, tuple(strata))
