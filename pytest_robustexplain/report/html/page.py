"""The parts of the page: the run's facts, each model's section (gates, metrics, kind × severity, findings,
failed items and their worst pairs with word differences marked, generation failures) and the models
compared. Every value from the run is escaped with :func:`~.common.e` here; the charts come from a
:class:`~.charts._Plotter` when matplotlib imports.
"""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING

from ...results import FAIL, INCONCLUSIVE, INSENSITIVE, OVERALL, PASS, PairResult, RunResult, metrics_of
from ..comparison import comparison_note, conclusion, delta_text, table_rows
from ..summary import (
    ITEM_HEADER,
    JUDGE_COST_LABEL,
    METRIC_DESCRIPTIONS,
    FailedGate,
    Summary,
    blocks,
    dataset_of,
    describe_changes,
    facts,
    failed_gates,
    find_gate,
    fmt_d,
    fmt_interval,
    fmt_mean,
    gate_check,
    gate_thresholds,
    item_row,
    items_by_test,
    judge_cost_lines,
    model_info,
    model_outcome,
    overall_verdict_note,
    recent_runs,
    timings_text,
    verdict_text,
    worst_pairs,
)
from .common import EXPLANATION_LIMIT, e, gate_shade

if TYPE_CHECKING:
    from ...checks import Table
    from ...stats import Comparison
    from .charts import Plotter

