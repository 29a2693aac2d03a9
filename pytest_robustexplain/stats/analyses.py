"""The model's noise floor and the paper's analyses (severity, kinds, metric correlations, user spread)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..results import (
    CONTROL_KIND,
    METRICS,
    Fields,
    Interval,
    PairResult,
)
from .intervals import (
    FloatArray,
    cluster_interval,
    none_if_nan,
    pair_users,
    pair_values,
    per_user_means,
    perturbation_pairs,
)

# --------------------------------------------------------------------------------------------------
# Noise floor


def noise_floor(pairs: Sequence[PairResult], *, confidence: float = 0.95) -> Interval | None:
    """ρ of control pairs (same history, resampled): the model's own agreement with itself, or None."""
    controls = [p for p in pairs if p.key.kind == CONTROL_KIND]
    if not controls:
        return None
    return cluster_interval(pair_values(controls, "combined").tolist(), pair_users(controls),
                            confidence=confidence)


# --------------------------------------------------------------------------------------------------
# The paper's analyses


def severity_degradation(pairs: Sequence[PairResult]) -> float | None:
    """Relative change of mean ρ from severity 1 to severity 5, in % (negative = less robust at L5).

    The paper reports 1.7 % degradation for 0.533 → 0.524, i.e. −1.7 here. None when either level is
    missing or ρ at L1 is 0.
    """
    scored = perturbation_pairs(pairs)
    l1 = [p.combined for p in scored if p.key.severity == 1]
    l5 = [p.combined for p in scored if p.key.severity == 5]
    if not l1 or not l5:
        return None
    m1, m5 = float(np.mean(l1)), float(np.mean(l5))
    return None if m1 == 0 else (m5 - m1) / m1 * 100


@dataclass(frozen=True)
class SeverityTest(Fields):
    """§4.7's comparison of severity 1 with severity 5, paired by user: each user's mean ρ at L1 and at L5
    (users with both), the paired t-test of the differences and Cohen's d_z (mean difference over its
    standard deviation; negative: less robust at L5). ``t``, ``p`` and ``d`` are None when undefined (fewer
    than 2 users, or every user changed by the same amount)."""

    users: int
    mean_l1: float
    mean_l5: float
    t: float | None
    p: float | None
    d: float | None


def severity_test(pairs: Sequence[PairResult]) -> SeverityTest | None:
    """The paired test of ρ at severity 1 against severity 5 (:class:`SeverityTest`); None when no user has
    pairs at both levels."""
    scored = perturbation_pairs(pairs)
    by_user: dict[str, dict[int, list[float]]] = {}
    for p in scored:
        if p.key.severity in (1, 5):
            by_user.setdefault(p.key.user_id, {}).setdefault(p.key.severity, []).append(p.combined)
    both = [levels for levels in by_user.values() if 1 in levels and 5 in levels]
    if not both:
        return None
    l1 = np.array([np.mean(levels[1]) for levels in both], dtype=float)
    l5 = np.array([np.mean(levels[5]) for levels in both], dtype=float)
    diff = l5 - l1
    sd = float(diff.std(ddof=1)) if len(diff) > 1 else 0.0
    t = p_value = d = None
    if sd > 0:
        from scipy import stats as sps  # lazy: loads scipy

        res = sps.ttest_rel(l5, l1)
        t, p_value, d = float(res.statistic), float(res.pvalue), float(diff.mean()) / sd
    return SeverityTest(len(both), float(l1.mean()), float(l5.mean()), t, p_value, d)


@dataclass(frozen=True)
class AnovaResult(Fields):
    """One-way ANOVA of ρ across perturbation kinds (pairs as observations, as in the paper)."""

    f: float | None
    p: float | None
    df_between: int
    df_within: int
    partial_eta_sq: float | None


@dataclass(frozen=True)
class TukeyRow(Fields):
    """Tukey HSD for one pair of kinds: mean ρ(kind_a) − mean ρ(kind_b) with its 95 % interval."""

    kind_a: str
    kind_b: str
    diff: float
    p: float
    low: float
    high: float


