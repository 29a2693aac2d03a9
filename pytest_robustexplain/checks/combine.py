"""The one combining rule: how the checks' decisions make an item's verdict.

The verdict starts as the stability check's (the paper's gate on ρ and the four metrics) and takes each
check's decision in registry order. Precedence, written once:

- **FAIL** fails the item, except one already INSENSITIVE: that the explanations ignore the user is the
  deeper finding, and it stays the headline (a FAIL that came *before* it — stability, an attack — stays
  FAIL: INSENSITIVE never clears a failure).
- **INSENSITIVE** replaces anything but FAIL.
- **INCONCLUSIVE** turns a PASS into INCONCLUSIVE (the gate passes only on evidence) and leaves any other
  outcome alone; the ``inconclusive`` policy then decides what an INCONCLUSIVE item does.
- A decision with no outcome (a passed check; a finding under ``guard=warn``, whose note says
  "Guard warning") leaves the outcome alone.

The message: the notes of one stage's checks lead, in order, followed by the stage's connector and what the
item said before them ("Relative FAIL: … Stability alone: PASS …"), so a failed item's first words are the
check that decided it. A stage that did not decide the FAIL, INSENSITIVE or INCONCLUSIVE an earlier stage
found (the guard INCONCLUSIVE beside an attack's FAIL, a warning) says its notes after it, following "Also:".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..results import FAIL, INCONCLUSIVE, INSENSITIVE, PASS

if TYPE_CHECKING:
    from ..results import Verdict
    from .base import Check, Decision


def combine(outcome: str, effect: str | None) -> str:
    """The item's outcome after one check's decision (the precedence above)."""
    if effect == FAIL:
        return outcome if outcome == INSENSITIVE else FAIL
    if effect == INSENSITIVE:
        return outcome if outcome == FAIL else INSENSITIVE
    if effect == INCONCLUSIVE:
        return INCONCLUSIVE if outcome == PASS else outcome
    return outcome


def apply_stage(verdict: Verdict, decided: Sequence[tuple[Check, Decision]]) -> Verdict:
    """The verdict after one stage's decisions: each outcome combined, the notes leading the message."""
    if not decided:
        return verdict
    outcome = verdict.outcome
    for _, decision in decided:
        outcome = combine(outcome, decision.outcome)
    notes = [d.note for _, d in decided if d.note]
    if not notes:
        return replace(verdict, outcome=outcome)
    if _decided_before(verdict.outcome, outcome, decided):
        return replace(verdict, outcome=outcome, message=" ".join([verdict.message, "Also:", *notes]))
    connector = decided[0][0].connector
    return replace(verdict, outcome=outcome, message=" ".join([*notes, f"{connector}{verdict.message}"]))


def _decided_before(before: str, after: str, decided: Sequence[tuple[Check, Decision]]) -> bool:
    """Whether the item's FAIL, INSENSITIVE or INCONCLUSIVE came from an earlier stage and none of this
    stage's checks decided it too: then this stage's notes (an INCONCLUSIVE guard beside a FAIL, a warning)
    follow the reason, after "Also:", instead of leading a message whose first words must be the check that
    decided it. A PASS's warnings still lead: they are all a passing item has to say."""
    return before == after != PASS and all(d.outcome != after for _, d in decided)
