"""The cross-user control's cases and settings, which every control-based check reads: a case is (user,
item) with its perturbed pairs' mean ρ and its control; users are the unit of every share and mean."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...results import (
    DEFAULT_MAX_COPY_RATE,
    DEFAULT_MAX_IDENTICAL_SHARE,
    DEFAULT_MAX_INSENSITIVE_SHARE,
    DEFAULT_MAX_UNSUPPORTED_RATE,
    DEFAULT_MIN_HISTORY_REFERENCE,
    DEFAULT_MIN_RELATIVE,
    DEFAULT_MIN_SENSITIVITY,
    PairResult,
)

if TYPE_CHECKING:
    from ...results import GuardResult, Interval


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
        from ...stats import DEFAULT_FALLBACK_SHARE, check_alphas, pass_key  # lazy: loads numpy

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
class Case:
    user_id: str
    item_id: str
    perturbed: float  # mean ρ of the case's perturbation pairs
    swap: PairResult


def same_text(a: str, b: str) -> bool:
    """Identical explanations, whitespace aside."""
    return " ".join(a.split()) == " ".join(b.split())


def control_cases(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> list[Case]:
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
            out.append(Case(swap.key.user_id, swap.key.item_id, math.fsum(scores) / len(scores), swap))
    return out


def failed_left_out(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> int:
    """Replies the guard's cases leave out: failed perturbed replies of cases with a control, and failed
    cross-user controls."""
    with_control = {(s.key.user_id, s.key.item_id) for s in swaps}
    return (sum(p.failure is not None and (p.key.user_id, p.key.item_id) in with_control for p in pairs)
            + sum(s.failure is not None for s in swaps))


def t_interval(values: Sequence[float], users: Sequence[str], alpha: float,
               bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    from ...stats import cluster_interval  # lazy: loads numpy

    # The plain t interval: benchmarks/simulation.py's simulate, which bench_guard calibrates, is written
    # for it.
    return cluster_interval(list(values), list(users), confidence=1 - alpha, bounds=bounds,
                            skew_corrected=False)


# The exact share bounds live in stats (the checks' sequential tests read them too); handed on here, where the
# guard's rules and outside code call them, without importing stats (numpy) when this module is imported.
def share_lower_bound(k: float, n: int, alpha: float) -> float:
    """:func:`~.stats.share_lower_bound` (``k`` may be a sum of users' shares: :func:`user_share`)."""
    from ...stats import share_lower_bound as bound  # lazy: loads numpy

    return bound(k, n, alpha)


def share_upper_bound(k: float, n: int, alpha: float) -> float:
    """:func:`~.stats.share_upper_bound`."""
    from ...stats import share_upper_bound as bound  # lazy: loads numpy

    return bound(k, n, alpha)


def user_share(rows: Sequence[tuple[str, bool | float]]) -> tuple[float, int]:
    """:func:`~.stats.user_share`: a share with users as the unit."""
    from ...stats import user_share as share  # lazy: loads numpy

    return share(rows)


def user_share_bounds(rows: Sequence[tuple[str, bool | float]], alpha: float) -> tuple[float, float]:
    """:func:`~.stats.user_share_bounds`."""
    from ...stats import user_share_bounds as bounds  # lazy: loads numpy

    return bounds(rows, alpha)


def user_means(cases: Sequence[Case]) -> dict[str, tuple[float, float]]:
    """user -> (mean ρ_pert, mean ρ_swap) over the user's cases."""
    grouped: dict[str, list[Case]] = {}
    for c in cases:
        grouped.setdefault(c.user_id, []).append(c)
    return {u: (math.fsum(c.perturbed for c in cs) / len(cs),
                math.fsum(c.swap.combined for c in cs) / len(cs)) for u, cs in grouped.items()}


def stopped_note(g: GuardResult, check: str) -> str:
    """The sentence of an early stop, on the check that made it."""
    return f" {g.stop_note}" if g.stopped_by == check and g.stop_note else ""