@dataclass(frozen=True)
class KindDifferences:
    """Do perturbation kinds differ? Friedman on per-user kind means, ANOVA and Tukey HSD on pairs.

    Friedman respects that each user sees every kind (users are blocks); the ANOVA and Tukey table treat
    pairs as independent, as the paper did, and so overstate the evidence when users differ. ``tukey`` is
    computed when first read (0.2–0.5 s for the paper's 500 pairs: the studentized range distribution),
    which only the JSON report and the paper tables do; the findings line shows Friedman and the ANOVA.
    """

    kinds: tuple[str, ...]
    kind_means: dict[str, float]
    friedman: tuple[float, float] | None
    friedman_users: int
    anova: AnovaResult | None
    notes: tuple[str, ...]
    groups: tuple[FloatArray, ...] = field(default=(), repr=False, compare=False)  # ρ of each kind's pairs

    @cached_property
    def tukey(self) -> tuple[TukeyRow, ...]:
        """Tukey HSD for every pair of kinds (empty when the ANOVA is undefined)."""
        if self.anova is None or self.anova.f is None or any(g.size < 2 for g in self.groups):
            return ()  # scipy's Tukey HSD needs two pairs of each kind (a shard of a few users may have one)
        return _tukey(self.groups, self.kinds)

    def to_dict(self) -> dict[str, Any]:
        return {"kinds": self.kinds, "kind_means": self.kind_means, "friedman": self.friedman,
                "friedman_users": self.friedman_users,
                "anova": self.anova.to_dict() if self.anova is not None else None,
                "tukey": [row.to_dict() for row in self.tukey], "notes": self.notes}


def _friedman(scored: Sequence[PairResult], kinds: Sequence[str], notes: list[str]) -> tuple[
        tuple[float, float] | None, int]:
    from scipy import stats as sps  # lazy: loads scipy

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
    stat, p_value = none_if_nan(float(res.statistic)), none_if_nan(float(res.pvalue))
    if stat is None or p_value is None:
        notes.append("Friedman is undefined here (every user ranks the kinds as ties).")
        return None, len(complete)
    return (stat, p_value), len(complete)


def _anova(groups: Sequence[FloatArray], notes: list[str]) -> AnovaResult | None:
    from scipy import stats as sps  # lazy: loads scipy

    n = sum(g.size for g in groups)
    df_b, df_w = len(groups) - 1, n - len(groups)
    if len(groups) < 2 or df_w < 1:
        notes.append("ANOVA and Tukey HSD need at least 2 kinds and more pairs than kinds.")
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant groups: scipy warns and returns NaN, reported as None
        res = sps.f_oneway(*groups)
    f, p = none_if_nan(float(res.statistic)), none_if_nan(float(res.pvalue))
    eta = None if f is None else f * df_b / (f * df_b + df_w)
    if f is None:
        notes.append("ANOVA is undefined here (no variation within kinds).")
    return AnovaResult(f, p, df_b, df_w, eta)


def _tukey(groups: Sequence[FloatArray], kinds: Sequence[str]) -> tuple[TukeyRow, ...]:
    from scipy import stats as sps  # lazy: loads scipy

    tk = sps.tukey_hsd(*groups)
    ci = tk.confidence_interval(confidence_level=0.95)
    return tuple(TukeyRow(kinds[i], kinds[j], float(tk.statistic[i, j]), float(tk.pvalue[i, j]),
                          float(ci.low[i, j]), float(ci.high[i, j]))
                 for i in range(len(kinds)) for j in range(i + 1, len(kinds)))


def kind_differences(pairs: Sequence[PairResult]) -> KindDifferences:
    """Friedman (per-user kind means), one-way ANOVA with partial η², and Tukey HSD across kinds (ρ; the
    Tukey table is computed when first read)."""
    scored = perturbation_pairs(pairs)
    kinds = tuple(sorted({p.key.kind for p in scored}))
    groups = tuple(np.array([p.combined for p in scored if p.key.kind == k], dtype=float) for k in kinds)
    notes: list[str] = []
    friedman, n_users = _friedman(scored, kinds, notes)
    anova = _anova(groups, notes)
    if anova is not None and any(g.size < 2 for g in groups):
        notes.append("Tukey HSD needs at least 2 pairs of each kind.")
    means = {k: float(g.mean()) for k, g in zip(kinds, groups, strict=True)}
    return KindDifferences(kinds, means, friedman, n_users, anova, tuple(notes), groups)


