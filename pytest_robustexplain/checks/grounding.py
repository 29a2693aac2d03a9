"""Grounding: how often the original explanations refer to something from the user's history, and how
often they name a catalog category or title from neither the history nor the item. Gated when
``min_history_reference`` is set (then enforced whatever the guard policy) or by ``max_unsupported_rate``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import float_parser, opt
from ..results import DEFAULT_MAX_UNSUPPORTED_RATE, DEFAULT_MIN_HISTORY_REFERENCE, FAIL, Finding
from . import controls
from .base import Evidence
from .controls import ControlCheck, enforced_by_guard

if TYPE_CHECKING:
    from ..results import Finding, GuardResult
    from ..stats import StopRule
    from .base import SliceDesign


class Grounding(ControlCheck):
    name = "grounding"
    settings = ("guard", "min_history_reference", "max_unsupported_rate", "alpha")
    options = (
        opt("min-history-reference", float_parser(0.0, 1.0), DEFAULT_MIN_HISTORY_REFERENCE, "Grounding gate: "
            "share of original explanations that must refer to a category, title, brand or attribute of the "
            "user's history (a hedge naming most categories, a list of the history or a copied prompt does "
            "not count); the gate fails when the rate is confidently below it; default 0.5.",
            metavar="X", marker=True),
        opt("max-unsupported-rate", float_parser(0.0, 1.0), DEFAULT_MAX_UNSUPPORTED_RATE, "Grounding gate: "
            "largest share of original explanations that name a catalog category or title from neither the "
            "history nor the item; the gate fails when the rate is confidently above it; default 0.5.",
            metavar="X", marker=True),
    )

    def measure(self, evidence: Evidence) -> GuardResult | None:
        found = super().measure(evidence)
        return found if found is not None and found.grounding.history_reference is not None else None

    def enforced(self, evidence: Evidence) -> bool:
        return super().enforced(evidence) or evidence.gate.explicit("min_history_reference")

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Each user's share of explanations that refer to their history, against
        ``min_history_reference`` (when that is gated and enforced), and their share that name a category or
        title from neither the history nor the item, against ``max_unsupported_rate``: an explainer that
        ignores the history, or invents the user's taste, fails after a few users.

        Alpha, so that the check's false FAIL stays at most alpha: each gated rule has an equal share of it,
        of which its test spends ``CHECK_TEST_SHARE`` and its fixed rule the rest (as
        ``controls.grounding_decision``'s)."""
        from ..stats import ABOVE, BELOW, StopRule, check_alphas  # lazy: loads numpy

        gate = design.gate
        if not (enforced_by_guard(gate) or gate.explicit("min_history_reference")):
            return ()
        rules = []
        history, unsupported = gate.min_history_reference, gate.max_unsupported_rate
        test, kept = check_alphas(gate.alpha / sum(r is not None for r in (history, unsupported)))
        if history is not None:
            rules.append(StopRule(self.name, history, BELOW, test,
                                  lambda pairs, swaps: controls.user_history_reference(swaps), kept=kept))
        if unsupported is not None:
            rules.append(StopRule(self.name, unsupported, ABOVE, test,
                                  lambda pairs, swaps: controls.user_unsupported_share(swaps),
                                  part=controls.UNSUPPORTED_RULE.partition(":")[2], kept=kept))
        return tuple(rules)

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        if found.grounding.outcome != FAIL:
            return None
        return "Grounding FAIL", controls.grounding_message(found)

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        gr = found.grounding
        return Finding(self.name, gr.outcome, controls.grounding_message(found), gr.history_reference,
                       gr.min_history_reference, "min", self.enforced(evidence), {"cases": found.n_cases})
