"""The judge's faithfulness (``judge-model``): each original explanation read beside the history the
explainer saw. Recorded always; with ``min-faithful-rate`` a rate confidently below it fails the item, and
a passing item the judge could not decide becomes INCONCLUSIVE — the gate passes only on evidence. The
engine measures it (the judge's calls) and hands it in as ``evidence.measured["faithfulness"]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import SILENT, Check, Decision, Evidence, share_row

if TYPE_CHECKING:
    from ..results import FaithfulnessResult, Finding


class Faithfulness(Check):
    name = "faithfulness"
    has_section = True
    connector = "Without the judge: "
    record = "faithfulness"
    settings = ("min_faithful_rate", "alpha")

    def measure(self, evidence: Evidence) -> FaithfulnessResult | None:
        return evidence.measured.get(self.name)

    def decide(self, found: FaithfulnessResult, evidence: Evidence) -> Decision:
        from ..results import FAIL, INCONCLUSIVE

        if found.outcome not in (FAIL, INCONCLUSIVE):
            return SILENT
        return Decision(found.outcome, f"Faithfulness {found.outcome}: {found.message}.")

    def finding(self, found: FaithfulnessResult, evidence: Evidence) -> Finding:
        return share_row(self.name, found.outcome, f"{found.message}.", found.faithful, found.judged,
                         found.low, found.high, found.min_rate, bound="min",
                         enforced=found.outcome is not None, confidence=1 - found.alpha)
