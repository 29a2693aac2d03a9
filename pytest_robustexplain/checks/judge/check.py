"""The judge's faithfulness (``judge-model``): each original explanation read beside the history the
explainer saw. Recorded always; with ``min-faithful-rate`` a rate confidently below it fails the item, and
a passing item the judge could not decide becomes INCONCLUSIVE — the gate passes only on evidence. The
engine measures it (the judge's calls) and hands it in as ``evidence.measured["faithfulness"]``. Under
``decision=sequential`` its own test (each user's share of originals judged faithful, against the rate;
the judge asked user by user while the next users' calls run) may fail the item early."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...options import float_parser, opt
from ...results import FAIL, INCONCLUSIVE, ORIGINAL
from ...wording import fmt_interval, percent, trim
from ..base import SILENT, Check, Decision, Evidence, ModelPart, Rows, Table, gated_note, share_row
from ..controls import share_lower_bound, share_upper_bound

if TYPE_CHECKING:
    from ...results import FaithfulnessResult, Finding
    from ...stats import StopRule
    from ..base import SliceDesign


class Faithfulness(Check):
    name = "faithfulness"
    section = "faithfulness"
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
        from ...stats import BELOW, StopRule, check_alphas  # lazy: loads numpy

        gate = design.gate
        if gate.min_faithful_rate is None or design.probe is None:
            return ()  # recorded, not gated (or no judge to ask): nothing to stop on
        test, kept = check_alphas(gate.alpha)
        return (StopRule(self.name, gate.min_faithful_rate, BELOW, test, None, probe=design.probe,
                         kept=kept),)

    def decide(self, found: FaithfulnessResult, evidence: Evidence) -> Decision:
        if found.outcome not in (FAIL, INCONCLUSIVE):
            return SILENT
        return Decision(found.outcome, f"Faithfulness {found.outcome}: {found.message}.")

    def finding(self, found: FaithfulnessResult, evidence: Evidence) -> Finding:
        return share_row(self.name, found.outcome, f"{found.message}.", found.faithful, found.judged,
                         found.low, found.high, found.min_rate, bound="min",
                         enforced=found.outcome is not None, confidence=1 - found.alpha)

    def section_rows(self, pooled: Any) -> Rows:
        # lazy: kept off the plugin's import
        from .measure import MIN_JUDGE_AGREEMENT, judges_text, people_text

        f = pooled.faithfulness
        if f is None:
            return []
        gate = gated_note(pooled, "faithful", "needs ≥", "min-faithful-rate")
        rows = [("Judge", f.judge),
                ("Faithful (judge)", f"{f.faithful} of {f.judged} original explanations "
                                     f"({percent(f.faithful, f.judged)}; exact bounds "
                                     f"[{f.low:.2f}, {f.high:.2f}]){gate}"),
                ("Judge failures",
                 f"{f.failures} replies were not the verdict's shape" if f.failures else "0")]
        if f.compared:
            trust = "" if f.agreement_high >= MIN_JUDGE_AGREEMENT else " — the judge is not trustworthy"
            rows.append(("Judge reorder agreement", f"{f.agreed} of {f.compared} "
                         f"({percent(f.agreed, f.compared)}) kept their verdict with the history in reverse "
                         f"order{trust}"))
        if f.judges:
            rows.append(("Judges agree (several judges)", judges_text(f.judges)))
        if f.people:
            rows.append(("Judge against people (judge-labels)", people_text(f.people)))
        for kind, (k, n) in f.by_kind.items():
            drop = f.drop_by_kind.get(kind)
            shown = f" · drop from the originals {fmt_interval(drop)}" if drop is not None else ""
            bounds = f"[{share_lower_bound(k, n, f.alpha):.2f}, {share_upper_bound(k, n, f.alpha):.2f}]"
            rows.append((f"Faithful under {kind}", f"{k} of {n} ({percent(k, n)}; exact bounds {bounds})"
                         f"{shown}"))
        unfaithful = next((t for t in f.texts if t.faithful is False and t.kind == ORIGINAL), None)
        if unfaithful is not None:
            rows.append((f"Judged unfaithful: user {unfaithful.user_id}", trim(unfaithful.rationale, 200)))
        return rows

    def section_about(self, pooled: Any) -> str:
        return "the judge, with judge-model" if pooled.faithfulness is not None else ""

    def shown_briefly(self, pooled: Any) -> bool:
        return pooled.faithfulness is not None

    def pool(self, part: ModelPart) -> dict[str, Any]:
        """The judge's verdicts on the model's explanations across its items (each text once), summarised
        ungated: what its report shows beside ρ and the guard; and the limit any item was gated at."""
        from .measure import summarise  # lazy: kept off the plugin's import

        found = [g.verdict.faithfulness for g in part.run.model_gates(part.model) if g.verdict.faithfulness]
        if not found:
            return {}
        texts = {(t.user_id, t.item_id, t.kind, t.severity, t.repeat): t for f in found for t in f.texts}
        limits = [f.min_rate for f in found if f.min_rate is not None]
        return {"faithfulness": summarise([texts[k] for k in sorted(texts)], judge=found[0].judge,
                                          scope=found[0].scope, min_rate=None,
                                          alpha=part.number("alpha", 0.05)),
                "item_limits": {"faithful": limits[0]} if limits else {}}

    def section_table(self, pooled: Any) -> Table | None:
        """Each judged explanation with the judge's verdict, its verdict on the reversed history, the claims
        it found unsupported and its rationale (unfaithful ones first; the JSON report has every one)."""
        f = pooled.faithfulness
        if f is None or not f.texts:
            return None

        def verdict(value: bool | None) -> str:
            return "—" if value is None else "faithful" if value else "not faithful"

        texts = sorted(f.texts, key=lambda t: (t.faithful is not False, t.kind != "original", t.user_id))
        rows = [(t.user_id, t.item_id, t.kind if t.kind == "original" else f"{t.kind} L{t.severity}",
                 verdict(t.faithful), verdict(t.reordered), "; ".join(t.unsupported) or "—",
                 t.rationale or t.failure or "—") for t in texts[:JUDGED_SHOWN]]
        more = (f"{len(texts) - JUDGED_SHOWN} more in the JSON report "
                "(gates[].verdict.details.faithfulness.texts)." if len(texts) > JUDGED_SHOWN else "")
        return Table("The judge's verdicts", ("User", "Item", "Explanation", "Verdict", "History reversed",
                                              "Unsupported", "Rationale"), rows, more)


JUDGED_SHOWN = 100  # judged explanations listed with their rationale
