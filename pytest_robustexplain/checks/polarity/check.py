"""Preference polarity: an original explanation that cites something the user disliked (from the ratings in
the history) as a reason to like the item. Recorded always (no call); with ``max-misattributed-rate`` a
rate confidently above it fails the item. The engine reads it with the run's grounding vocabulary and
hands it in as ``evidence.measured["polarity"]``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...options import float_parser, opt
from ...results import FAIL
from ...wording import percent, trim
from ..base import SILENT, Check, Decision, Evidence, ModelPart, Rows, gated_note, share_row

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...results import Finding, PolarityResult
    from ...stats import StopRule
    from ..base import SliceDesign


class Polarity(Check):
    name = "polarity"
    section = "faithfulness"
    record = "polarity"
    settings = ("max_misattributed_rate", "alpha")
    options = (
        opt("max-misattributed-rate", float_parser(0.0, 1.0), None, "Preference-polarity gate: largest share "
            "of original explanations (of users with a disliked item or category in their ratings) that cite "
            "something the user disliked as a reason to like the item; the gate fails when the rate is "
            "confidently above it; default none (reported, not gated).", metavar="X", marker=True),
    )

    def measure(self, evidence: Evidence) -> PolarityResult | None:
        return evidence.measured.get(self.name)

    def users_needed(self, design: SliceDesign, rules: Sequence[StopRule]) -> int:
        """Gated, it has no test of its own: its fixed rule, at the whole alpha, needs the users."""
        from ...stats import ABOVE, users_to_catch  # lazy: loads numpy

        rate = design.gate.max_misattributed_rate
        return 0 if rate is None else users_to_catch(rate, ABOVE, design.gate.alpha, design.planned)

    def decide(self, found: PolarityResult, evidence: Evidence) -> Decision:
        return Decision(FAIL, f"Polarity FAIL: {found.message}.") if found.outcome == FAIL else SILENT

    def finding(self, found: PolarityResult, evidence: Evidence) -> Finding:
        return share_row(self.name, found.outcome, f"{found.message}.", found.misattributed, found.eligible,
                         found.low, found.high, found.max_rate, enforced=found.outcome is not None,
                         confidence=1 - evidence.gate.alpha)

    def section_rows(self, pooled: Any) -> Rows:
        p = pooled.polarity
        if p is None:
            return []
        # Without max-misattributed-rate the rate is reported only: said on its row, so that a passing
        # report's example ("Misattributed: user U052 cites …") never reads as a finding that failed.
        gate = gated_note(pooled, "polarity", "at most", "max-misattributed-rate")
        rows = [("Cites a dislike as a reason to like", f"{p.misattributed} of {p.eligible} explanations "
                 f"({percent(p.misattributed, p.eligible)}; exact bounds [{p.low:.2f}, {p.high:.2f}]) of "
                 f"users with a disliked item or category{gate}")]
        for case in p.examples[:1]:
            rows.append((f"Misattributed: user {case.user_id}", f"cites {', '.join(case.cited)} (disliked): "
                         f"“{trim(case.sentence, 160)}”"))
        return rows

    def shown_briefly(self, pooled: Any) -> bool:
        return bool(pooled.polarity and pooled.polarity.misattributed)

    def pool(self, part: ModelPart) -> dict[str, Any]:
        """Preference polarity over the model's original explanations across its items (each once),
        ungated, and the limit any item was gated at."""
        from .measure import summarise_polarity  # lazy: kept off the plugin's import

        found = [g.verdict.polarity for g in part.run.model_gates(part.model) if g.verdict.polarity]
        cases = {(c.user_id, c.item_id, c.repeat): c for f in found for c in f.cases}
        limits = [f.max_rate for f in found if f.max_rate is not None]
        return {"polarity": summarise_polarity([cases[k] for k in sorted(cases)], max_rate=None,
                                               alpha=part.number("alpha", 0.05)) if cases else None,
                "item_limits": {"polarity": limits[0]} if limits else {}}
