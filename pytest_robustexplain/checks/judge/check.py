"""The judge's faithfulness (``judge-model``): each original explanation read beside the history the
explainer saw. Recorded always; with ``min-faithful-rate`` a rate confidently below it fails the item, and
a passing item the judge could not decide becomes INCONCLUSIVE — the gate passes only on evidence. The
engine measures it (the judge's calls) and hands it in as ``evidence.measured["faithfulness"]``. Under
``decision=sequential`` its own test (each user's share of originals judged faithful, against the rate;
the judge asked user by user while the next users' calls run) may fail the item early."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...options import float_parser, opt
from ..base import SILENT, Check, Decision, Evidence, share_row

if TYPE_CHECKING:
    from ...results import FaithfulnessResult, Finding
    from ...stats import StopRule
    from ..base import SliceDesign


class Faithfulness(Check):
    name = "faithfulness"
    has_section = True
    connector = "Without the judge: "
    record = "faithfulness"
    settings = ("min_faithful_rate", "alpha")
    options = (
        opt("min-faithful-rate", float_parser(0.0, 1.0), None, "Faithfulness gate (with judge-model): share "
            "of original explanations the judge must find faithful; the gate fails when the rate is "
            "confidently below it and passes only when confidently at or above it (one-sided exact bounds at "
            "alpha); default none (reported, not gated).", metavar="X", marker=True),
        opt("min-judge-agreement", float_parser(-1.0, 1.0), None, "Faithfulness gate (with judge-labels): "
            "the judge's faithful rate counts only when its Cohen's kappa against people's verdicts is "
            "confidently at least this (a one-sided jackknife bound at alpha, users as the unit); else the "
            "gate is not measured and says why; default none.", metavar="KAPPA", marker=True),
    )

    def measure(self, evidence: Evidence) -> FaithfulnessResult | None:
        return evidence.measured.get(self.name)

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Each user's share of original explanations the judge found faithful, against
        ``min-faithful-rate``: an explainer whose reasons the judge rejects fails after a few users. The
        engine measures the finding with what the test saw (:func:`.measure.summarise`'s
        ``stopped``), at the alpha the test leaves."""
        from ...stats import BELOW, StopRule, check_alphas

        gate = design.gate
        if gate.min_faithful_rate is None or design.probe is None:
            return ()  # recorded, not gated (or no judge to ask): nothing to stop on
        test, kept = check_alphas(gate.alpha)
        return (StopRule(self.name, gate.min_faithful_rate, BELOW, test, None, probe=design.probe,
                         kept=kept),)

    def decide(self, found: FaithfulnessResult, evidence: Evidence) -> Decision:
        from ...results import FAIL, INCONCLUSIVE

        if found.outcome not in (FAIL, INCONCLUSIVE):
            return SILENT
        return Decision(found.outcome, f"Faithfulness {found.outcome}: {found.message}.")

    def finding(self, found: FaithfulnessResult, evidence: Evidence) -> Finding:
        return share_row(self.name, found.outcome, f"{found.message}.", found.faithful, found.judged,
                         found.low, found.high, found.min_rate, bound="min",
                         enforced=found.outcome is not None, confidence=1 - found.alpha)
