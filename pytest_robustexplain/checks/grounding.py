"""Grounding: how often the original explanations refer to something from the user's history, and how
often they name a catalog category or title from neither the history nor the item. Gated when
``min_history_reference`` is set (then enforced whatever the guard policy) or by ``max_unsupported_rate``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Evidence
from .controls import ControlCheck

if TYPE_CHECKING:
    from ..results import Finding, GuardResult


class Grounding(ControlCheck):
    name = "grounding"
    settings = ("guard", "min_history_reference", "max_unsupported_rate", "alpha")

    def measure(self, evidence: Evidence) -> GuardResult | None:
        found = super().measure(evidence)
        return found if found is not None and found.history_reference is not None else None

    def enforced(self, evidence: Evidence) -> bool:
        explicit = evidence.gate.sources.get("min_history_reference", "default") != "default"
        return super().enforced(evidence) or explicit

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        from .. import guard as guard_mod
        from ..results import FAIL

        if found.grounding_outcome != FAIL:
            return None
        return "Grounding FAIL", guard_mod.grounding_message(found)

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        from .. import guard as guard_mod
        from ..results import Finding

        return Finding(self.name, found.grounding_outcome, guard_mod.grounding_message(found),
                       found.history_reference, found.min_history_reference, "min", self.enforced(evidence),
                       {"cases": found.n_cases})
