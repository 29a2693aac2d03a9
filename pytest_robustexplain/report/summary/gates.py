"""What a run's gates said, for every renderer: models and kinds in display order, a model's facts, gate and
threshold look-ups, verdict texts, the failed items with the pairs to look at first, and those worst pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

from ...checks import BUILTIN
from ...results import (
    DEFAULT_MIN_COMBINED,
    DEFAULT_MIN_METRIC,
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    METRICS,
    OVERALL,
    PASS,
    Finding,
    GateCheck,
    GateResult,
    ModelInfo,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
    is_control,
    is_number,
    user_metric_name,
)
from ...sanitize import visible
from ...wording import count_noun
from ..formatting import fmt_interval, fmt_mean, trim

# Display order of the method's five perturbation kinds; kinds the run used but not listed here follow,
# sorted, so a custom perturbation still shows up.
KIND_ORDER: tuple[str, ...] = (
    "noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values",
)


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Kinds in the method's order, unknown kinds after them (sorted); controls excluded."""
    present = {k for k in kinds if not is_control(k)}
    return [k for k in KIND_ORDER if k in present] + sorted(present - set(KIND_ORDER))


def model_names(run: RunResult) -> list[str]:
    """Models in the order of ``run.models``, then any model that only appears in the pairs.

    A model that was set up but neither scored a pair nor gated an item is left out: every test that
    would have used it chose another explainer (e.g. a conftest's ``explainer`` fixture under
    ``--robustexplain-backend=template``), and a "ρ n/a · 0 pairs" line would only mislead.
    """
    used = {p.key.model for p in run.pairs} | {g.model for g in run.gates}
    names = [str(m.get("name", "")) for m in run.models if m.get("name") in used]
    for p in run.pairs:
        if p.key.model not in names:
            names.append(p.key.model)
    return names


def model_info(run: RunResult, name: str) -> ModelInfo:
    """The :class:`ModelInfo` of ``name`` rebuilt from ``run.models`` (bare name when unknown)."""
    known = {f.name for f in fields(ModelInfo)}
    for entry in run.models:
        if entry.get("name") == name:
            payload = {k: v for k, v in entry.items() if k in known and k != "extra"}
            extra = {k: v for k, v in entry.items() if k not in known}
            extra.update(entry.get("extra") or {})
            payload.setdefault("backend", "unknown")
            return ModelInfo(**payload, extra=extra)
    return ModelInfo(name=name, backend="unknown")


def find_gate(run: RunResult, model: str, slice_: str) -> GateResult | None:
    """The gate of ``model`` on ``slice_`` (a kind or ``OVERALL``); the worst when several tests gate it."""
    matches = [g for g in run.model_gates(model) if g.slice == slice_]
    if not matches:
        return None
    return min(matches, key=lambda g: OUTCOME_RANK.get(g.verdict.outcome, len(OUTCOME_RANK)))


# Worst first: what "the worst gate" and "the worst row" mean wherever outcomes are ranked (an unranked
# outcome — a report-only row's None — sorts after PASS with ``OUTCOME_RANK.get(o, len(OUTCOME_RANK))``).
OUTCOME_RANK = {FAIL: 0, INSENSITIVE: 1, INCONCLUSIVE: 2, PASS: 3}


def model_outcome(run: RunResult, model: str) -> str | None:
    """The model's outcome: the worst of its gates (a failed kind fails the job even when the overall
    gate passed, so the headline must not say PASS), None when ungated."""
    outcomes = [g.verdict.outcome for g in run.model_gates(model)]
    return min(outcomes, key=lambda o: OUTCOME_RANK.get(o, len(OUTCOME_RANK))) if outcomes else None


def gate_thresholds(run: RunResult, model: str) -> dict[str, float]:
    """The threshold of each gated quantity (``combined`` and every metric) for the model.

    From its overall gate (else its first gate), else the run settings (``min_combined``; ``min_metric``
    as one number or a mapping per metric), else the method's defaults (0.5 and 0.35).
    """
    out = {"combined": DEFAULT_MIN_COMBINED, **dict.fromkeys(METRICS, DEFAULT_MIN_METRIC)}
    combined, metric = run.settings.get("min_combined"), run.settings.get("min_metric")
    if is_number(combined):
        out["combined"] = float(combined)
    if is_number(metric):
        out.update(dict.fromkeys(METRICS, float(metric)))
    elif isinstance(metric, dict):
        out.update({m: float(v) for m, v in metric.items() if m in METRICS and is_number(v)})
    gate = find_gate(run, model, OVERALL) or next(iter(run.model_gates(model)), None)
    if gate is not None:
        out.update({q: float(v) for q, v in gate.thresholds.items() if q in out and is_number(v)})
    return out


