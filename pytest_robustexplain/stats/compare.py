"""Two runs side by side: matching pairs, baseline non-inferiority, and the model comparison table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..results import (  # the result records live with the others; named here too
    RELATIVE,
    Fields,
    Interval,
    NonInferiorityResult,
    NonInferiorityRow,
    PairResult,
)
from .intervals import (
    GATED,
    LABELS,
    FloatArray,
    MatchKey,
    check_alpha,
    check_quantities,
    cluster_interval,
    fmt_p,
    pair_users,
    pair_values,
    per_user_means,
    perturbation_pairs,
    quantity_name,
    ratio_interval,
)

# Relative robustness R = Σ(ρ_pert − ρ_swap) / Σ(ρ_floor − ρ_swap) over users (guard.relative_terms gives
# each user's two terms). Compared beside the scores, never inside their family: the paper's rows keep
# their Holm correction and the baseline's margin, which is in ρ, is not a margin on R's scale.
RELATIVE_LABEL = "Relative R"
RelativeTerms = Mapping[str, tuple[float, float]]

# --------------------------------------------------------------------------------------------------
# Matching two runs


def _index(pairs: Iterable[PairResult], side: str) -> dict[MatchKey, PairResult]:
    out: dict[MatchKey, PairResult] = {}
    for p in perturbation_pairs(pairs):
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


def shared_user_metrics(left: Sequence[PairResult], right: Sequence[PairResult]) -> tuple[str, ...]:
    """The user's own metrics every matched pair carries on both sides (sorted): compared beside the four."""
    names = [set(p.user_metrics) for p in (*left, *right)]
    return tuple(sorted(set.intersection(*names))) if names else ()


def _paired_user_means(m: _Matched, quantity: str) -> tuple[list[str], FloatArray, FloatArray]:
    ua, ub = per_user_means(m.left, quantity), per_user_means(m.right, quantity)
    users = list(ua)
    return users, np.array([ua[u] for u in users]), np.array([ub[u] for u in users])


@dataclass(frozen=True)
class _PairedRelative:
    users: list[str]
    a: Interval
    b: Interval
    linear_a: FloatArray  # each user's linearised R of each run: their means are R_a and R_b exactly
    linear_b: FloatArray

    @property
    def diff(self) -> FloatArray:
        return self.linear_b - self.linear_a


def _linearised(terms: RelativeTerms, users: Sequence[str]) -> tuple[float, FloatArray] | None:
    """(R, each user's linearised value): R + G·(num_u − R·den_u)/Σden, whose mean is R exactly and whose
    standard error is ratio_interval's."""
    num = np.array([terms[u][0] for u in users])
    den = np.array([terms[u][1] for u in users])
    total = float(den.sum())
    if total <= 1e-12:
        return None
    ratio = float(num.sum()) / total
    return ratio, ratio + len(users) * (num - ratio * den) / total


def _paired_relative(a: RelativeTerms, b: RelativeTerms, alpha: float) -> _PairedRelative | None:
    """R of both runs on the users both measured, with each user's difference; None below two users or
    where a run's R is undefined (no user's explanation moved for another user)."""
    users = sorted(a.keys() & b.keys())
    la, lb = _linearised(a, users), _linearised(b, users)
    if len(users) < 2 or la is None or lb is None:
        return None
    ia = ratio_interval({u: a[u][0] for u in users}, {u: a[u][1] for u in users}, len(users), alpha)
    ib = ratio_interval({u: b[u][0] for u in users}, {u: b[u][1] for u in users}, len(users), alpha)
    assert ia is not None and ib is not None  # same sums as _linearised's
    return _PairedRelative(users, ia, ib, la[1], lb[1])


# --------------------------------------------------------------------------------------------------
# Baseline regression (non-inferiority)


def _constant(values: FloatArray) -> bool:
    """True when the values differ only by floating-point rounding (sums of the same scores taken in
    another order): scipy's t tests then warn of catastrophic cancellation into the user's test run."""
    return bool(np.ptp(values) <= 1e-12 * max(1.0, float(np.max(np.abs(values)))))


def _one_sided_greater(values: FloatArray) -> float | None:
    """p of a one-sample t test of H0: mean ≤ 0 against mean > 0 (scipy), with the degenerate cases."""
    from scipy import stats as sps  # lazy: loads scipy

    if values.size < 2:
        return None
    if _constant(values):
        # No spread: scipy returns NaN (or a precision warning); the answer is certain either way.
        return 0.0 if values[0] > 0 else 1.0
    return float(sps.ttest_1samp(values, 0.0, alternative="greater").pvalue)


