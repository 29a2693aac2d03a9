"""The robustness report as GitHub-flavoured Markdown (job step summary, pull-request comment).

Same content as the terminal report, as tables, with status words (PASS / FAIL / INCONCLUSIVE /
INSENSITIVE) and no emoji. Every interpolated value goes through :func:`cell` or :func:`text`, i.e.
:func:`~pytest_robustexplain.sanitize.markdown_inert`: HTML escaped (GitHub renders inline HTML), the
characters of links, images, emphasis, code and tables backslash-escaped, bare URLs kept from autolinking,
line breaks and control characters shown — a hostile explanation can neither break a table nor put a
link, image or markup into the step summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..results import OVERALL, PairResult, RunResult
from ..sanitize import markdown_inert
from .comparison import comparison_note, conclusion, delta_text, model_comparisons, table_rows
from .json_report import atomic_write_text
from .summary import (
    ITEM_HEADER,
    JUDGE_COST_LABEL,
    METRIC_DESCRIPTIONS,
    FailedGate,
    ReportModel,
    Summary,
    blocks,
    dataset_of,
    describe_changes,
    explanation_text,
    facts,
    failed_gates,
    find_gate,
    fmt_d,
    fmt_interval,
    fmt_mean,
    gate_check,
    item_row,
    items_by_test,
    judge_cost_lines,
    model_info,
    model_names,
    model_outcome,
    not_decided,
    overall_verdict_note,
    recent_runs,
    timings_text,
    verdict_text,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ..stats import Comparison


def text(value: Any) -> str:
    """A value as inert Markdown: no HTML, link, image, emphasis or autolink (``sanitize.markdown_inert``)."""
    return markdown_inert(str(value))


def cell(value: Any) -> str:
    """A value for a Markdown table cell: inert (``|`` escaped too), on one line."""
    return text(value)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table; every cell escaped."""
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def render_markdown(run: RunResult | ReportModel) -> str:
    """The Markdown report of ``run``: one section per model, then the model comparison."""
    report = ReportModel.of(run)
    run = report.run
    names = model_names(run)
    undecided = "\n".join(f"- {text(line)}" for line in not_decided(run))
    if not names:
        return "## robustexplain\n\nNo pairs were scored.\n" + (f"\n{undecided}\n" if undecided else "")
    blocks = [_tests_section(run), *(_model_section(run, report.summary(name)) for name in names), undecided]
    blocks.extend(_comparison_section(c) for c in model_comparisons(run))
    blocks.append(_footer(run))
    return "\n\n".join(b for b in blocks if b) + "\n"


def _tests_section(run: RunResult) -> str:
    """Every gated item by its test (with the test's own thresholds), then by model — when the run gated
    more than one test: with one, the model's section below says the same, and a step summary stays
    short."""
    groups = items_by_test(run)
    if len(groups) < 2:
        return ""
    lines = ["## robustexplain — by test"]
    for group in groups:
        lines += ["", f"**{text(group.test)}** — gated at {text(group.thresholds)}", ""]
        lines += table(ITEM_HEADER, [item_row(g) for g in group.items])
    return "\n".join(lines)


def _model_section(run: RunResult, summary: Summary) -> str:
    label = model_info(run, summary.model).label()
    outcome = model_outcome(run, summary.model)
    lines = [
        f"## robustexplain — model {text(label)}",
        "",
        f"**Status: {text(outcome)}**" if outcome else "Status: not gated",
        "",
        (f"dataset {text(dataset_of(run))} · " if dataset_of(run) else "")
        + f"seed {text(run.seed)} · {summary.n_users} users · {summary.n_pairs} pairs · "
        f"{summary.cached_pairs} cached  ",
        f"signature: {text(run.signature)}",
        "",
    ]
    failed = failed_gates(run, summary.model)
    lines += _gate_table(run, summary)
    lines += ["", *_metric_table(run, summary)]
    recent = recent_runs(run, summary.model)
    if recent:  # the run history: today's ρ beside the test's last runs
        lines += ["", "**Recent runs**", "", *(f"- {text(line)}" for line in recent)]
    if failed:  # one screen: what failed and why; the rest one click away
        lines += ["", "**Failed items**", "", *(f"- {text(entry.title)}" for entry in failed)]
    details = _details(run, summary, failed)
    if failed:
        return "\n".join([*lines, "", "<details><summary>Worst pairs of each failed item, kind × severity, "
                           "sensitivity, findings</summary>", "", *details, "", "</details>"])
    return "\n".join([*lines, *details])


def _details(run: RunResult, summary: Summary, failed: list[FailedGate]) -> list[str]:
    lines: list[str] = []
    if summary.severities:
        lines += ["", *_kind_severity_table(summary)]
    for block in blocks(summary):
        lines += ["", f"**{block.title}**" + (f" ({block.about})" if block.about else ""), ""]
        lines += table(list(block.columns), [list(row) for row in block.rows])
    lines += ["", *_facts_table(summary)]
    for entry in failed:
        lines += ["", *_failed_gate(entry)]
    if summary.failures:
        lines += ["", "**Generation failures** (scored 0 on every metric)", ""]
        lines += table(["User", "Item", "Kind", "Severity", "Failure", "Detail"],
                       [[f.key.user_id, f.key.item_id, f.key.kind, f"L{f.key.severity}", f.failure,
                         f.detail or "—"] for f in summary.failures])
    return lines


