"""Relative robustness R: how far toward another user's explanation a perturbation moved this one
(1: no further than resampling; 0: as far as another user's history). FAIL when R is confidently below
the kind's ``min_relative``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import float_parser, opt
from ..results import DEFAULT_MIN_RELATIVE, FAIL, Finding
from . import controls
from .base import Evidence
from .controls import ControlCheck, enforced_by_guard

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..results import Finding, GuardResult, PairResult
    from ..stats import StopRule
    from .base import SliceDesign


class Relative(ControlCheck):
    name = "relative"
    settings = ("guard", "min_relative", "per_kind", "alpha")
    options = (
        opt("min-relative", float_parser(-1.0, 1.0), DEFAULT_MIN_RELATIVE, "Guard: relative robustness R = "
            "(ρ_pert − ρ_swap) / (ρ_floor − ρ_swap) a kind needs; a kind whose R is confidently below it "
            "fails (1: the perturbation moved the explanation no more than resampling, 0: as far as another "
            "user's history). category_drift is not gated unless per-kind sets it; prompt_injection and "
            "shilling are gated at 0; default 0.5.", metavar="X", marker=True),
    )

    def measure(self, evidence: Evidence) -> GuardResult | None:
        found = super().measure(evidence)
        return found if found is not None and found.relative_robustness.interval is not None else None

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Each user's excess num − threshold·den of R over the kinds R gates here: R is below the threshold
        exactly when the users' mean excess is below zero. Only at ρ_floor = 1 (no noise floor to wait
        for: temperature 0)."""
        from ..stats import BELOW, StopRule, check_alphas  # lazy: loads numpy

        gate, kind = design.gate, design.kind
        threshold = gate.relative_threshold(kind)
        if threshold is None or not design.floor_is_one or not enforced_by_guard(gate):
            return ()
        kinds = None if kind is not None else frozenset(k for k in gate.perturbations
                                                         if gate.relative_threshold(k) == threshold)

        def value(pairs: Sequence[PairResult], swaps: Sequence[PairResult]) -> float | None:
            gated = [p for p in pairs if kinds is None or p.key.kind in kinds]
            return controls.user_relative_excess(gated, swaps, threshold)

        return (StopRule(self.name, controls.relative_excess_limit(threshold), BELOW,
                         check_alphas(gate.alpha)[0], value),)

    def users_needed(self, design: SliceDesign, rules: Sequence[StopRule]) -> int:
        """Every planned user, when R is gated and enforced: its fixed rule bounds a ratio of the users'
        means, whose power rests on a spread no one knows before the users are measured."""
        gated = design.gate.relative_threshold(design.kind) is not None and enforced_by_guard(design.gate)
        return design.planned if gated else 0

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        from ..perturbations.attacks import ATTACK_KINDS  # lazy: loads numpy

        if found.relative_robustness.outcome != FAIL:
            return None
        return "Relative FAIL", controls.relative_message(found, attack=evidence.kind in ATTACK_KINDS)

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        from ..perturbations.attacks import ATTACK_KINDS  # lazy: loads numpy

        reason = controls.relative_message(found, attack=evidence.kind in ATTACK_KINDS)
        r = found.relative_robustness
        return Finding(self.name, r.outcome, reason, r.interval, r.limit, "min", self.enforced(evidence),
                       {"cases": found.n_cases, "users": found.n_users})