def non_inferiority(baseline: Sequence[PairResult], current: Sequence[PairResult], *, margin: float,
                    alpha: float = 0.05, quantities: Sequence[str] | None = None,
                    relative: tuple[RelativeTerms, RelativeTerms] | None = None) -> NonInferiorityResult:
    """Test, per quantity, H0: mean(current − baseline) ≤ −margin against "no worse than margin".

    Pairs are matched on (user, item, kind, severity, repeat); control pairs are left out. The sampling
    unit is the user: each user's matched pairs give one mean difference d, and ``scipy.stats.ttest_1samp``
    tests d + margin > 0 (one-sided). Overall passed when every quantity passes.

    ``relative`` — (baseline, current) per-user terms of R (``guard.relative_terms``) — adds R's change as
    a row that is reported, not gated (``gated=False``): ``margin`` is a drop in ρ, not in R.
    """
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ConfigError(f"margin={margin!r}: must be a non-negative number")
    alpha = check_alpha(alpha)
    matched = _match(baseline, current, ("baseline", "current"))
    # Default: ρ, the four, and the user's own metrics both runs measured.
    shared = shared_user_metrics(matched.left, matched.right)
    names = check_quantities(quantities if quantities is not None else (*GATED, *shared), user=shared)
    rows = []
    for q in names:
        users, base, cur = _paired_user_means(matched, q)
        d = cur - base
        p = _one_sided_greater(d + margin)
        # The t test decides, so the interval shown is the same t interval: its low end is the test's bound
        # (passes ⇔ low > −margin). Differences of two runs' user means are not pinned against a bound.
        diff = cluster_interval(d.tolist(), users, confidence=1 - 2 * alpha, bounds=(-1.0, 1.0),
                                skew_corrected=False)
        rows.append(NonInferiorityRow(q, diff, p, p is not None and p < alpha, len(users)))
    paired = _paired_relative(*relative, 2 * alpha) if relative is not None else None
    if paired is not None:
        diff = cluster_interval(paired.diff.tolist(), paired.users, confidence=1 - 2 * alpha,
                                bounds=(-math.inf, math.inf), skew_corrected=False)
        p = _one_sided_greater(paired.diff + margin)
        rows.append(NonInferiorityRow(RELATIVE, diff, p, p is not None and p < alpha, len(paired.users),
                                      gated=False, before=paired.a.mean, after=paired.b.mean))
    passed = all(r.passed for r in rows if r.gated)
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
    gated = [r for r in rows if r.gated]
    if passed:
        shown = "; ".join(f"{quantity_name(r.quantity)} {r.diff.fmt()}" for r in gated)
        head = (f"No regression beyond the margin {margin:g}: every quantity's difference is confidently "
                f"above −{margin:g} ({shown}).")
    else:
        failed = [r for r in gated if not r.passed]
        # Confidently worse than the margin (the whole interval below it) is a regression, said as a drop with
        # its interval; else the data could not show the change is within the margin, said in those words
        # (a bare one-sided p of 1.000 beside a 45 % drop read as "no change").
        if failed and all(r.diff.high < -margin for r in failed):
            drops = "; ".join(f"{quantity_name(r.quantity)} dropped by {_drop(r.diff)}" for r in failed)
            head = f"Regression beyond the margin {margin:g}: {drops} — each shown to exceed {margin:g}."
        else:
            parts = []
            for r in failed:
                why = ("fewer than two users, cannot test" if r.p_value is None else
                       f"not shown to be within −{margin:g} of the baseline (one-sided p {fmt_p(r.p_value)})")
                parts.append(f"{quantity_name(r.quantity)} changed by {r.diff.fmt()}: {why}")
            head = f"Possible regression: {'; '.join(parts)}."
    return f"{head} {basis}{unmatched}{_relative_note(rows)}"


def _drop(diff: Interval) -> str:
    """A difference (current − baseline) that is a drop, said as one: its size and interval, positive."""
    return f"{-diff.mean:.3f} [{-diff.high:.3f}, {-diff.low:.3f}]"


