"""The counterfactual preference flip (opt-in kind ``preference_flip``): inverting the ratings of the
user's most-engaged category must move the explanation and, once most of the category is flipped, stop it
citing that category as a reason to like. The opposite of robustness, so decided by its own rule, never by
the stability thresholds; an item of the flip kind alone is decided by this check alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...options import float_parser, opt
from ...results import DEFAULT_MIN_SENSITIVITY, PASS, Finding
from ...wording import fmt_interval
from ..base import SILENT, Check, Decision, Evidence, ModelPart, Rows

if TYPE_CHECKING:
    from ...results import Finding, FlipResult

# The preference flip must move the explanation at least as far as the guard asks of another user's history:
# the smallest move that counts.
DEFAULT_MIN_FLIP_SENSITIVITY = DEFAULT_MIN_SENSITIVITY


class Flip(Check):
    name = "flip"
    section = "faithfulness"
    connector = "The other kinds: "
    record = "flip"
    settings = ("min_flip_sensitivity", "decision", "alpha")
    options = (
        opt("min-flip-sensitivity", float_parser(0.0, 1.0), DEFAULT_MIN_FLIP_SENSITIVITY, "Counterfactual "
            "gate (with the opt-in kind preference_flip, which inverts the ratings of the user's "
            "most-engaged category): how far ρ_floor − ρ_flip must move the explanation; it must also stop "
            "citing the flipped category as a reason to like once most of it is flipped; default 0.05.",
            metavar="X", marker=True),
    )

    def measure(self, evidence: Evidence) -> FlipResult | None:
        from .measure import evaluate_flip  # lazy: kept off the plugin's import

        if not evidence.flips:
            return None
        gate = evidence.gate
        return evidence.memo("flip", lambda: evaluate_flip(
            evidence.flips, floor=evidence.floor, robust=evidence.pairs,
            min_sensitivity=gate.min_flip_sensitivity, decision=gate.decision, alpha=gate.alpha))

    def decide(self, found: FlipResult, evidence: Evidence) -> Decision:
        if found.outcome == PASS:
            return SILENT
        return Decision(found.outcome, f"Preference flip {found.outcome}: {found.message}.")

    def finding(self, found: FlipResult, evidence: Evidence) -> Finding:
        return Finding(self.name, found.outcome, f"{found.message}.", found.sensitivity,
                       found.min_sensitivity, "min", True,
                       {"pairs": found.n_pairs, "still_liked": found.still_liked,
                        "majority_pairs": found.majority_pairs})

    def section_rows(self, pooled: Any) -> Rows:
        f = pooled.flip
        if f is None:
            return []
        beside = "" if f.robust_rho is None else f" · the robustness kinds' ρ {fmt_interval(f.robust_rho)}"
        return [("Preference flip: moved (ρ_floor − ρ_flip)", f"{fmt_interval(f.sensitivity)} · needs ≥ "
                 f"{f.min_sensitivity:g} · ρ_flip {fmt_interval(f.rho)}{beside}"),
                ("Preference flip: still cited as liked", f"{f.still_liked} of {f.majority_pairs} "
                 f"explanations with most of the category flipped (at most {f.max_still_liked:.0%}) · "
                 f"{f.outcome}")]

    def shown_briefly(self, pooled: Any) -> bool:
        return pooled.flip is not None

    def pool(self, part: ModelPart) -> dict[str, Any]:
        """The flip rule over all of the model's preference_flip pairs (the mean rule, the run's
        min-flip-sensitivity), beside ρ of its other kinds; nothing when the run did not flip preferences."""
        from ...perturbations.flip import FLIP  # lazy: loads numpy
        from ...stats import noise_floor  # lazy: loads numpy
        from .measure import evaluate_flip  # lazy: kept off the plugin's import

        flips = [p for p in part.pairs if p.key.kind == FLIP]
        if not flips:
            return {}
        floor = noise_floor(part.controls)
        return {"flip": evaluate_flip(
            flips, floor=floor.mean if floor is not None else 1.0,
            robust=[p for p in part.pairs if p.key.kind != FLIP],
            min_sensitivity=part.number("min_flip_sensitivity", DEFAULT_MIN_FLIP_SENSITIVITY),
            decision="mean", alpha=part.number("alpha", 0.05))}
