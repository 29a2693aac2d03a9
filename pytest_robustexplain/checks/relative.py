"""Relative robustness R: how far toward another user's explanation a perturbation moved this one
(1: no further than resampling; 0: as far as another user's history). FAIL when R is confidently below
the kind's ``min_relative``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Evidence
from .controls import ControlCheck

if TYPE_CHECKING:
    from ..results import Finding, GuardResult


class Relative(ControlCheck):
    name = "relative"
    settings = ("guard", "min_relative", "per_kind", "alpha")

    def measure(self, evidence: Evidence) -> GuardResult | None:
        found = super().measure(evidence)
        return found if found is not None and found.relative_gate is not None else None

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        from .. import guard as guard_mod
        from ..adversarial import ATTACK_KINDS
        from ..results import FAIL

        if found.relative_outcome != FAIL:
            return None
        return "Relative FAIL", guard_mod.relative_message(found, attack=evidence.kind in ATTACK_KINDS)

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        from .. import guard as guard_mod
        from ..adversarial import ATTACK_KINDS
        from ..results import Finding

        reason = guard_mod.relative_message(found, attack=evidence.kind in ATTACK_KINDS)
        return Finding(self.name, found.relative_outcome, reason, found.relative_gate, found.min_relative,
                       "min", self.enforced(evidence), {"cases": found.n_cases, "users": found.n_users})