def _relative_note(rows: Sequence[NonInferiorityRow]) -> str:
    row = next((r for r in rows if r.quantity == RELATIVE), None)
    if row is None or row.before is None or row.after is None:
        return ""
    return (f" Relative robustness R {row.before:.3f} → {row.after:.3f} (Δ {row.diff.fmt()}, "
            f"{row.n_users} users; reported, not gated).")


# --------------------------------------------------------------------------------------------------
# Model comparison


@dataclass(frozen=True)
class ComparisonRow(Fields):
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


@dataclass(frozen=True)
class Comparison(Fields):
    """The model comparison table: Overall ρ and each metric, Holm-corrected across the rows."""

    names: tuple[str, str]
    rows: tuple[ComparisonRow, ...]
    alpha: float
    unit: str
    n_matched: int
    unmatched_a: tuple[MatchKey, ...]
    unmatched_b: tuple[MatchKey, ...]
    # Relative robustness R beside the rows: its own paired test on the users' linearised R, outside the
    # Holm family (the paper's rows keep their correction); None without both runs' cross-user controls.
    relative: ComparisonRow | None = None
    # What each side's gates failed (name → the checks, in order; empty: none failed): robustness is ranked
    # only between explainers whose gate did not fail. Set by the reports, which hold the verdicts.
    failed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The sentence that concludes is written by the reports (report/comparison.py), from these rows.


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
    from scipy import stats as sps  # lazy: loads scipy

    d = b - a
    if d.size < 2:
        return None, None
    if _constant(d):
        # No spread in the differences: scipy returns NaN; identical models differ by nothing (p = 1),
        # a constant non-zero shift is certain (p = 0) but has no finite effect size.
        return (1.0, 0.0) if d[0] == 0 else (0.0, None)
    p = float(sps.ttest_rel(b, a).pvalue)
    return p, float(d.mean() / d.std(ddof=1))


def compare_models(pairs_a: Sequence[PairResult], pairs_b: Sequence[PairResult], *,
                   names: tuple[str, str] = ("A", "B"), alpha: float = 0.01,
                   unit: str = "user", relative: tuple[RelativeTerms, RelativeTerms] | None = None
                   ) -> Comparison:
    """Compare two models on matched pairs: means with intervals, Δ %, paired t test, d_z, Holm.

    ``unit="user"`` (default) runs ``scipy.stats.ttest_rel`` and d_z on per-user means of the matched
    pairs, which respects that pairs of one user are not independent; ``unit="pair"`` uses the pairs
    themselves, as the paper did (smaller p-values, but they overstate the evidence). Rows are flagged
    significant when the Holm-adjusted p is below ``alpha`` (the paper recommends 0.01).

    ``relative`` — each model's per-user terms of R (``guard.relative_terms``) — adds
    :attr:`Comparison.relative`: R of A and B on the users both measured (95 % intervals), the paired t
    test on each user's linearised R (always per user: R is a ratio over users), not Holm-adjusted.
    """
    alpha = check_alpha(alpha)
    if unit not in ("user", "pair"):
        raise ConfigError(f"unit={unit!r}: expected 'user' or 'pair'")
    if len(names) != 2 or names[0] == names[1]:
        raise ConfigError(f"names={names!r}: two different names are needed")
    matched = _match(pairs_a, pairs_b, (str(names[0]), str(names[1])))
    users = pair_users(matched.left)
    raw = []
    for q in (*GATED, *shared_user_metrics(matched.left, matched.right)):
        va, vb = pair_values(matched.left, q), pair_values(matched.right, q)
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
    rows = tuple(ComparisonRow(q, LABELS.get(q, q), ia, ib, delta, p, adj, d_z,
                               adj is not None and adj < alpha, n)
                 for (q, ia, ib, delta, p, d_z, n), adj in zip(raw, adjusted, strict=True))
    return Comparison((str(names[0]), str(names[1])), rows, alpha, unit, len(matched.left),
                      matched.only_left, matched.only_right,
                      _relative_row(*relative, alpha) if relative is not None else None)


def _relative_row(a: RelativeTerms, b: RelativeTerms, alpha: float) -> ComparisonRow | None:
    paired = _paired_relative(a, b, 0.05)
    if paired is None:
        return None
    p, d_z = _paired_test(paired.linear_a, paired.linear_b)  # the rows' own paired test, on the users
    assert p is not None  # two users at least (_paired_relative)
    return ComparisonRow(RELATIVE, RELATIVE_LABEL, paired.a, paired.b, None, p, None, d_z, p < alpha,
                         len(paired.users))
