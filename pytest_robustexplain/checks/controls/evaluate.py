"""The cross-user control's finding of one slice: every control-based measurement in one record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ...results import (
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    PASS,
    CopyingResult,
    GroundingResult,
    GuardResult,
    PairResult,
    RelativeResult,
)
from .cases import (
    SHARE_RULES,
    GuardSettings,
    control_cases,
    failed_left_out,
    same_text,
    share_lower_bound,
    t_interval,
    user_means,
    user_share,
)
from .copying import copy_rate
from .grounding import grounded_rows, grounding_decision, grounding_intervals
from .relative import gate_relative, relative_interval
from .sensitivity import (
    describe,
    insensitive_example,
    sensitivity_bound,
    sensitivity_outcome,
    sensitivity_users,
)


def evaluate(pairs: Sequence[PairResult], swaps: Sequence[PairResult], *, combined_threshold: float,
             settings: GuardSettings, floor: float = 1.0,
             relative_pairs: Sequence[PairResult] | None = None) -> GuardResult:
    """The guard's finding for one slice: its perturbation pairs and the swap pairs of its cases.

    ``pairs`` and ``swaps`` carry ρ under the same weights. ``floor`` is ρ_floor (1 at temperature 0, the
    measured noise floor otherwise). ``relative_pairs`` are the pairs whose R is gated against
    ``settings.min_relative`` (default: ``pairs``; the overall slice leaves out the ungated kinds).
    """
    from ...stats import pass_key  # lazy: loads numpy

    alpha = settings.alpha
    cases = control_cases(pairs, swaps)
    users = [c.user_id for c in cases]
    grounded = grounded_rows(swaps)
    history_ref, unsupported = grounding_intervals(grounded, settings.alpha_of("grounding"))
    grounding_outcome = grounding_decision(grounded, settings)
    sensitivity = [floor - c.swap.combined for c in cases]
    means = user_means(cases)
    insensitive = tuple(sorted(u for u, (p, s) in means.items()
                               if floor - s < settings.min_sensitivity and p >= combined_threshold))
    share_low = share_lower_bound(len(insensitive), len(means), alpha / SHARE_RULES)
    same = [(c.user_id, same_text(c.swap.original, c.swap.perturbed)) for c in cases]
    identical = sum(flag for _, flag in same)
    identical_low = share_lower_bound(*user_share(same), settings.alpha_of("sensitivity") / SHARE_RULES)
    user_s = [floor - s for _, s in means.values()]
    sens_low = sensitivity_bound(user_s, floor, settings.alpha_of(pass_key("sensitivity"))) if cases else None
    outcome = sensitivity_outcome(bool(cases), share_low, identical_low, sens_low, settings,
                       len(insensitive) / len(means) if means else 0.0)
    relative_gate, relative_outcome = gate_relative(relative_pairs if relative_pairs is not None else pairs,
                                                     swaps, floor, settings)
    copies, explained, copy_low, copy_high = copy_rate(swaps, settings.alpha_of("copying"))
    result = GuardResult(
        outcome=outcome, policy=settings.policy,
        swap=t_interval([c.swap.combined for c in cases], users, alpha),
        perturbed=t_interval([c.perturbed for c in cases], users, alpha),
        delta=t_interval([c.perturbed - c.swap.combined for c in cases], users, alpha, bounds=(-1.0, 1.0)),
        sensitivity=t_interval(sensitivity, users, alpha, bounds=(-1.0, 1.0)),
        relative=relative_interval(cases, floor, alpha), floor=floor, n_cases=len(cases), identical=identical,
        n_users=len(means), insensitive_users=insensitive, share_low=share_low,
        min_sensitivity=settings.min_sensitivity, max_insensitive_share=settings.max_insensitive_share,
        example=insensitive_example(cases) if outcome == INSENSITIVE else None,
        grounding=GroundingResult(history_ref, unsupported, settings.min_history_reference,
                                  settings.max_unsupported_rate, grounding_outcome),
        identical_low=identical_low, max_identical_share=settings.max_identical_share,
        sensitivity_low=sens_low,
        users_needed=sensitivity_users(user_s, floor, settings.min_sensitivity,
                                   settings.alpha_of(pass_key("sensitivity")))
        if outcome == INCONCLUSIVE and cases else None,
        relative_robustness=RelativeResult(relative_gate, settings.min_relative, relative_outcome),
        copying=CopyingResult(copies, explained, copy_low, copy_high, settings.max_copy_rate,
                              None if not explained else FAIL if copy_low > settings.max_copy_rate else PASS),
        failed=failed_left_out(pairs, swaps))
    return _with_message(result, n_swaps=len(swaps))


def _with_message(result: GuardResult, *, n_swaps: int) -> GuardResult:
    return replace(result, message=describe(result, n_swaps=n_swaps))
