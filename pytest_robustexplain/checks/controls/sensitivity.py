"""The sensitivity S = ρ_floor − ρ_swap and the identical share: how far another user's behaviour moves the
explanation, the INSENSITIVE and PASS rules, and the guard's sentence."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...results import INCONCLUSIVE, INSENSITIVE, PASS, GuardExample, GuardResult, PairResult
from .cases import Case, GuardSettings, control_cases, same_text, stopped_note, user_means


def sensitivity_users(user_s: Sequence[float], floor: float, target: float, alpha: float) -> int | None:
    """Users for :func:`sensitivity_bound` to clear ``target`` if the users' S keep their spread; None when
    their mean is not above the target."""
    from ...stats import free_users_needed  # lazy: loads numpy

    return free_users_needed(user_s, alpha, floor - 1.0, target)


def user_sensitivity(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> float | None:
    """The user's S = 1 − mean ρ_swap over their measured cases, in [0, 1] at ρ_floor 1 (None: none)."""
    means = user_means(control_cases(pairs, swaps))
    if not means:
        return None
    ((_, swap),) = means.values()
    return min(1.0, max(0.0, 1.0 - swap))


def user_identical_share(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's measured cases whose explanation is word for word the control's (None:
    none measured)."""
    cases = control_cases(pairs, swaps)
    if not cases:
        return None
    return math.fsum(same_text(c.swap.original, c.swap.perturbed) for c in cases) / len(cases)


def sensitivity_outcome(measured: bool, share_low: float, identical_low: float, sens_low: float | None,
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


def sensitivity_bound(user_s: Sequence[float], floor: float, alpha: float) -> float:
    """The one-sided (1 − alpha) lower bound of the users' mean S whatever its shape (S ≥ floor − 1:
    ρ_swap ≤ 1); ``stats.free_lower_bound`` says why not Student t."""
    from ...stats import free_lower_bound  # lazy: loads numpy

    return free_lower_bound(user_s, alpha, floor - 1.0)


def insensitive_example(cases: Sequence[Case]) -> GuardExample:
    """The case whose explanation moved least for another user (identical texts first)."""
    worst = min(cases, key=lambda c: (not same_text(c.swap.original, c.swap.perturbed), -c.swap.combined,
                                      c.user_id, c.item_id))
    swap = worst.swap
    return GuardExample(user_id=swap.key.user_id, donor_id=str(swap.changes.get("donor", "")),
                        item_id=swap.key.item_id, user_text=swap.original, donor_text=swap.perturbed,
                        combined=swap.combined)


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
                f"{stopped_note(g, 'sensitivity')}")
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
