"""Stability: the paper's gate — ρ and each of the four metrics against their thresholds (mean, confident or
sequential rule). Its verdict is where every item's verdict starts; the other checks' decisions follow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..results import Finding
from .base import SILENT, Check, Decision, Evidence

if TYPE_CHECKING:
    from ..results import Finding, Verdict


class Stability(Check):
    name = "stability"
    section = "stability"  # the writers' own tables: ρ, by perturbation, by metric
    settings = ("min_combined", "min_metric", "per_kind", "decision", "alpha", "inconclusive")

    def measure(self, evidence: Evidence) -> Verdict:
        """The stability verdict: the sequential gate's when the slice ran one, else ``stats.gate``."""
        from .. import stats  # lazy: loads numpy

        if evidence.sequential is not None:
            return evidence.sequential.verdict(evidence.pairs)
        gate = evidence.gate
        return stats.gate(evidence.pairs, thresholds=gate.thresholds(evidence.kind), mode=gate.decision,
                          alpha=gate.alpha, inconclusive_policy=gate.inconclusive)

    def decide(self, found: Any, evidence: Evidence) -> Decision:
        return SILENT  # the verdict itself: the other checks decide on top of it

    def finding(self, found: Verdict, evidence: Evidence) -> Finding:
        combined = next((c for c in found.checks if c.quantity == "combined"), None)
        return Finding(self.name, found.outcome, found.message,
                       combined.interval if combined is not None else None,
                       combined.threshold if combined is not None else evidence.gate.combined_threshold(
                           evidence.kind), "min", True, {"pairs": len(evidence.pairs)})
