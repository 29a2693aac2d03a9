"""Relative robustness R = Δ / S: how far toward another user's explanation a perturbation moved this one
(Fieller's interval over users), its gate and its sentence, overall and per kind."""

from __future__ import annotations

from collections.abc import Sequence

from ...results import FAIL, PASS, GuardResult, Interval, PairResult
from .cases import Case, GuardSettings, control_cases, stopped_note, t_interval, user_means


def user_relative_excess(pairs: Sequence[PairResult], swaps: Sequence[PairResult], threshold: float
                         ) -> float | None:
    """The user's num − threshold·den of R (floor 1: temperature 0), rescaled from [−1, 1 − threshold] to
    [0, 1]: R = Σnum/Σden is below the threshold exactly when the users' mean excess is below
    :func:`relative_excess_limit`. None when the user has no measured case."""
    terms = relative_terms(pairs, swaps)
    if not terms:
        return None
    ((num, den),) = terms.values()
    return min(1.0, max(0.0, (num - threshold * den + 1.0) / (2.0 - threshold)))


def relative_excess_limit(threshold: float) -> float:
    """Where :func:`user_relative_excess`'s mean sits when R equals ``threshold`` (an excess of 0)."""
    return 1.0 / (2.0 - threshold)


def relative_terms(pairs: Sequence[PairResult], swaps: Sequence[PairResult], floor: float = 1.0
                   ) -> dict[str, tuple[float, float]]:
    """user -> (mean ρ_pert − mean ρ_swap, floor − mean ρ_swap) over the user's cases: relative
    robustness R is Σ first / Σ second over the users (docs/guard.md)."""
    return {u: (p - s, floor - s) for u, (p, s) in user_means(control_cases(pairs, swaps)).items()}


def relative_interval(cases: Sequence[Case], floor: float, alpha: float) -> Interval | None:
    # Fieller's interval, not the delta method's: stats.fieller_interval says why.
    from ...stats import fieller_interval  # lazy: loads numpy

    means = user_means(cases)
    return fieller_interval({u: (p - s) for u, (p, s) in means.items()},
                          {u: (floor - s) for u, (p, s) in means.items()}, len(cases), alpha)


# R's FAIL rule runs at this share of the check's alpha. Fieller's rule is a t test on the users'
# num − r·den, exact when those are normal; users' values are clipped and skewed — a few niche users whose
# control lies far away, a perturbation's move that does not grow with S — and at alpha 5 % its false FAIL
# at the limit reached 5.5 % (benchmarks/bench_guard.py, table 3). At 0.8 of alpha every simulated cell stays
# below alpha (4.4 % at most), for 4–5 points of power at 5–20 users (docs/guard.md).
FIELLER_SHARE = 0.8


def gate_relative(pairs: Sequence[PairResult], swaps: Sequence[PairResult], floor: float,
                  settings: GuardSettings) -> tuple[Interval | None, str | None]:
    """R over the gated pairs with a two-sided (1 − 2·a) interval — its upper end is the one-sided (1 − a)
    bound, a = :data:`FIELLER_SHARE` of the check's alpha — and FAIL when that bound is below
    ``min_relative`` (None: not gated or no R)."""
    if settings.min_relative is None:
        return None, None
    cases = control_cases(pairs, swaps)
    alpha = FIELLER_SHARE * settings.alpha_of("relative")
    interval = relative_interval(cases, floor, 2 * alpha) if cases else None
    if interval is None:
        return None, None
    return interval, FAIL if interval.high < settings.min_relative else PASS


def relative_message(g: GuardResult, *, attack: bool = False) -> str:
    """R against its threshold in words: how far toward another user's explanation the perturbation
    moved this one."""
    r = g.relative_robustness.interval
    if r is None or g.relative_robustness.limit is None:
        return ""
    numbers = (f"relative robustness R {r.mean:.2f} (one-sided upper bound {r.high:.2f}, needs ≥ "
               f"{g.relative_robustness.limit:g})")
    if r.mean < 0:
        what = ("the injected titles moved the explanation further than another user's history does"
                if attack else "perturbing the history moved the explanation further than another user's "
                "history does")
        return f"{what} ({numbers}).{_failed(g)}{stopped_note(g, 'relative')}"
    share = 100 * (1 - r.mean)
    return (f"perturbing the history moved the explanation {share:.0f} % of the way to another user's "
            f"explanation ({numbers}).{_failed(g)}{stopped_note(g, 'relative')}")


def _failed(g: GuardResult) -> str:
    return (f" {g.failed} failed {'reply was' if g.failed == 1 else 'replies were'} left out of both sides."
            if g.failed else "")


def by_kind(pairs: Sequence[PairResult], swaps: Sequence[PairResult], *, alpha: float = 0.05,
            floor: float = 1.0) -> dict[str, tuple[Interval, Interval | None]]:
    """(Δ, R) for each perturbation kind: each kind's pairs against the same cross-user controls."""
    out = {}
    for kind in sorted({p.key.kind for p in pairs}):
        cases = control_cases([p for p in pairs if p.key.kind == kind], swaps)
        if not cases:
            continue
        delta = t_interval([c.perturbed - c.swap.combined for c in cases], [c.user_id for c in cases],
                          alpha, bounds=(-1.0, 1.0))
        out[kind] = (delta, relative_interval(cases, floor, alpha))
    return out