def failing_quantity(gate: GateResult) -> str:
    """The quantity whose check failed (``combined`` first), to pick the worst pairs by."""
    failed = [c.quantity for c in gate.verdict.failed_checks]
    if "combined" in failed:
        return "combined"
    # The paper's metrics and the user's own are on every gated pair; anything else is ranked by ρ.
    return failed[0] if failed and (failed[0] in METRICS or user_metric_name(failed[0])) else "combined"


def gate_pairs(run: RunResult, gate: GateResult) -> list[PairResult]:
    """The perturbation pairs a gate judged: its model's pairs in its slice (kinds, severities, users)."""
    return [p for p in run.model_pairs(gate.model) if gate.covers(p)]


def check_note(check: GateCheck, *, own_row: bool = False) -> str:
    """Why a check needs attention: a metric below its threshold and/or a fragile interval.

    ``own_row``: the check is shown on its quantity's own row, whose value already says which and how much.
    """
    notes = []
    named = not own_row and check.quantity != "combined"
    if check.outcome == FAIL and named:
        notes.append(f"{check.quantity} {fmt_mean(check.interval.mean)} < {check.threshold:.2f}")
    if check.fragile:
        what = f"{check.quantity} interval" if named else "interval"
        notes.append(f"fragile: {what} straddles {check.threshold:.2f}")
    return "; ".join(notes)


def verdict_text(gate: GateResult, quantity: str | None = None) -> str:
    """``FAIL (fragile: interval straddles 0.50)``: the outcome of the gate, or of one of its checks."""
    verdict = gate.verdict
    if quantity is not None:
        checks = [c for c in verdict.checks if c.quantity == quantity]
        if not checks:
            return ""
        outcome = checks[0].outcome
    else:
        checks = list(verdict.checks)
        outcome = verdict.outcome
    notes = [n for n in (check_note(c, own_row=quantity is not None) for c in checks) if n]
    if outcome == INSENSITIVE:
        notes.insert(0, "explanations barely depend on the user's history")
    if outcome == INCONCLUSIVE and verdict.users_needed:
        notes.append(f"≈{verdict.users_needed} more users would likely decide")
    return f"{outcome} ({'; '.join(notes)})" if notes else outcome


def overall_verdict_note(run: RunResult, model: str) -> str | None:
    """The overall gate's verdict when it differs from its ρ check (a metric failed while ρ passed)."""
    gate = find_gate(run, model, OVERALL)
    if gate is None:
        return None
    check = gate_check(gate, "combined")
    if check is not None and check.outcome == gate.verdict.outcome:
        return None
    return verdict_text(gate)


def gate_check(gate: GateResult | None, quantity: str) -> GateCheck | None:
    if gate is None:
        return None
    return next((c for c in gate.verdict.checks if c.quantity == quantity), None)


@dataclass(frozen=True)
class TestItems:
    """One gated test and its items, in the order the reports group them: by test (node id, with the
    thresholds its own marker gave it), then by model."""

    test: str
    thresholds: str
    items: tuple[GateResult, ...]


def items_by_test(run: RunResult) -> list[TestItems]:
    """Every gated item grouped by its test, in the order the tests were decided; within a test by model,
    then overall first and the kinds in the method's order."""
    groups: dict[str, list[GateResult]] = {}
    for gate in run.gates:
        groups.setdefault(gate.nodeid.split("[", 1)[0] or gate.slice, []).append(gate)
    order = {k: i for i, k in enumerate([OVERALL, *ordered_kinds(g.slice for g in run.gates)])}
    out = []
    for test, gates in groups.items():
        gates.sort(key=lambda g: (g.model, order.get(g.slice, len(order)), g.nodeid))
        out.append(TestItems(test, thresholds_text(gates), tuple(gates)))
    return out


def thresholds_text(gates: Sequence[GateResult]) -> str:
    """A test's own thresholds in words: ``ρ ≥ 0.5 · each metric ≥ 0.35``, with a kind's own where it has
    one (``category_drift: ρ ≥ 0.4``)."""
    def said(thresholds: dict[str, float]) -> str:
        combined = thresholds.get("combined")
        metrics = {q: t for q, t in thresholds.items() if q != "combined"}
        parts = [f"ρ ≥ {combined:g}"] if combined is not None else []
        if metrics and len(set(metrics.values())) == 1:
            parts.append(f"each metric ≥ {next(iter(metrics.values())):g}")
        else:
            parts += [f"{q} ≥ {t:g}" for q, t in metrics.items()]
        return " · ".join(parts)

    base = next((g for g in gates if g.slice == OVERALL), gates[0])
    text = said(base.thresholds)
    own = [f"{g.slice}: {said(g.thresholds)}" for g in gates if g is not base and g.slice != base.slice
           and said(g.thresholds) != text]
    return "; ".join([text, *dict.fromkeys(own)]) if text else ""


