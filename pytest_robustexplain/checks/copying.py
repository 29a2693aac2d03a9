"""Copying: original explanations that copy their prompt back (``metrics/copies.py`` says what counts) or
list the user's history back (``metrics/mentions.py``' ``listed``). FAIL when the copy rate is confidently
above ``max_copy_rate``; measured in ``controls/copying.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import float_parser, opt
from ..results import DEFAULT_MAX_COPY_RATE, FAIL
from . import controls
from .base import Evidence, share_row
from .controls import ControlCheck, enforced_by_guard

if TYPE_CHECKING:
    from ..results import Finding, GuardResult
    from ..stats import StopRule
    from .base import SliceDesign


class Copying(ControlCheck):
    name = "copying"
    settings = ("guard", "max_copy_rate", "alpha")
    options = (
        opt("max-copy-rate", float_parser(0.0, 1.0), DEFAULT_MAX_COPY_RATE, "Guard: largest share of "
            "original explanations that copy their prompt back (half of their words in runs of 8 or more "
            "prompt words, or 8 or more titles of the history listed back) before the gate fails (a "
            "one-sided exact bound at alpha); default 0.1.",
            metavar="X", marker=True),
    )

    def measure(self, evidence: Evidence) -> GuardResult | None:
        found = super().measure(evidence)
        return found if found is not None and found.copying.explained else None

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Each user's share of copied explanations, against ``max_copy_rate``: a model that copies its
        prompt fails after a few users."""
        from ..stats import ABOVE, StopRule, check_alphas  # lazy: loads numpy

        gate = design.gate
        if not enforced_by_guard(gate):
            return ()  # a warning never ends a slice
        test, kept = check_alphas(gate.alpha)
        return (StopRule(self.name, gate.max_copy_rate, ABOVE, test,
                         lambda pairs, swaps: controls.user_copy_share(swaps), kept=kept),)

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        return ("Copy FAIL", controls.copy_message(found)) if found.copying.outcome == FAIL else None

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        c = found.copying
        return share_row(self.name, c.outcome, controls.copy_message(found), c.copies, c.explained, c.low,
                         c.high, c.limit, enforced=self.enforced(evidence),
                         confidence=1 - evidence.gate.alpha)