def _gate_table(run: RunResult, summary: Summary) -> list[str]:
    rows = []
    overall = find_gate(run, summary.model, OVERALL)
    check = gate_check(overall, "combined")
    rows.append(["Overall ρ", fmt_interval(summary.overall), f"≥ {check.threshold:.2f}" if check else "—",
                 verdict_text(overall, "combined") if overall and check else "not gated"])
    note = overall_verdict_note(run, summary.model)
    if note:
        rows.append(["Gate verdict (all checks)", "", "", note])
    for kind, interval in summary.by_kind.items():
        gate = find_gate(run, summary.model, kind)
        kind_check = gate_check(gate, "combined")
        rows.append([kind, fmt_interval(interval), f"≥ {kind_check.threshold:.2f}" if kind_check else "—",
                     verdict_text(gate) if gate else "not gated"])
    lines = table(["Perturbation", "ρ [95 % CI]", "Gate", "Status"], rows)
    if summary.small_kinds:
        lines += ["", "_Fewer than 50 pairs per kind: differences between kinds are not reliable._"]
    return lines


def _metric_table(run: RunResult, summary: Summary) -> list[str]:
    gate = find_gate(run, summary.model, OVERALL)
    rows = []
    for metric in summary.by_metric:  # the four, and the opt-in embedding when the run measured it
        check = gate_check(gate, metric)
        description = METRIC_DESCRIPTIONS.get(metric)
        name = f"{metric} ({description})" if description else metric
        rows.append([name, fmt_interval(summary.by_metric[metric]),
                     f"≥ {check.threshold:.2f}" if check else "—",
                     verdict_text(gate, metric) if gate and check else "not gated"])
    return table(["Metric", "Score [95 % CI]", "Gate", "Status"], rows)


def _kind_severity_table(summary: Summary) -> list[str]:
    severities = summary.severities
    rows = [[kind, *(fmt_mean(row[s].mean) if s in row else "—" for s in severities)]
            for kind, row in summary.kind_severity.items()]
    return table(["Kind × severity (ρ)", *(f"L{s}" for s in severities)], rows)


def _facts_table(summary: Summary) -> list[str]:
    return table(["Finding", "Value"], [list(row) for row in facts(summary)])


def _failed_gate(entry: FailedGate) -> list[str]:
    lines = [f"**FAIL — {text(entry.title)}**", ""]
    if not entry.worst:
        return [*lines, "No scored pairs."]
    return lines + table(["#", "User", "Item", "Kind", "Severity", _score_head(entry.quantity), "Changed",
                          "Original", "Perturbed"],
                         [_pair_row(rank, pair, entry.quantity) for rank, pair in enumerate(entry.worst, 1)])


def _score_head(quantity: str) -> str:
    return "ρ" if quantity == "combined" else quantity


def _pair_row(rank: int, pair: PairResult, quantity: str) -> list[Any]:
    key = pair.key
    return [rank, key.user_id, key.item_id, key.kind, f"L{key.severity}", f"{pair.metric(quantity):.3f}",
            describe_changes(pair.changes), explanation_text(pair, "original"),
            explanation_text(pair, "perturbed")]


def _comparison_section(comparison: Comparison) -> str:
    name_a, name_b = comparison.names
    return "\n".join([f"## Model comparison: {text(name_a)} vs {text(name_b)}", "",
                      *comparison_markdown(comparison)])


def comparison_markdown(comparison: Comparison) -> list[str]:
    """A ``stats.Comparison`` as a Markdown table with its footnote and conclusion."""
    name_a, name_b = comparison.names
    rows = [[r.label, fmt_interval(r.mean_a), fmt_interval(r.mean_b), delta_text(r), p, fmt_d(r.d_z)]
            for r, p in table_rows(comparison)]
    return [*table(["", name_a, name_b, "Δ", "p (paired t, Holm)", "d_z"], rows), "",
            f"{text(comparison_note(comparison))}  ", f"Conclusion: {text(conclusion(comparison))}"]


def _footer(run: RunResult) -> str:
    parts = []
    if run.calls:
        parts.append("model calls: " + " · ".join(f"{text(v)} {text(k)}" for k, v in run.calls.items()))
    parts += [f"{JUDGE_COST_LABEL}: {text(line)}" for line in judge_cost_lines(run)]
    if run.timings:
        parts.append(f"time: {text(timings_text(run.timings))}")
    return "  \n".join(parts)


def write_markdown(result: RunResult | ReportModel, path: Path) -> None:
    """The Markdown report, written atomically (shared by the plugin and the CLI)."""
    atomic_write_text(path, render_markdown(result) + "\n")
