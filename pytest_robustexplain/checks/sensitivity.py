"""Sensitivity S: do the explanations depend on the user at all? Another user's history must move the
explanation above the model's own noise (INSENSITIVE when it confidently does not, INCONCLUSIVE when
nothing shows that it does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Evidence
from .controls import ControlCheck

if TYPE_CHECKING:
    from ..results import Finding, GuardResult


class Sensitivity(ControlCheck):
    name = "sensitivity"
    settings = ("guard", "min_sensitivity", "max_insensitive_share", "max_identical_share", "alpha")

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        from ..results import INCONCLUSIVE, INSENSITIVE

        return (found.outcome, found.message) if found.outcome in (INSENSITIVE, INCONCLUSIVE) else None

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        from ..results import Finding

        return Finding(self.name, found.outcome, found.message, found.sensitivity, found.min_sensitivity,
                       "min", self.enforced(evidence),
                       {"users": found.n_users, "cases": found.n_cases,
                        "insensitive_users": len(found.insensitive_users), "identical": found.identical})