def item_row(gate: GateResult) -> list[str]:
    """One item's row under its test: the kind, the model, the outcome, ρ with its interval, and why."""
    check = gate_check(gate, "combined")
    reason = "" if gate.verdict.outcome == PASS else failed_reason(gate)
    rho = fmt_interval(check.interval) if check else "—"
    return [gate.slice, gate.model, gate.verdict.outcome, rho, reason]


ITEM_HEADER = ["item", "model", "outcome", "ρ [95 % CI]", "why"]


def recent_runs(run: RunResult, model: str) -> list[str]:
    """Each of ``model``'s items that ran before, today's ρ beside its recent runs from the run history
    (``settings.history_trend``): "test_x[overall]: ρ 0.71; last 10 runs 0.69–0.73". Empty without one."""
    said = {str(t.get("test")): str(t.get("said") or "") for t in run.settings.get("history_trend") or ()
            if isinstance(t, dict) and t.get("model") == model}
    lines = []
    for gate in (g for g in run.gates if g.model == model and said.get(g.nodeid)):
        check = gate_check(gate, "combined")
        today = f"ρ {check.interval.mean:.2f}; " if check else ""
        lines.append(f"{gate.nodeid}: {today}{said[gate.nodeid]}")
    return lines


@dataclass(frozen=True)
class FailedGate:
    """A failed test item with the pairs to look at first, from its own slice.

    ``worst`` leaves out pairs already listed under an earlier failed item (``repeated`` counts them), so a
    report lists each pair once however many items judged it.
    """

    gate: GateResult
    quantity: str
    worst: tuple[PairResult, ...]
    repeated: int = 0

    @property
    def title(self) -> str:
        """``<nodeid> · category_drift L5 · 5 users: ρ 0.711 [0.633, 0.789] < 0.95``."""
        return f"{self.gate.nodeid or self.gate.slice} · {slice_text(self.gate)}: {failed_reason(self.gate)}"

    @property
    def short_title(self) -> str:
        """The title with the first failed threshold only (``+3 checks`` for the others), and the other
        checks that failed the item by name (``also relative, grounding``): each reason named, none cut."""
        checks = self.gate.verdict.failed_checks
        # The first row alone; its "also" is said by name.
        first = replace(self.gate.verdict, findings={}).with_detail("stability", checks[:1])
        reason = failed_reason(replace(self.gate, verdict=first))
        others = [name for name, _ in _other_failures(self.gate.verdict)]
        more = [f"+{len(checks) - 1} checks"] if len(checks) > 1 else []
        more += [f"also {', '.join(others)}"] if checks and others else []
        said = f" ({'; '.join(more)})" if more else ""
        return f"{self.gate.nodeid or self.gate.slice} · {slice_text(self.gate)}: {reason}{said}"


def slice_text(gate: GateResult) -> str:
    """The slice a gate judged: ``category_drift L5 · 5 users`` (all kinds: ``5 kinds L1–L5 · 20 users``)."""
    scope = gate.scope
    if not scope:
        return gate.slice
    kinds = scope.get("kinds", [])
    what = kinds[0] if len(kinds) == 1 else f"{len(kinds)} kinds"
    users = count_noun(len(scope.get("users", [])), "user")
    return f"{what} {_levels(scope.get('severities', []))} · {users}"


def _levels(severities: Sequence[int]) -> str:
    ordered = sorted(severities)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"L{ordered[0]}–L{ordered[-1]}"
    return ",".join(f"L{s}" for s in ordered)


def failed_reason(gate: GateResult) -> str:
    """Why a gate failed, with its own thresholds: each failed threshold of ρ and the metrics, then the
    other checks that failed it too (:func:`also_failed`), else its :func:`headline` — after the names of
    every check that failed it when more than one did, so that none goes unsaid when the headline is cut."""
    checks = gate.verdict.failed_checks
    if checks:
        said = "; ".join(f"{'ρ' if c.quantity == 'combined' else c.quantity} {fmt_interval(c.interval)} < "
                         f"{c.threshold:g}" for c in checks)
        also = also_failed(gate.verdict)
        return f"{said}; also {also}" if also else said
    return named_headline(gate.verdict, 160)


# The check whose thresholds (ρ and the four metrics) ``Verdict.checks`` lists one by one.
_STABILITY = "stability"


def dataset_of(run: RunResult) -> str | None:
    """The name of the dataset the run read ("synthetic(seed=2601)", "movielens:ml-latest-small"), as the
    headers of every writer say it; None for a report written before it was recorded."""
    name = run.settings.get("dataset_name") or run.settings.get("dataset")
    return str(name) if name else None


