"""The judge's faithfulness (``judge-model``): each original explanation read beside the history the
explainer saw. Recorded always; with ``min-faithful-rate`` a rate confidently below it fails the item, and
a passing item the judge could not decide becomes INCONCLUSIVE — the gate passes only on evidence. The
engine measures it (the judge's calls) and hands it in as ``evidence.measured["faithfulness"]``. Under
``decision=sequential`` its own test (each user's share of originals judged faithful, against the rate;
the judge asked user by user while the next users' calls run) may fail the item early."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import SILENT, Check, Decision, Evidence, share_row

if TYPE_CHECKING:
    from ..results import FaithfulnessResult, Finding
    from ..settings import GateSettings
    from ..stats import StopRule
    from .base import Probe


class Faithfulness(Check):
    name = "faithfulness"
    has_section = True
    connector = "Without the judge: "
    record = "faithfulness"
    settings = ("min_faithful_rate", "alpha")

    def measure(self, evidence: Evidence) -> FaithfulnessResult | None:
        return evidence.measured.get(self.name)

    def probe_rules(self, gate: GateSettings, kind: str | None, probe: Probe) -> tuple[StopRule, ...]:
        """Each user's share of original explanations the judge found faithful, against
        ``min-faithful-rate``: an explainer whose reasons the judge rejects fails after a few users. The
        engine measures the finding with what the test saw (:func:`~..faithfulness.summarise`'s
        ``stopped``), at the alpha the test leaves."""
        from ..stats import BELOW, StopRule
        from .controls import stop_alpha

        if gate.min_faithful_rate is None:
            return ()  # recorded, not gated: nothing to stop on
        return (StopRule(self.name, gate.min_faithful_rate, BELOW, stop_alpha(gate), None, probe=probe),)

    def decide(self, found: FaithfulnessResult, evidence: Evidence) -> Decision:
        from ..results import FAIL, INCONCLUSIVE

        if found.outcome not in (FAIL, INCONCLUSIVE):
            return SILENT
        return Decision(found.outcome, f"Faithfulness {found.outcome}: {found.message}.")

    def finding(self, found: FaithfulnessResult, evidence: Evidence) -> Finding:
        return share_row(self.name, found.outcome, f"{found.message}.", found.faithful, found.judged,
                         found.low, found.high, found.min_rate, bound="min",
                         enforced=found.outcome is not None, confidence=1 - found.alpha)