_WORST_SHOWN = 5


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table from cells that are already HTML (callers escape their values)."""
    # A table of name/value rows has no column names: no header row (it drew as an empty grey bar).
    head = ("<thead><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr></thead>"
            if any(h.strip() for h in header) else "")
    body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    attr = f' class="{cls}"' if cls else ""
    # A wide table scrolls inside its own box, so the page itself never scrolls sideways on a phone.
    return f'<div class="table-wrap"><table{attr}>{head}<tbody>{body}</tbody></table></div>'


def _td(content: str) -> str:
    return f"<td>{content}</td>"


def status(text: str) -> str:
    """A verdict text with its outcome word coloured; unknown words stay plain."""
    word = text.split(" ", 1)[0]
    if word in (PASS, FAIL, INCONCLUSIVE, INSENSITIVE):
        return f'<span class="{word}">{e(word)}</span>{e(text[len(word):])}'
    return e(text)


def meta_table(run: RunResult) -> str:
    rows = [["signature", e(run.signature)], ["seed", e(run.seed)],
            ["pytest-robustexplain", e(run.package_version or "unknown")],
            ["started / finished", f"{e(run.started_at or '?')} / {e(run.finished_at or '?')}"]]
    if run.calls:
        rows.append(["model calls", e(" · ".join(f"{v} {k}" for k, v in run.calls.items()))])
    rows += [[JUDGE_COST_LABEL, e(line)] for line in judge_cost_lines(run)]
    if run.timings:
        rows.append(["time", e(timings_text(run.timings))])
    if run.settings:
        settings = e(json.dumps(run.settings, indent=1, sort_keys=True, default=str))
        rows.append(["settings", f"<details><summary>show</summary><pre>{settings}</pre></details>"])
    return _table(["", ""], rows, "meta")


def tests_section(run: RunResult) -> str:
    """Every gated item by its test (with the test's own thresholds), then by model: three tests with
    different thresholds are three groups, each named."""
    groups = items_by_test(run)
    if not groups:
        return ""
    parts = ['<section id="tests"><h2>By test</h2>']
    for group in groups:
        rows = [[e(c) if i != 2 else status(c) for i, c in enumerate(item_row(g))] for g in group.items]
        parts += [f"<h3>{e(group.test)}</h3>", f'<p class="note">gated at {e(group.thresholds)}</p>',
                  _table(ITEM_HEADER, rows)]
    return "".join(parts) + "</section>"


def status_list(run: RunResult, summaries: list[Summary]) -> str:
    items = []
    for s in summaries:
        outcome = model_outcome(run, s.model)
        verdict = status(outcome) if outcome else "not gated"
        items.append(f"<li><b>{e(s.model)}</b>: ρ {e(fmt_interval(s.overall))} — {verdict} · "
                     f"{s.n_pairs} pairs · {s.cached_pairs} cached · {s.n_failures} generation failures</li>")
    return "<ul>" + "".join(items) + "</ul>"


def model_section(run: RunResult, summary: Summary, plotter: Plotter | None) -> str:
    info = model_info(run, summary.model)
    parts = [f'<section id="model-{e(summary.model)}">',
             f"<h2>robustexplain — model {e(info.label())}</h2>",
             "<p>" + (f"dataset {e(dataset_of(run))} · " if dataset_of(run) else "")
             + f"seed {e(run.seed)} · {summary.n_users} users · {summary.n_pairs} pairs · "
             f"{summary.cached_pairs} cached · backend {e(info.backend)}"
             + (f" · server {e(info.server_version)}" if info.server_version else "")
             + (f" · host {e(info.host)}" if info.host else "") + "</p>",
             _gate_table(run, summary), _recent(run, summary.model, plotter), _metric_table(run, summary),
             _heatmap_table(summary, gate_thresholds(run, summary.model)["combined"]),
             _sections(summary), _facts(summary)]
    if plotter is not None:
        parts.append(plotter.model_charts(summary, gate_thresholds(run, summary.model)))
    for entry in failed_gates(run, summary.model):
        parts.append(_failed_gate(entry))
    worst = worst_pairs(run.model_pairs(summary.model), _WORST_SHOWN)
    if worst:
        parts += [f"<h3>The {len(worst)} least robust pairs</h3>", _pairs_table(worst, "combined")]
    if summary.failures:
        rows = [[e(f.key.user_id), e(f.key.item_id), e(f.key.kind), f"L{f.key.severity}", e(f.failure),
                 e(f.detail or "—")] for f in summary.failures]
        parts += ["<h3>Generation failures (scored 0 on every metric)</h3>",
                  _table(["User", "Item", "Kind", "Severity", "Failure", "Detail"], rows)]
    parts.append("</section>")
    return "\n".join(parts)


def _recent(run: RunResult, model: str, plotter: Plotter | None) -> str:
    """Today's ρ beside each item's recent runs (the run history), and their trend charts when matplotlib
    draws; nothing without a history."""
    lines = recent_runs(run, model)
    if not lines:
        return ""
    entries = [t for t in run.settings.get("history_trend") or () if isinstance(t, dict)
               and t.get("model") == model]
    charts = plotter.trends(entries) if plotter is not None else ""
    return ('<h3>Recent runs</h3><ul class="recent">' + "".join(f"<li>{e(line)}</li>" for line in lines)
            + "</ul>" + (f'<div class="charts">{charts}</div>' if charts else ""))


def _gate_table(run: RunResult, summary: Summary) -> str:
    overall = find_gate(run, summary.model, OVERALL)
    check = gate_check(overall, "combined")
    rows = [["<b>Overall ρ</b>", e(fmt_interval(summary.overall)),
             e(f"≥ {check.threshold:.2f}") if check else "—",
             status(verdict_text(overall, "combined")) if overall and check else "not gated"]]
    note = overall_verdict_note(run, summary.model)
    if note:
        rows.append(["Gate verdict (all checks)", "", "", status(note)])
    for kind, interval in summary.by_kind.items():
        gate = find_gate(run, summary.model, kind)
        kind_check = gate_check(gate, "combined")
        rows.append([e(kind), e(fmt_interval(interval)),
                     e(f"≥ {kind_check.threshold:.2f}") if kind_check else "—",
                     status(verdict_text(gate)) if gate else "not gated"])
    note = ('<p class="note">Fewer than 50 pairs per kind: differences between kinds are not reliable.</p>'
            if summary.small_kinds else "")
    return "<h3>By perturbation</h3>" + _table(["", "ρ [95 % CI]", "gate", "status"], rows) + note


def _metric_table(run: RunResult, summary: Summary) -> str:
    gate = find_gate(run, summary.model, OVERALL)
    rows = []
    for metric in summary.by_metric:  # the four, and the opt-in embedding when the run measured it
        check = gate_check(gate, metric)
        description = METRIC_DESCRIPTIONS.get(metric)
        rows.append([e(f"{metric} ({description})" if description else metric),
                     e(fmt_interval(summary.by_metric[metric])),
                     e(f"≥ {check.threshold:.2f}") if check else "—",
                     status(verdict_text(gate, metric)) if gate and check else "not gated"])
    return "<h3>By metric</h3>" + _table(["", "score [95 % CI]", "gate", "status"], rows)


def _heatmap_table(summary: Summary, gate: float) -> str:
    """Kind × severity as a table whose cells are shaded by ρ against the gate (readable without charts)."""
    severities = summary.severities
    if not severities:
        return ""
    rows = []
    for kind, row in summary.kind_severity.items():
        cells = [e(kind)]
        for s in severities:
            if s not in row:
                cells.append("—")
                continue
            shade = gate_shade(row[s].mean, gate)
            # class "shade" keeps the text dark on these light colours in dark mode too.
            cells.append(f'<span class="shade" style="background:{shade}" '
                         f'title="{e(fmt_interval(row[s]))}">{e(fmt_mean(row[s].mean))}</span>')
        rows.append(cells)
    return "<h3>Kind × severity (ρ)</h3>" + _table(["", *(f"L{s}" for s in severities)], rows)



def _sections(summary: Summary) -> str:
    """The checks' sections, each a table of its rows and then the tables of cases behind them."""
    return "".join(f"<h3>{e(b.heading(' — ', ''))}</h3>"
                   + _table(["", ""], [[e(label), e(value)] for label, value in b.rows])
                   + "".join(_cases(t) for t in b.tables) for b in blocks(summary))


def _cases(table: Table) -> str:
    note = f"<p>{e(table.note)}</p>" if table.note else ""
    return (f"<h3>{e(table.heading)}</h3>"
            + _table([e(c) for c in table.columns], [[e(c) for c in row] for row in table.rows]) + note)


def _facts(summary: Summary) -> str:
    return "<h3>Findings</h3>" + _table(["", ""], [[e(a), e(b)] for a, b in facts(summary)])


def _failed_gate(entry: FailedGate) -> str:
    head = f'<h3><span class="FAIL">FAIL</span> — {e(entry.title)}</h3>'
    if not entry.worst:
        return head + "<p>No scored pairs.</p>"
    return head + _pairs_table(list(entry.worst), entry.quantity)


def _pairs_table(pairs: list[PairResult], quantity: str) -> str:
    """Pairs with both explanations side by side (word differences marked) and what the perturbation did."""
    rows = []
    for pair in pairs:
        key = pair.key
        scores = " · ".join(f"{m[:4]} {pair.metric(m):.2f}" for m in metrics_of([pair]))
        focus = "ρ" if quantity == "combined" else quantity
        where = (f"user {e(key.user_id)}<br>item {e(key.item_id)}<br>{e(key.kind)} L{key.severity}"
                 f"<br><b>{e(focus)} {pair.metric(quantity):.3f}</b><br><small>{e(scores)}</small>")
        original, perturbed = _word_diff(pair.original[:EXPLANATION_LIMIT],
                                         pair.perturbed[:EXPLANATION_LIMIT])
        changes = (f"{e(describe_changes(pair.changes))}<details><summary>changes</summary><pre>"
                   f"{e(json.dumps(pair.changes, default=str))}</pre></details>")
        rows.append([where, changes, f'<div class="explanation">{original}</div>',
                     f'<div class="explanation">{perturbed}</div>'])
    return _table(["pair", "perturbation", "original explanation", "perturbed explanation"], rows)


def _word_diff(original: str, perturbed: str) -> tuple[str, str]:
    """Both texts escaped, words only in the original in <del>, words only in the perturbed in <ins>."""
    a, b = original.split(), perturbed.split()
    left: list[str] = []
    right: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        old, new = e(" ".join(a[i1:i2])), e(" ".join(b[j1:j2]))
        if op == "equal":
            left.append(old)
            right.append(new)
            continue
        if old:
            left.append(f"<del>{old}</del>")
        if new:
            right.append(f"<ins>{new}</ins>")
    return " ".join(left) or "<i>(empty)</i>", " ".join(right) or "<i>(empty)</i>"


def comparison_section(comparisons: list[Comparison], summaries: list[Summary],
                        plotter: Plotter | None) -> str:
    parts = ["<section><h2>Model comparison</h2>"]
    if plotter is not None:
        parts.append(plotter.comparison(summaries))
    for comparison in comparisons:
        name_a, name_b = comparison.names
        parts.append(f"<h3>{e(name_a)} vs {e(name_b)}</h3>")
        rows = [[e(r.label), e(fmt_interval(r.mean_a)), e(fmt_interval(r.mean_b)), e(delta_text(r)),
                 e(p), e(fmt_d(r.d_z))] for r, p in table_rows(comparison)]
        parts += [_table(["", e(name_a), e(name_b), "Δ", "p (paired t, Holm)", "d<sub>z</sub>"], rows),
                  f'<p class="note">{e(comparison_note(comparison))}</p>',
                  f"<p>Conclusion: {e(conclusion(comparison))}</p>"]
    parts.append("</section>")
    return "\n".join(parts)
