"""The guard: robustness relative to the user, and only on evidence.

ρ measures stability, and an explainer that ignores the user is perfectly stable: a constant text scores
ρ = 1 under every perturbation. So each evaluation case (user ``u``, item ``i``) also gets a *content-only
cross-user control* — the same item explained with a donor's interactions shown under ``u``'s identity
(``donors.py``: ``u``'s id, length and timestamps, another user's behaviour) — scored with the same four
metrics and weights: ρ_swap. From it, per case and with cluster-robust intervals by user:

- sensitivity ``S = ρ_floor − ρ_swap`` (ρ_floor = 1 at temperature 0, the measured noise floor
  otherwise): how far another user's behaviour moves the explanation;
- discrimination ``Δ = ρ_pert − ρ_swap`` (paired per case);
- relative robustness ``R = Δ / S``: R ≈ 1, the perturbation moved the explanation no more than
  resampling; R ≈ 0, as far as another user's history.

The decisions, each one-sided at ``alpha`` (:func:`evaluate`):

1. INSENSITIVE when the share of users with ``S_u < min_sensitivity`` (and ρ_pert meeting the gate) is
   confidently above ``max_insensitive_share``, or the share of cases whose explanation is word for word
   the control's is confidently above ``max_identical_share`` — exact Clopper–Pearson bounds, each at
   alpha / 2 (``SHARE_RULES``), so the false INSENSITIVE rate stays at or below alpha whatever the number of
   users, even with both shares at their limits;
2. otherwise PASS only when the users' mean S is confidently above ``min_sensitivity`` by a bound that
   assumes nothing of their shape (``stats.free_lower_bound``) and no more users are insensitive than
   ``max_insensitive_share`` allows; without that evidence the guard is INCONCLUSIVE (a run that shows
   neither dependence nor its absence is undecided, never a PASS);
3. ``relative_outcome`` FAIL when R's upper bound (Fieller's) is below the slice's ``min_relative``;
4. ``copy_outcome`` FAIL when the share of explanations copying their prompt back is confidently above
   ``max_copy_rate`` (``copying.py``);
5. ``grounding_outcome`` FAIL when history references are confidently below ``min_history_reference`` or
   unsupported mentions confidently above ``max_unsupported_rate`` (``grounding.py``), each at alpha / 2
   (under ``decision=sequential`` their own tests take part of it: :func:`_grounding_outcome`).

Every share is bounded with users as the unit (:func:`user_share`): a user's cases are not independent.
A failed reply, perturbed or control, leaves its case: it measures neither side of Δ and R.

Why S and not Δ per user: for an explainer that ignores the history the perturbed explanation sits at the
noise floor (ρ_pert = ρ_floor), so S = Δ exactly; for one that reads it Δ depends on the kind (category drift
*is* a change of taste). S depends only on the cases, so every item of a test gets the same finding; R is
gated per kind, with drift left ungated by default (``RELATIVE_UNGATED``).

Why the defaults: see ``docs/guard.md``; the error rates they give at 3–100 users are reproduced by
``benchmarks/bench_guard.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .results import (
    DEFAULT_MAX_COPY_RATE,
    DEFAULT_MAX_IDENTICAL_SHARE,
    DEFAULT_MAX_INSENSITIVE_SHARE,
    DEFAULT_MAX_UNSUPPORTED_RATE,
    DEFAULT_MIN_HISTORY_REFERENCE,
    DEFAULT_MIN_RELATIVE,
    DEFAULT_MIN_SENSITIVITY,
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    PASS,
    CopyingResult,
    GroundingResult,
    GuardExample,
    GuardResult,
    Interval,
    PairResult,
    RelativeResult,
)

# The preference flip (polarity.py) must move the explanation at least as far as the guard asks of another
# user's history: the smallest move that counts.
DEFAULT_MIN_FLIP_SENSITIVITY = DEFAULT_MIN_SENSITIVITY
# Category drift changes the user's apparent taste: a faithful explainer *should* move there, about as far
# as toward another user (the template explainer's R is 0.27-0.40 on drift, 0.62-0.74 on the other four
# kinds). Its R is reported and gated only when per_kind sets a min_relative for it.
RELATIVE_UNGATED: tuple[str, ...] = ("category_drift",)
# INSENSITIVE has two exact rules (the insensitive share, the identical share); each is tested at
# alpha / SHARE_RULES so that their union holds alpha with both shares at their limits (Bonferroni; at alpha
# each it reached 5.9 % at 50 users: bench_guard.py section 4).
SHARE_RULES = 2


@dataclass(frozen=True)
class GuardSettings:
    """How the guard decides and what its finding does (``policy``: fail, warn, off).

    ``min_relative`` is the slice's relative-robustness threshold (None: R is not gated), ``max_copy_rate``
    the largest share of original explanations that may copy their prompt back.
    """

    policy: str = "fail"
    min_sensitivity: float = DEFAULT_MIN_SENSITIVITY
    max_insensitive_share: float = DEFAULT_MAX_INSENSITIVE_SHARE
    max_identical_share: float = DEFAULT_MAX_IDENTICAL_SHARE
    min_relative: float | None = DEFAULT_MIN_RELATIVE
    max_copy_rate: float = DEFAULT_MAX_COPY_RATE
    min_history_reference: float | None = DEFAULT_MIN_HISTORY_REFERENCE
    max_unsupported_rate: float | None = DEFAULT_MAX_UNSUPPORTED_RATE
    alpha: float = 0.05
    # Checks that ran an anytime-valid test of their own (decision=sequential): their fixed rules below keep
    # the fallback's share of alpha, the test the rest, so each check's false FAIL stays at most alpha.
    split: frozenset[str] = frozenset()

    def alpha_of(self, check: str) -> float:
        """The alpha the fixed rule behind a sequential test (``StopRule.key``: ``sensitivity`` — the
        identical share —, ``pass_key("sensitivity")``, ``copying``, ``grounding`` — history references —,
        :data:`UNSUPPORTED_RULE`, ``relative``) decides at."""
        from .stats import DEFAULT_FALLBACK_SHARE, check_alphas, pass_key

        if check not in self.split:
            return self.alpha
        # A PASS rule's fixed rule keeps the fallback's share; a FAIL rule's what its test leaves.
        if check.endswith(pass_key("")):
            return self.alpha * DEFAULT_FALLBACK_SHARE
        return check_alphas(self.alpha)[1]


# Grounding's second rule (unsupported mentions) among a slice's sequential tests: ``StopRule.key`` of the
# rule whose ``part`` is "unsupported" (the first, history references, is the check's own name).
UNSUPPORTED_RULE = "grounding:unsupported"


@dataclass(frozen=True)
class _Case:
    user_id: str
    item_id: str
    perturbed: float  # mean ρ of the case's perturbation pairs
    swap: PairResult


def same_text(a: str, b: str) -> bool:
    """Identical explanations, whitespace aside."""
    return " ".join(a.split()) == " ".join(b.split())


def _cases(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> list[_Case]:
    by_case: dict[tuple[str, str], list[float]] = {}
    # A failed perturbed reply measures nothing either: it leaves the case as a failed control does (scored
    # 0 it pulled ρ_pert, hence Δ and R, down — 3 % failing pairs took a weak reader's R from 0.70 to 0.61).
    for p in pairs:
        if p.failure is None:
            by_case.setdefault((p.key.user_id, p.key.item_id), []).append(p.combined)
    out = []
    for swap in sorted(swaps, key=lambda s: s.key):
        scores = by_case.get((swap.key.user_id, swap.key.item_id))
        # A failed donor call measures nothing; the case is left out (and counted in the message).
        if scores and swap.failure is None:
            out.append(_Case(swap.key.user_id, swap.key.item_id, math.fsum(scores) / len(scores), swap))
    return out


def failed_left_out(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> int:
    """Replies the guard's cases leave out: failed perturbed replies of cases with a control, and failed
    cross-user controls."""
    with_control = {(s.key.user_id, s.key.item_id) for s in swaps}
    return (sum(p.failure is not None and (p.key.user_id, p.key.item_id) in with_control for p in pairs)
            + sum(s.failure is not None for s in swaps))


def _interval(values: Sequence[float], users: Sequence[str], alpha: float,
              bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    from .stats import cluster_interval

    # The plain t interval: guard.simulate, which bench_guard calibrates, is written for it.
    return cluster_interval(list(values), list(users), confidence=1 - alpha, bounds=bounds,
                            skew_corrected=False)


# The exact share bounds live in stats (the checks' sequential tests read them too); handed on here, where the
# guard's rules and outside code call them, without importing stats (numpy) when this module is imported.
def share_lower_bound(k: float, n: int, alpha: float) -> float:
    """:func:`~.stats.share_lower_bound` (``k`` may be a sum of users' shares: :func:`user_share`)."""
    from .stats import share_lower_bound as bound

    return bound(k, n, alpha)


def share_upper_bound(k: float, n: int, alpha: float) -> float:
    """:func:`~.stats.share_upper_bound`."""
    from .stats import share_upper_bound as bound

    return bound(k, n, alpha)


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


def _user_means(cases: Sequence[_Case]) -> dict[str, tuple[float, float]]:
    """user -> (mean ρ_pert, mean ρ_swap) over the user's cases."""
    grouped: dict[str, list[_Case]] = {}
    for c in cases:
        grouped.setdefault(c.user_id, []).append(c)
    return {u: (math.fsum(c.perturbed for c in cs) / len(cs),
                math.fsum(c.swap.combined for c in cs) / len(cs)) for u, cs in grouped.items()}


# (user, grounding, swap) of each case read for grounding
Grounded = list[tuple[str, Mapping[str, Any], PairResult]]


def _grounded(swaps: Sequence[PairResult]) -> Grounded:
    """(user, grounding, swap) of the cases whose original explanation was read for grounding."""
    return [(s.key.user_id, s.changes["grounding"], s) for s in swaps
            if isinstance(s.changes.get("grounding"), Mapping) and s.original.strip()]


def _refers(grounding: Mapping[str, Any], swap: PairResult) -> float:
    # A hedge, a list of the history or a copy of the prompt mentions the history without referring to it.
    return 1.0 if grounding.get("history") and not grounding.get("hedging") and not grounding.get("listed") \
        and not _copies(swap) else 0.0


def _unsupported(grounding: Mapping[str, Any]) -> float:
    # A catalog category or title from neither the history nor the item (a made-up taste or purchase).
    return 1.0 if grounding.get("unsupported") else 0.0


def _grounding(rows: Grounded, alpha: float) -> tuple[Interval | None, Interval | None]:
    """The grounding rates' intervals over the cases read for grounding (:func:`_grounded`)."""
    if not rows:
        return None, None
    users = [u for u, _, _ in rows]
    history = [_refers(g, s) for _, g, s in rows]
    unsupported = [_unsupported(g) for _, g, _ in rows]
    return _interval(history, users, alpha), _interval(unsupported, users, alpha)


def _grounding_outcome(rows: Grounded, settings: GuardSettings) -> str | None:
    """FAIL when the history-reference rate is confidently below ``min_history_reference`` or the
    unsupported-mention rate confidently above ``max_unsupported_rate`` (one-sided exact bounds with users
    as the unit, :func:`user_share`; with both gated each rule takes half the check's alpha, so that
    their union holds it — at alpha each they reached 7.5–11 % with both rates at their limits); None when
    neither is gated or nothing was measured. Under ``decision=sequential`` each rule's own test, when it
    ran, spent its share of that rule's alpha (``GuardSettings.alpha_of``; checks/grounding.py)."""
    gated = [r for r in (settings.min_history_reference, settings.max_unsupported_rate) if r is not None]
    if not rows or not gated:
        return None
    checks = []
    if settings.min_history_reference is not None:
        k, g = user_share([(u, _refers(gr, s)) for u, gr, s in rows])
        alpha = settings.alpha_of("grounding") / len(gated)
        checks.append(share_upper_bound(k, g, alpha) < settings.min_history_reference)
    if settings.max_unsupported_rate is not None:
        k, g = user_share([(u, _unsupported(gr)) for u, gr, _ in rows])
        alpha = settings.alpha_of(UNSUPPORTED_RULE) / len(gated)
        checks.append(share_lower_bound(k, g, alpha) > settings.max_unsupported_rate)
    return FAIL if any(checks) else PASS


def _copy_read(swaps: Sequence[PairResult]) -> list[PairResult]:
    """The cross-user controls whose original explanation was read for copying."""
    return [s for s in swaps if s.failure is None and isinstance(s.changes.get("copied"), (int, float))]


def _copies(swap: PairResult) -> bool:
    """Whether the original explanation copies its prompt back, or lists the user's history back (grounding's
    ``listed``: as many history titles as make a list) — a copy of the prompt's history in other words."""
    from .copying import is_copy

    share, grounding = swap.changes.get("copied"), swap.changes.get("grounding")
    listed = isinstance(grounding, Mapping) and bool(grounding.get("listed"))
    return (isinstance(share, (int, float)) and is_copy(float(share))) or listed


def _users_needed(user_s: Sequence[float], floor: float, target: float, alpha: float) -> int | None:
    """Users for :func:`_sensitivity_low` to clear ``target`` if the users' S keep their spread; None when
    their mean is not above the target."""
    from .stats import free_users_needed

    return free_users_needed(user_s, alpha, floor - 1.0, target)


# One user's value for a check's anytime-valid test (``stats.OneSidedTest``), from that user's perturbation
# pairs and cross-user controls: the same quantities the fixed rules below bound, taken user by user.


def user_sensitivity(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> float | None:
    """The user's S = 1 − mean ρ_swap over their measured cases, in [0, 1] at ρ_floor 1 (None: none)."""
    means = _user_means(_cases(pairs, swaps))
    if not means:
        return None
    ((_, swap),) = means.values()
    return min(1.0, max(0.0, 1.0 - swap))


def user_identical_share(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's measured cases whose explanation is word for word the control's (None:
    none measured)."""
    cases = _cases(pairs, swaps)
    if not cases:
        return None
    return math.fsum(same_text(c.swap.original, c.swap.perturbed) for c in cases) / len(cases)


def user_copy_share(swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's original explanations that copy their prompt back (None: none measured)."""
    rows = _copy_read(swaps)
    return math.fsum(_copies(s) for s in rows) / len(rows) if rows else None


def user_history_reference(swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's original explanations that refer to their history (None: none read)."""
    rows = _grounded(swaps)
    return math.fsum(_refers(g, s) for _, g, s in rows) / len(rows) if rows else None


def user_unsupported_share(swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's original explanations that name a catalog category or title from neither
    their history nor the item (None: none read)."""
    rows = _grounded(swaps)
    return math.fsum(_unsupported(g) for _, g, _ in rows) / len(rows) if rows else None


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
    return {u: (p - s, floor - s) for u, (p, s) in _user_means(_cases(pairs, swaps)).items()}


def _relative(cases: Sequence[_Case], floor: float, alpha: float) -> Interval | None:
    # Fieller's interval, not the delta method's: stats.fieller_interval says why.
    from .stats import fieller_interval

    means = _user_means(cases)
    return fieller_interval({u: (p - s) for u, (p, s) in means.items()},
                          {u: (floor - s) for u, (p, s) in means.items()}, len(cases), alpha)


def _copy_rate(swaps: Sequence[PairResult], alpha: float) -> tuple[int, int, float, float]:
    """(copies, explanations, one-sided lower bound, one-sided upper bound) of the copy rate; the bounds
    take users as the unit (:func:`user_share`)."""
    rows = [(s.key.user_id, _copies(s)) for s in _copy_read(swaps)]
    k, g = user_share(rows)
    low, high = share_lower_bound(k, g, alpha), share_upper_bound(k, g, alpha)
    return sum(copied for _, copied in rows), len(rows), low, high


def evaluate(pairs: Sequence[PairResult], swaps: Sequence[PairResult], *, combined_threshold: float,
             settings: GuardSettings, floor: float = 1.0,
             relative_pairs: Sequence[PairResult] | None = None) -> GuardResult:
    """The guard's finding for one slice: its perturbation pairs and the swap pairs of its cases.

    ``pairs`` and ``swaps`` carry ρ under the same weights. ``floor`` is ρ_floor (1 at temperature 0, the
    measured noise floor otherwise). ``relative_pairs`` are the pairs whose R is gated against
    ``settings.min_relative`` (default: ``pairs``; the overall slice leaves out the ungated kinds).
    """
    from .stats import pass_key

    alpha = settings.alpha
    cases = _cases(pairs, swaps)
    users = [c.user_id for c in cases]
    grounded = _grounded(swaps)
    history_ref, unsupported = _grounding(grounded, settings.alpha_of("grounding"))
    grounding_outcome = _grounding_outcome(grounded, settings)
    sensitivity = [floor - c.swap.combined for c in cases]
    means = _user_means(cases)
    insensitive = tuple(sorted(u for u, (p, s) in means.items()
                               if floor - s < settings.min_sensitivity and p >= combined_threshold))
    share_low = share_lower_bound(len(insensitive), len(means), alpha / SHARE_RULES)
    same = [(c.user_id, same_text(c.swap.original, c.swap.perturbed)) for c in cases]
    identical = sum(flag for _, flag in same)
    identical_low = share_lower_bound(*user_share(same), settings.alpha_of("sensitivity") / SHARE_RULES)
    user_s = [floor - s for _, s in means.values()]
    sens_low = _sensitivity_low(user_s, floor, settings.alpha_of(pass_key("sensitivity"))) if cases else None
    outcome = _outcome(bool(cases), share_low, identical_low, sens_low, settings,
                       len(insensitive) / len(means) if means else 0.0)
    relative_gate, relative_outcome = _relative_gate(relative_pairs if relative_pairs is not None else pairs,
                                                     swaps, floor, settings)
    copies, explained, copy_low, copy_high = _copy_rate(swaps, settings.alpha_of("copying"))
    result = GuardResult(
        outcome=outcome, policy=settings.policy,
        swap=_interval([c.swap.combined for c in cases], users, alpha),
        perturbed=_interval([c.perturbed for c in cases], users, alpha),
        delta=_interval([c.perturbed - c.swap.combined for c in cases], users, alpha, bounds=(-1.0, 1.0)),
        sensitivity=_interval(sensitivity, users, alpha, bounds=(-1.0, 1.0)),
        relative=_relative(cases, floor, alpha), floor=floor, n_cases=len(cases), identical=identical,
        n_users=len(means), insensitive_users=insensitive, share_low=share_low,
        min_sensitivity=settings.min_sensitivity, max_insensitive_share=settings.max_insensitive_share,
        example=_example(cases) if outcome == INSENSITIVE else None,
        grounding=GroundingResult(history_ref, unsupported, settings.min_history_reference,
                                  settings.max_unsupported_rate, grounding_outcome),
        identical_low=identical_low, max_identical_share=settings.max_identical_share,
        sensitivity_low=sens_low,
        users_needed=_users_needed(user_s, floor, settings.min_sensitivity,
                                   settings.alpha_of(pass_key("sensitivity")))
        if outcome == INCONCLUSIVE and cases else None,
        relative_robustness=RelativeResult(relative_gate, settings.min_relative, relative_outcome),
        copying=CopyingResult(copies, explained, copy_low, copy_high, settings.max_copy_rate,
                              None if not explained else FAIL if copy_low > settings.max_copy_rate else PASS),
        failed=failed_left_out(pairs, swaps))
    return _with_message(result, n_swaps=len(swaps))


def _outcome(measured: bool, share_low: float, identical_low: float, sens_low: float | None,
             settings: GuardSettings, insensitive_share: float) -> str:
    """INSENSITIVE on either exact share rule; else PASS only with S confidently above min_sensitivity
    *and* no more users ignored than the share allows: a mean carried by readers never passes a population
    whose ignored share shows above its limit (the share rule alone needs that share confidently above)."""
    if not measured:
        return INCONCLUSIVE
    if share_low > settings.max_insensitive_share or identical_low > settings.max_identical_share:
        return INSENSITIVE
    if sens_low is None or sens_low <= settings.min_sensitivity:
        return INCONCLUSIVE  # no evidence that the explanations depend on the user: never a PASS
    if insensitive_share > settings.max_insensitive_share:
        return INCONCLUSIVE
    return PASS


def _sensitivity_low(user_s: Sequence[float], floor: float, alpha: float) -> float:
    """The one-sided (1 − alpha) lower bound of the users' mean S whatever its shape (S ≥ floor − 1:
    ρ_swap ≤ 1); ``stats.free_lower_bound`` says why not Student t."""
    from .stats import free_lower_bound

    return free_lower_bound(user_s, alpha, floor - 1.0)


def _relative_gate(pairs: Sequence[PairResult], swaps: Sequence[PairResult], floor: float,
                   settings: GuardSettings) -> tuple[Interval | None, str | None]:
    """R over the gated pairs with a two-sided (1 − 2·alpha) interval — its upper end is the one-sided
    (1 − alpha) bound — and FAIL when that bound is below ``min_relative`` (None: not gated or no R)."""
    if settings.min_relative is None:
        return None, None
    cases = _cases(pairs, swaps)
    interval = _relative(cases, floor, 2 * settings.alpha_of("relative")) if cases else None
    if interval is None:
        return None, None
    return interval, FAIL if interval.high < settings.min_relative else PASS


def _example(cases: Sequence[_Case]) -> GuardExample:
    """The case whose explanation moved least for another user (identical texts first)."""
    worst = min(cases, key=lambda c: (not same_text(c.swap.original, c.swap.perturbed), -c.swap.combined,
                                      c.user_id, c.item_id))
    swap = worst.swap
    return GuardExample(user_id=swap.key.user_id, donor_id=str(swap.changes.get("donor", "")),
                        item_id=swap.key.item_id, user_text=swap.original, donor_text=swap.perturbed,
                        combined=swap.combined)


def _with_message(result: GuardResult, *, n_swaps: int) -> GuardResult:
    from dataclasses import replace

    return replace(result, message=describe(result, n_swaps=n_swaps))


def describe(g: GuardResult, *, n_swaps: int | None = None) -> str:
    """The guard's finding in words (the failure message, the reports)."""
    if g.outcome == INCONCLUSIVE and g.n_cases == 0:
        lost = f" ({n_swaps} cross-user controls, none scored)" if n_swaps else ""
        return ("guard not measured: no case has a scored cross-user control" + lost +
                " (no donor user without the item, or every donor call failed).")
    floor = "" if g.floor >= 1.0 else f" above the noise floor {g.floor:.3f}"
    # The perturbed history's ρ by its mean alone: the headline shows that ρ with its interval, and a
    # second interval (the guard's plain t, over the cases with a control) beside it read as another ρ.
    numbers = (f"another user's interactions give ρ {g.swap.fmt()} against {g.perturbed.mean:.3f} for the "
               f"perturbed history (sensitivity{floor} {g.sensitivity.fmt()}, needs ≥ {g.min_sensitivity:g}; "
               f"Δ {g.delta.fmt()})")
    users = (f"{len(g.insensitive_users)} of {g.n_users} users get an explanation that barely depends on "
             f"their history (lower confidence bound of that share {g.share_low:.2f}, limit "
             f"{g.max_insensitive_share:g})" if g.insensitive_users else "")
    identical = (f"{g.identical} of {g.n_cases} explanations are word for word the same for another user's "
                 f"interactions (lower confidence bound of that share {g.identical_low:.2f}, limit "
                 f"{g.max_identical_share:g})" if g.identical else "")
    tail = "; ".join(x for x in (users, identical) if x)
    tail = f"; {tail}" if tail else ""
    if g.outcome == INSENSITIVE:
        return (f"the explanations barely depend on the user's history: {numbers}{tail}."
                f"{_stopped(g, 'sensitivity')}")
    if g.outcome == INCONCLUSIVE and g.sensitivity_low is not None and g.sensitivity_low > g.min_sensitivity:
        return (f"no evidence that the explanations depend on enough users' histories: {numbers}; {users} — "
                f"above the limit, though not confidently, so the guard cannot pass it; more users would "
                f"decide{'; ' + identical if identical else ''}.")
    if g.outcome == INCONCLUSIVE:
        low = "unknown" if g.sensitivity_low is None else f"{g.sensitivity_low:.3f}"
        more = (f"about {g.users_needed} users in total (now {g.n_users}) would likely show it"
                if g.users_needed else "no realistic number of users would show it at this sensitivity")
        return (f"no evidence that the explanations depend on the user's history: {numbers}; the lower "
                f"confidence bound of the sensitivity, {low}, is not above {g.min_sensitivity:g} — "
                f"{more}{tail}.")
    return f"the explanations depend on the user's history: {numbers}{tail}."


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
        return f"{what} ({numbers}).{_failed(g)}{_stopped(g, 'relative')}"
    share = 100 * (1 - r.mean)
    return (f"perturbing the history moved the explanation {share:.0f} % of the way to another user's "
            f"explanation ({numbers}).{_failed(g)}{_stopped(g, 'relative')}")


def _failed(g: GuardResult) -> str:
    return (f" {g.failed} failed {'reply was' if g.failed == 1 else 'replies were'} left out of both sides."
            if g.failed else "")


def copy_message(g: GuardResult) -> str:
    """The copy rate in words."""
    from .copying import COPY_NGRAM, COPY_SHARE
    from .grounding import LISTED_TITLES

    c = g.copying
    if not c.explained:
        return ""
    return (f"{c.copies} of {c.explained} explanations copy their prompt back (at least "
            f"{100 * COPY_SHARE:g} % of their words in runs of {COPY_NGRAM} or more words from the prompt, "
            f"or {LISTED_TITLES} or more titles of the history listed; "
            f"rate {c.copies / c.explained:.2f}, one-sided bounds [{c.low:.2f}, {c.high:.2f}], "
            f"limit {c.limit:g}).{_stopped(g, 'copying')}")


def grounding_message(g: GuardResult) -> str:
    """The grounding rates in words (and the grounding gate's verdict)."""
    gr = g.grounding
    if gr.history_reference is None:
        return ""
    text = (f"{100 * gr.history_reference.mean:.0f} % of explanations refer to something from the user's "
            f"history (rate {gr.history_reference.fmt(2)}; a hedge naming most categories, a list of the "
            "history or a copied prompt does not count)")
    if gr.unsupported is not None:
        text += f"; {100 * gr.unsupported.mean:.0f} % mention a catalog category or title from neither"
    if gr.outcome == FAIL:
        limits = []
        if gr.min_history_reference is not None:
            limits.append(f"history references needed ≥ {gr.min_history_reference:g}")
        if gr.max_unsupported_rate is not None:
            limits.append(f"unsupported mentions at most {gr.max_unsupported_rate:g}")
        text += f" — confidently outside the limits ({', '.join(limits)})"
    return text + "." + _stopped(g, "grounding")


def _stopped(g: GuardResult, check: str) -> str:
    """The sentence of an early stop, on the check that made it."""
    return f" {g.stop_note}" if g.stopped_by == check and g.stop_note else ""


def by_kind(pairs: Sequence[PairResult], swaps: Sequence[PairResult], *, alpha: float = 0.05,
            floor: float = 1.0) -> dict[str, tuple[Interval, Interval | None]]:
    """(Δ, R) for each perturbation kind: each kind's pairs against the same cross-user controls."""
    out = {}
    for kind in sorted({p.key.kind for p in pairs}):
        cases = _cases([p for p in pairs if p.key.kind == kind], swaps)
        if not cases:
            continue
        delta = _interval([c.perturbed - c.swap.combined for c in cases], [c.user_id for c in cases],
                          alpha, bounds=(-1.0, 1.0))
        out[kind] = (delta, _relative(cases, floor, alpha))
    return out