@dataclass(frozen=True)
class MetricCorrelations(Fields):
    """Pearson r (and p) between the four metrics over scored pairs; None where undefined."""

    r: dict[str, dict[str, float | None]]
    p: dict[str, dict[str, float | None]]
    n: int


def metric_correlations(pairs: Sequence[PairResult]) -> MetricCorrelations:
    """4×4 Pearson correlations (scipy.stats.pearsonr) between the metrics.

    Generation failures are left out: they score 0 on every metric at once and would manufacture
    correlation that says nothing about how the metrics relate.
    """
    from scipy import stats as sps  # lazy: loads scipy

    scored = [p for p in perturbation_pairs(pairs) if p.failure is None]
    cols = {m: pair_values(scored, m) for m in METRICS}
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
                rv, pv = none_if_nan(float(res.statistic)), none_if_nan(float(res.pvalue))
            r[a][b] = r[b][a] = rv
            p[a][b] = p[b][a] = pv
    return MetricCorrelations(r, p, len(scored))


@dataclass(frozen=True)
class Stratum(Fields):
    """Users whose history length (or, for a diversity stratum, interaction diversity: ``by``) falls in one
    tertile, with their mean ρ; ``min_length``/``max_length`` are the tertile's range of that measure."""

    label: str
    min_length: float
    max_length: float
    n_users: int
    mean: Interval
    by: str = "length"


@dataclass(frozen=True)
class UserSpread(Fields):
    """Per-user mean ρ, their spread, and (when the spread is large) a split by history length and one by
    interaction diversity (``diversity_strata``; empty when the pairs do not record it)."""

    user_means: dict[str, float]
    sd: float | None
    sd_limit: float
    stratified: bool
    strata: tuple[Stratum, ...]
    diversity_strata: tuple[Stratum, ...] = ()


def user_spread(pairs: Sequence[PairResult], *, sd_limit: float = 0.2) -> UserSpread:
    """Per-user means of ρ and their sd; above ``sd_limit`` (the paper's 0.2) strata by history length and
    by interaction diversity, as the method's guide advises.

    A user's history length (diversity) is the mean of ``history_length`` (``history_diversity``) over their
    pairs. Users are cut into tertiles of it (ties may leave a tertile empty; empty ones are skipped), each
    with a cluster-robust mean ρ over its users' pairs. Pairs that do not record their diversity (reports
    written before it was) give no diversity strata.
    """
    scored = perturbation_pairs(pairs)
    means = per_user_means(scored, "combined")
    sd = float(np.std(list(means.values()), ddof=1)) if len(means) >= 2 else None
    if sd is None or sd <= sd_limit:
        return UserSpread(means, sd, sd_limit, False, ())
    lengths = _tertiles(scored, lambda p: p.history_length, ("short", "medium", "long"), "length")
    recorded = all(p.history_diversity is not None for p in scored)
    diversity = _tertiles(scored, lambda p: float(p.history_diversity or 0.0), ("narrow", "middle", "wide"),
                          "diversity") if recorded else ()
    return UserSpread(means, sd, sd_limit, True, lengths, diversity)


def _tertiles(scored: Sequence[PairResult], measure: Callable[[PairResult], float],
              labels: tuple[str, str, str], by: str) -> tuple[Stratum, ...]:
    """The users cut into tertiles of their mean ``measure``, each with its users' mean ρ."""
    values: dict[str, list[float]] = {}
    for p in scored:
        values.setdefault(p.key.user_id, []).append(measure(p))
    per_user = {u: float(np.mean(v)) for u, v in values.items()}
    cuts = np.quantile(list(per_user.values()), [1 / 3, 2 / 3])
    tertile = {u: int(np.searchsorted(cuts, value, side="left")) for u, value in per_user.items()}
    strata = []
    for t, label in enumerate(labels):
        members = {u for u, tt in tertile.items() if tt == t}
        if not members:
            continue
        chosen = [p for p in scored if p.key.user_id in members]
        ls = [per_user[u] for u in members]
        strata.append(Stratum(label, min(ls), max(ls), len(members),
                              cluster_interval(pair_values(chosen, "combined").tolist(), pair_users(chosen)),
                              by))
    return tuple(strata)
