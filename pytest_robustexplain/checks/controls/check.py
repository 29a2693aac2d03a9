"""What the four control-based checks share: the cross-user control's measurement of a slice (one
:func:`.evaluate.evaluate` for sensitivity, relative robustness, copying and grounding) and the ``guard``
policy that turns their findings into failures, warnings or silence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from ...results import FAIL, INCONCLUSIVE, INSENSITIVE
from ..base import SILENT, Check, Decision, Evidence
from .cases import GuardSettings
from .evaluate import evaluate
from .sensitivity import describe

if TYPE_CHECKING:
    from ...results import GuardResult, PairResult
    from ..base import Gate, Rows


def relative_pairs(gate: Gate, kind: str | None, pairs: Sequence[PairResult]) -> list[PairResult]:
    """The pairs whose R the slice gates: a kind's own when R is gated there (none when it is not, like
    category_drift by default); the overall slice's on the kinds gated at the run's threshold."""
    threshold = gate.relative_threshold(kind)
    if threshold is None:
        return []
    if kind is not None:
        return list(pairs)
    return [p for p in pairs if gate.relative_threshold(p.key.kind) == threshold]


def measure_controls(evidence: Evidence) -> GuardResult | None:
    """The cross-user control's finding of the slice (None when the slice planned no donors)."""
    if not evidence.donors:
        return None
    return evidence.memo("controls", lambda: _evaluate(evidence))


def _evaluate(evidence: Evidence) -> GuardResult:
    gate, kind = evidence.gate, evidence.kind
    settings = GuardSettings(
        policy=gate.guard, min_sensitivity=gate.min_sensitivity,
        max_insensitive_share=gate.max_insensitive_share, max_identical_share=gate.max_identical_share,
        min_relative=gate.relative_threshold(kind), max_copy_rate=gate.max_copy_rate,
        min_history_reference=gate.min_history_reference, max_unsupported_rate=gate.max_unsupported_rate,
        alpha=gate.alpha, split=evidence.stops)
    gated = None if kind is not None else relative_pairs(gate, kind, evidence.pairs)
    found = evaluate(evidence.pairs, evidence.swaps, settings=settings, floor=evidence.floor,
                               combined_threshold=gate.combined_threshold(kind), relative_pairs=gated)
    stopped = evidence.stopped
    if stopped is None or stopped.check not in STOP_OUTCOME:
        return found
    # The check's own test failed the item early: its FAIL stands whatever its fixed rule reads on the few
    # users measured, and every writer says when it was decided.
    record, value = STOP_OUTCOME[stopped.check]
    outcome = {record: replace(getattr(found, record), outcome=value)} if record else {"outcome": value}
    ended = replace(found, **outcome, stopped_by=stopped.check, stop_note=stopped.note())
    # The guard's message is told from its fields (the sensitivity's, with its stop note): told again.
    return replace(ended, message=describe(ended, n_swaps=len(evidence.swaps)))


# The GuardResult record that holds each control-based check's outcome (None: the control's own), and the
# outcome its own sequential test sets when it fails the item early.
STOP_OUTCOME: dict[str, tuple[str | None, Any]] = {
    "copying": ("copying", FAIL), "grounding": ("grounding", FAIL),
    "relative": ("relative_robustness", FAIL), "sensitivity": (None, INSENSITIVE)}


def enforced_by_guard(gate: Gate) -> bool:
    """Whether the guard policy makes the control-based checks' findings failures (``fail``)."""
    return gate.guard == "fail"


def stop_alpha(gate: Gate) -> float:
    """The alpha the sensitivity's PASS test spends: what the fallback share leaves
    (``guard.GuardSettings.alpha_of`` is the other side). A check that passes unless shown to fail and has
    an exact fixed rule splits its alpha by ``stats.check_alphas`` instead."""
    from ...stats import DEFAULT_FALLBACK_SHARE  # lazy: loads numpy

    return gate.alpha * (1 - DEFAULT_FALLBACK_SHARE)


class ControlCheck(Check):
    """A check read from the cross-user control. ``problem`` gives (label, reason) when the finding did not
    pass; the guard policy decides what that does: ``fail`` applies it, ``warn`` says it as a warning,
    ``off`` (controls planned only for an explicit grounding gate) says nothing — but that explicit
    grounding gate is enforced whatever the policy: it is what the user asked the controls for."""

    stage = "controls"
    section = "sensitivity"
    connector = "Stability alone: "
    record = "guard"
    after_validity = False
    enforced_whatever_the_policy: ClassVar[bool] = False

    def measure(self, evidence: Evidence) -> GuardResult | None:
        return measure_controls(evidence)

    def section_rows(self, pooled: Any) -> Rows:
        return []  # the control's one section is written whole by the sensitivity check (its first)

    def problem(self, found: GuardResult, evidence: Evidence) -> tuple[str, str] | None:
        raise NotImplementedError

    def enforced(self, evidence: Evidence) -> bool:
        return enforced_by_guard(evidence.gate) or self.enforced_whatever_the_policy

    def decide(self, found: GuardResult, evidence: Evidence) -> Decision:
        problem = self.problem(found, evidence)
        if problem is None:
            return SILENT
        label, text = problem
        if not self.enforced(evidence):
            return Decision(None, f"Guard warning: {text}") if evidence.gate.guard == "warn" else SILENT
        return Decision(label if label in (INSENSITIVE, INCONCLUSIVE) else FAIL, f"{label}: {text}")
