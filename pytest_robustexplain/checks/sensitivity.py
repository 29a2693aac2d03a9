"""Sensitivity S: do the explanations depend on the user at all? Another user's history must move the
explanation above the model's own noise (INSENSITIVE when it confidently does not, INCONCLUSIVE when
nothing shows that it does)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..options import float_parser, opt
from ..results import (
    DEFAULT_MAX_IDENTICAL_SHARE,
    DEFAULT_MAX_INSENSITIVE_SHARE,
    DEFAULT_MIN_SENSITIVITY,
    INCONCLUSIVE,
    INSENSITIVE,
    PASS,
    Finding,
)
from . import controls
from .base import Evidence, ModelPart, Rows
from .controls import ControlCheck, enforced_by_guard, pool_controls, sensitivity_rows, stop_alpha

if TYPE_CHECKING:
    from ..results import Finding, GuardResult
    from ..stats import StopRule
    from .base import SliceDesign


class Sensitivity(ControlCheck):
    name = "sensitivity"
    settings = ("guard", "min_sensitivity", "max_insensitive_share", "max_identical_share", "alpha")
    options = (
        opt("min-sensitivity", float_parser(0.0, 1.0), DEFAULT_MIN_SENSITIVITY, "Guard: smallest sensitivity "
            "S = ρ_floor − ρ_swap a user needs for their explanation to count as depending on their history; "
            "a gate passes only when S is confidently above it; default 0.05.", metavar="X", marker=True),
        opt("max-insensitive-share", float_parser(0.0, 1.0), DEFAULT_MAX_INSENSITIVE_SHARE, "Guard: largest "
            "share of users with insensitive explanations before the gate is INSENSITIVE (decided with a "
            "one-sided exact bound at alpha); default 0.2.", metavar="X", marker=True),
        opt("max-identical-share", float_parser(0.0, 1.0), DEFAULT_MAX_IDENTICAL_SHARE, "Guard: largest "
            "share of cases whose explanation is word for word the same for another user's interactions "
            "before the gate is INSENSITIVE (a one-sided exact bound at alpha); default 0.05.",
            metavar="X", marker=True),
    )

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Two tests by betting, fed each user. PASS: S needs evidence to pass (the burden of proof), so a
        slice whose ρ is decided PASS goes on until "mean S above min_sensitivity" is shown; stopped at ρ's
        PASS alone, the guard's bound read the few users ρ needed (7 for a clear case) and left honest
        explainers INCONCLUSIVE. FAIL: the users' share of word-for-word identical explanations confidently
        above ``max_identical_share`` makes the item INSENSITIVE at once (a constant explainer, after four
        users). The PASS test only at ρ_floor 1 (temperature 0): the noise floor is known at the end; the plan
        drops it where a PASS waits for every planned user anyway (an enforced R: ``engine.plan``)."""
        from ..stats import ABOVE, StopRule, check_alphas  # lazy: loads numpy

        gate = design.gate
        if not enforced_by_guard(gate):
            return ()
        test, kept = check_alphas(gate.alpha / controls.SHARE_RULES)
        identical = StopRule(self.name, gate.max_identical_share, ABOVE, test,
                             lambda pairs, swaps: controls.user_identical_share(pairs, swaps), kept=kept)
        if not design.floor_is_one:
            return (identical,)
        shown = StopRule(self.name, gate.min_sensitivity, ABOVE, stop_alpha(gate),
                         lambda pairs, swaps: controls.user_sensitivity(pairs, swaps), verdict=PASS)
        return shown, identical

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        return (found.outcome, found.message) if found.outcome in (INSENSITIVE, INCONCLUSIVE) else None

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        return Finding(self.name, found.outcome, found.message, found.sensitivity, found.min_sensitivity,
                       "min", self.enforced(evidence),
                       {"users": found.n_users, "cases": found.n_cases,
                        "insensitive_users": len(found.insensitive_users), "identical": found.identical})

    def section_rows(self, pooled: Any) -> Rows:
        """The cross-user control's section, for the four checks read from it."""
        return sensitivity_rows(pooled)

    def pool(self, part: ModelPart) -> dict[str, Any]:
        return pool_controls(part)
