"""Copying: original explanations that copy their prompt back (``copying.py`` says what counts) or list the
user's history back (grounding's ``listed``). FAIL when the copy rate is confidently above
``max_copy_rate``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..guard import DEFAULT_MAX_COPY_RATE
from ..options import float_parser, opt
from .base import Evidence, share_row
from .controls import ControlCheck, enforced_by_guard

if TYPE_CHECKING:
    from ..results import Finding, GuardResult
    from ..stats import StopRule
    from .base import Gate


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

    def stop_rule(self, gate: Gate, kind: str | None, *, floor_is_one: bool) -> StopRule | None:
        """Each user's share of copied explanations, against ``max_copy_rate``: a model that copies its
        prompt fails after a few users."""
        from .. import guard as guard_mod
        from ..stats import ABOVE, StopRule, check_alphas

        if not enforced_by_guard(gate):
            return None  # a warning never ends a slice
        test, kept = check_alphas(gate.alpha)
        return StopRule(self.name, gate.max_copy_rate, ABOVE, test,
                        lambda pairs, swaps: guard_mod.user_copy_share(swaps), kept=kept)

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        from .. import guard as guard_mod
        from ..results import FAIL

        return ("Copy FAIL", guard_mod.copy_message(found)) if found.copying.outcome == FAIL else None

    def finding(self, found: GuardResult, evidence: Evidence) -> Finding:
        from .. import guard as guard_mod

        c = found.copying
        return share_row(self.name, c.outcome, guard_mod.copy_message(found), c.copies, c.explained, c.low,
                         c.high, c.limit, enforced=self.enforced(evidence),
                         confidence=1 - evidence.gate.alpha)
