"""The pull-request comment: this change against the baseline, in one short Markdown table per model.

``robustexplain report robustness.json --format pr-comment --baseline baseline.json`` writes it; the
reusable GitHub Action (``action.yml``) posts it once per pull request and updates that same comment on
every push (it finds it by :data:`MARKER`). Every value goes through
:func:`~pytest_robustexplain.sanitize.markdown_inert`, so nothing from a model or a data file renders as a
link, an image or HTML on the pull request.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..results import FAIL, INCONCLUSIVE, INSENSITIVE, PASS, GateResult, Interval, RunResult
from ..sanitize import markdown_inert
from .summary import Summary, fmt_interval, model_names, model_outcome, summarize

MARKER = "<!-- robustexplain:pr-comment -->"


def _cell(text: object) -> str:
    return markdown_inert(str(text))


def _delta(now: Interval | None, before: Interval | None) -> str:
    if now is None or before is None:
        return "—"
    return f"{now.mean - before.mean:+.3f}"


def _rows(now: Summary, before: Summary | None) -> list[list[str]]:
    rows = [["Overall ρ", fmt_interval(before.overall) if before else "—", fmt_interval(now.overall),
             _delta(now.overall, before.overall if before else None)]]
    for kind, interval in now.by_kind.items():
        old = before.by_kind.get(kind) if before else None
        rows.append([f"ρ {kind}", fmt_interval(old) if old else "—", fmt_interval(interval),
                     _delta(interval, old)])
    g, b = now.sensitivity, before.sensitivity if before else None
    if g is not None:
        rows.append(["Sensitivity S (another user's history)", fmt_interval(b.sensitivity) if b else "—",
                     fmt_interval(g.sensitivity), _delta(g.sensitivity, b.sensitivity if b else None)])
        rows.append(["Insensitive users", f"{len(b.insensitive_users)} of {b.n_users}" if b else "—",
                     f"{len(g.insensitive_users)} of {g.n_users}", "—"])
        if g.relative_gate is not None:
            old_r = b.relative_gate if b else None
            rows.append(["Relative robustness R (gated kinds; 0: as far as another user's)",
                         fmt_interval(old_r) if old_r else "—", fmt_interval(g.relative_gate),
                         _delta(g.relative_gate, old_r)])
    for attack in now.attacks:
        was = next((a for a in before.attacks if a.kind == attack.kind), None) if before else None
        rows.append([f"{attack.kind} succeeded", f"{was.successes} of {was.n}" if was else "—",
                     f"{attack.successes} of {attack.n}", "—"])
    return rows


def _failed(gates: Sequence[GateResult]) -> list[str]:
    lines = []
    for gate in gates:
        if gate.verdict.outcome == PASS:
            continue
        reason = gate.verdict.message.split(". ")[0]
        lines.append(f"- {_cell(gate.nodeid)} — **{_cell(gate.verdict.outcome)}**: {_cell(reason)}")
    return lines


def render_pr_comment(run: RunResult, baseline: RunResult | None = None) -> str:
    """The comment body: a status line, then per model the table (baseline | this change | Δ) and the
    items that did not pass with their first reason."""
    names = model_names(run)
    outcomes = [model_outcome(run, n) for n in names]
    status = next((o for o in (FAIL, INSENSITIVE, INCONCLUSIVE) if o in outcomes), PASS)
    base_names = model_names(baseline) if baseline is not None else []
    title = f"### Robustness of recommendation explanations: **{status}**"
    lines = [MARKER, title, ""]
    if baseline is None:
        lines += ["_No baseline yet: the default branch saves one when its gate passes._", ""]
    for name in names:
        now = summarize(run, name)
        # The baseline's model of the same name, or its only model (a new model replacing the old one).
        base_name = name if name in base_names else (base_names[0] if len(base_names) == 1 else None)
        before = summarize(baseline, base_name) if baseline is not None and base_name else None
        outcome = model_outcome(run, name) or "not gated"
        lines += [f"**{_cell(name)}** — {_cell(outcome)} · {now.n_users} users · {now.n_pairs} pairs", "",
                  "| | baseline | this change | Δ |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in _rows(now, before)]
        failed = _failed([g for g in run.gates if g.model == name])
        if failed:
            lines += ["", "<details><summary>Items that did not pass</summary>", "", *failed, "",
                      "</details>"]
        lines.append("")
    lines.append(f"<sub>pytest-robustexplain {_cell(run.package_version)} · signature "
                 f"{_cell(run.signature)}</sub>")
    return "\n".join(lines) + "\n"