def not_decided(run: RunResult) -> list[str]:
    """Why tests of the run could not be decided (every call of a model failed, the server broke off), one
    sentence each, as every writer says it ("Not decided: …"); empty for a run that decided everything."""
    errors = run.settings.get("errors")
    return [f"Not decided: {visible(str(m))}" for m in errors] if isinstance(errors, list) else []


def _other_failures(verdict: Verdict) -> list[tuple[str, Finding]]:
    """The enforced checks beside ρ and the metrics that failed the item (FAIL or INSENSITIVE), in order."""
    return [(name, verdict.findings[name]) for name in verdict.failing if name != _STABILITY]


def also_failed(verdict: Verdict) -> str:
    """The checks beside ρ and the metrics that failed the item too, each with its value and limit
    ("relative FAIL 0.07 [0.04, 0.10] (needs ≥ 0.5)"), in the order the verdict decided them; "" when
    none did. Where the thresholds are the reason a writer gives, these follow, so that every writer
    names every check that failed the item — the headline leads with one of them."""
    parts = []
    for _, f in _other_failures(verdict):
        side = "needs ≥" if f.bound == "min" else "at most"
        limit = "" if f.threshold is None else f" ({side} {f.threshold:g})"
        value = f" {fmt_interval(f.value, 2)}" if f.value is not None else ""
        parts.append(f"{f.check} {f.outcome}{value}{limit}")
    return "; ".join(parts)


def failing_checks(gates: Iterable[GateResult]) -> tuple[str, ...]:
    """The checks that failed these items (``Verdict.failing``; an item without such a finding, its outcome),
    each once, in the order found."""
    return tuple(dict.fromkeys(name for g in gates for name in (g.verdict.failing or (g.verdict.outcome,))))


def named_headline(verdict: Verdict, limit: int | None = None) -> str:
    """The :func:`headline` (cut at ``limit`` characters), after the names of every check that failed the
    item when more than one did, so that none goes unsaid when the headline speaks of the first."""
    said = headline(verdict)
    said = (trim(said, limit) if limit is not None else said) or verdict.outcome
    failing = verdict.failing
    return f"{' · '.join(failing)} failed — {said}" if len(failing) > 1 else said


def headline(verdict: Verdict) -> str:
    """The first sentence of a verdict's message that says why it came out as it did: warnings (a check
    under ``guard=warn``, which decides nothing) lead the message when nothing after them decided, and are
    passed over, with the connector that follows them ("Stability alone: ")."""
    connectors = {c.name: c.connector for c in BUILTIN}
    message = verdict.message
    for name, f in verdict.findings.items():
        if not f.enforced and f.note and message.startswith(f.note):
            message = message[len(f.note):].lstrip()
            connector = connectors.get(name, "")
            if connector and message.startswith(connector):
                message = message[len(connector):]
    return message.split(". ")[0].strip()


def failed_gates(run: RunResult, model: str, n: int = 3, *, repeat: bool = False) -> list[FailedGate]:
    """Every failed test item of the model (overall first, then by kind), each with its ``n`` worst pairs
    from its own slice; pairs listed under an earlier item are not listed again unless ``repeat``."""
    order = {k: i for i, k in enumerate([OVERALL, *ordered_kinds(g.slice for g in run.gates)])}
    failed = sorted((g for g in run.gates if g.model == model and g.verdict.outcome == FAIL),
                    key=lambda g: (order.get(g.slice, len(order)), g.nodeid))
    shown: set[PairKey] = set()
    out = []
    for gate in failed:
        quantity = failing_quantity(gate)
        pairs = gate_pairs(run, gate)
        fresh = pairs if repeat else [p for p in pairs if p.key not in shown]
        worst = worst_pairs(fresh, n, quantity=quantity)
        repeated = 0 if repeat else len({p.key for p in worst_pairs(pairs, n, quantity=quantity)} & shown)
        shown.update(p.key for p in worst)
        out.append(FailedGate(gate, quantity, tuple(worst), repeated))
    return out


def worst_pairs(pairs: Iterable[PairResult], n: int = 3, *, quantity: str = "combined",
                include_failures: bool = False) -> list[PairResult]:
    """The ``n`` perturbation pairs scoring lowest on ``quantity`` (ties broken by key, deterministic).

    Control pairs never count; generation failures are left out unless ``include_failures`` (they are
    listed separately and their zero scores say nothing about robustness).
    """
    candidates = [p for p in pairs
                  if not is_control(p.key.kind) and (include_failures or p.failure is None)]
    return sorted(candidates, key=lambda p: (p.metric(quantity), p.key))[:n]
