"""The terminal robustness report (the layout of design/reports.md), one section per model.

``render_terminal(run)`` returns plain text: per model the header, signature, overall ρ with its gate,
ρ by perturbation kind with each kind's gate, the metrics, the kind × severity table, severity
degradation, the sensitivity block (the cross-user control: ρ_swap, Δ, R, insensitive users, grounding),
noise floor, weakest dimension and perturbation, generation failures and a recommendation;
a failed gate lists its three worst pairs right under its row. With two or more models a comparison table
follows. ``quiet=True`` gives one line per model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks.controls import guard_checks_text
from ..results import FAIL, OVERALL, PairResult, RunResult, answered_by
from ..wording import count_noun
from .comparison import comparison_note, conclusion, delta_text, model_comparisons, table_rows
from .formatting import wrap
from .github import github_annotations, on_github_actions
from .summary import (
    JUDGE_COST_LABEL,
    METRIC_DESCRIPTIONS,
    UNFIT_LABEL,
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
    judge_cost_lines,
    model_info,
    model_names,
    model_outcome,
    not_decided,
    overall_verdict_note,
    timings_text,
    verdict_text,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..stats import Comparison

LABEL_WIDTH = 32  # the label column of every section
VALUE_WIDTH = 23  # "0.513 [0.497, 0.529]" plus spacing
CELL_WIDTH = 7  # one severity column of the kind × severity table
_INDENT = "      "


def render_terminal(run: RunResult | ReportModel, *, width: int = 100, quiet: bool = False,
                    verbose: bool = True) -> str:
    """The robustness report of ``run`` as text no wider than ``width`` (tables aside).

    ``verbose=False`` (pytest without ``-v``) keeps a failing model short: the tables, each failed item with
    its worst pairs on one line each, the guard's checks (name, outcome and value, wrapped) and the
    recommendation; ``verbose`` adds the kind × severity table, the sensitivity block, every finding and the
    explanations in full width.
    """
    report = ReportModel.of(run)
    run = report.run
    names = model_names(run)
    undecided = [f"robustexplain: {line}" for line in not_decided(run)]
    if not names:
        return "\n".join(["robustexplain: no pairs were scored", *undecided])
    summaries = [report.summary(name) for name in names]
    if quiet:
        hosts = answered_by(run.calls)  # several hosts: which answered how many calls
        by_host = [f"robustexplain: calls by host: {' · '.join(f'{h} {n}' for h, n in hosts.items())}"]
        return "\n".join([*(quiet_line(run, s) for s in summaries), *(by_host if hosts else []), *undecided])
    blocks = [_model_block(run, s, width, verbose) for s in summaries]
    if undecided:  # a model whose calls all failed beside one that was gated
        blocks.append("\n".join(undecided))
    blocks.extend("\n".join(comparison_lines(c, width)) for c in model_comparisons(run))
    footer = _footer(run)
    if footer:
        blocks.append(footer)
    return "\n\n".join(blocks)


def quiet_line(run: RunResult, summary: Summary) -> str:
    """``robustexplain: llama3.1:8b ρ 0.513 [0.497, 0.529] PASS · 480 pairs · 25 cached``."""
    outcome = model_outcome(run, summary.model)
    parts = [f"robustexplain: {summary.model} ρ {fmt_interval(summary.overall)}"]
    if outcome:
        parts[0] += f" {outcome}"
    parts += [f"{summary.n_pairs} pairs", f"{summary.cached_pairs} cached"]
    if summary.n_failures:
        parts.append(f"{summary.n_failures} generation failures")
    return " · ".join(parts)


def header_line(run: RunResult, summary: Summary) -> str:
    """``robustexplain — model NAME (digest…, size, quant) · dataset D · seed S · N users · P pairs · C
    cached``."""
    label = model_info(run, summary.model).label()
    dataset = dataset_of(run)
    return (f"robustexplain — model {label}{f' · dataset {dataset}' if dataset else ''} · seed {run.seed} · "
            f"{count_noun(summary.n_users, 'user')} · {count_noun(summary.n_pairs, 'pair')} · "
            f"{summary.cached_pairs} cached")


def _model_block(run: RunResult, summary: Summary, width: int, verbose: bool) -> str:
    # Only a failing model is cut short: a passing one has no failure to put first.
    verbose = verbose or not any(g.model == summary.model and g.verdict.outcome == FAIL for g in run.gates)
    head = [header_line(run, summary), f"signature: {run.signature}"]
    tables = [_overall_section(run, summary), _kind_section(run, summary, width, verbose),
              _metric_section(run, summary)]
    failed = _failed_section(failed_gates(run, summary.model, 3 if verbose else 1, repeat=verbose), width,
                             verbose)
    # The short report shows a check's section only when it found or gated something.
    sections = [_rows_section(b.heading(), b.rows, width)
                for b in blocks(summary, brief=not verbose)]
    if verbose:
        rest = [_kind_severity_section(summary), *sections, _facts_section(summary, width)]
    else:
        rest = [*sections, _short_facts(summary, width)]
    return "\n\n".join("\n".join(lines) for lines in [head, *tables, failed, *rest] if lines)


def _row(label: str, value: str = "", gate: str = "") -> str:
    text = f"{label:<{LABEL_WIDTH}}" if len(label) < LABEL_WIDTH else label + "   "
    if gate:
        return f"{text}{value:<{VALUE_WIDTH}}{gate}".rstrip()
    return f"{text}{value}".rstrip()


def _overall_section(run: RunResult, summary: Summary) -> list[str]:
    gate = find_gate(run, summary.model, OVERALL)
    check = gate_check(gate, "combined")
    if gate is None:
        gate_text = "not gated"
    elif check is None:
        gate_text = gate.verdict.outcome
    else:
        gate_text = f"gate ≥ {check.threshold:.2f}   {verdict_text(gate, 'combined')}"
    lines = [_row("Overall robustness ρ", fmt_interval(summary.overall), gate_text)]
    note = overall_verdict_note(run, summary.model)
    if note:  # ρ passed but a metric did not: the gate's verdict must not be missed
        lines.append(_row("Gate verdict (all checks)", "", note))
    return lines


def _kind_section(run: RunResult, summary: Summary, width: int, verbose: bool) -> list[str]:
    gated = any(find_gate(run, summary.model, k) for k in summary.by_kind)
    lines = [_row("By perturbation", "ρ", "gate" if gated else "")]
    overall = gate_check(find_gate(run, summary.model, OVERALL), "combined")
    for kind, interval in summary.by_kind.items():
        gate = find_gate(run, summary.model, kind)
        said = verdict_text(gate) if gate else ""
        check = gate_check(gate, "combined") if gate else None
        if check is not None and (overall is None or check.threshold != overall.threshold):
            said = f"≥ {check.threshold:.2f} {said}"  # a per-kind threshold, beside its row
        lines.append(_row(f"  {kind}", fmt_interval(interval), said))
    if summary.small_kinds and verbose:
        note = (f"(fewer than 50 pairs per kind for {', '.join(summary.small_kinds)}: differences "
                "between kinds are not reliable)")
        lines += wrap(note, max(40, width - 2), initial_indent="  ", subsequent_indent="   ")
    return lines


def _metric_section(run: RunResult, summary: Summary) -> list[str]:
    gate = find_gate(run, summary.model, OVERALL)
    checks = [c for c in (gate_check(gate, m) for m in summary.by_metric) if c is not None]
    thresholds = {c.threshold for c in checks}
    head = f"gate ≥ {thresholds.pop():.2f}" if len(thresholds) == 1 else ""
    lines = [f"{'By metric':<{LABEL_WIDTH + VALUE_WIDTH}}{head}".rstrip()]
    for metric in summary.by_metric:  # the four, the opt-in embedding and the user's own when measured
        check = gate_check(gate, metric)
        description = METRIC_DESCRIPTIONS.get(metric)
        label = f"  {metric:<10} ({description})" if description else f"  {metric}"
        gate_text = ""
        if gate is not None and check is not None:
            gate_text = verdict_text(gate, metric)
            if len(thresholds) > 1:
                gate_text = f"≥ {check.threshold:.2f} {gate_text}"
        lines.append(_row(label, fmt_interval(summary.by_metric[metric]), gate_text))
    return lines


def _kind_severity_section(summary: Summary) -> list[str]:
    severities = summary.severities
    if not severities:
        return []
    head = "".join(f"{'L' + str(s):<{CELL_WIDTH}}" for s in severities)
    lines = [f"{'Kind × severity (ρ)':<{LABEL_WIDTH}}{head}".rstrip()]
    for kind, row in summary.kind_severity.items():
        cells = "".join(f"{fmt_mean(row[s].mean) if s in row else '—':<{CELL_WIDTH}}" for s in severities)
        lines.append(f"{'  ' + kind:<{LABEL_WIDTH}}{cells}".rstrip())
    return lines


def _rows_section(title: str, rows: list[tuple[str, str]], width: int) -> list[str]:
    """A titled block of (label, value) rows; nothing when there are no rows."""
    if not rows:
        return []
    lines = [title]
    for label, value in rows:
        lines += _wrapped(f"  {label}", value, width)
    return lines


def _facts_section(summary: Summary, width: int) -> list[str]:
    lines = []
    for label, value in facts(summary, failures_note=" (listed in the JSON report)"):
        lines += _wrapped(label, value, width)
    return lines


def _wrapped(label: str, text: str, width: int) -> list[str]:
    body = wrap(text, max(30, width - LABEL_WIDTH)) or [""]
    return [_row(label, body[0])] + [" " * LABEL_WIDTH + line for line in body[1:]]


def _failed_section(failed: list[FailedGate], width: int, verbose: bool) -> list[str]:
    """Each failed test item once: its slice and thresholds, then its worst pairs from that slice."""
    if not failed:
        return []
    lines = ["Failed items (worst pairs from each item's own slice, each pair once" + (")" if verbose else
                                                                                   "; -v shows more)")]
    for entry in failed:
        # Wrapped, never cut: the reason is what a CI log is read for (it was cut mid-number at 140 columns).
        title = entry.title if verbose else entry.short_title
        lines += wrap(f"FAIL {title}", width, initial_indent="  ", subsequent_indent="      ")
        if entry.repeated and not entry.worst:
            lines.append(f"{_INDENT}({count_noun(entry.repeated, 'worst pair')} listed above)")
        elif not entry.worst:
            lines.append(f"{_INDENT}(no scored pairs)")
        for rank, pair in enumerate(entry.worst, 1):
            lines += _pair_lines(rank, pair, entry.quantity, width, verbose)
    return lines


def _pair_lines(rank: int, pair: PairResult, quantity: str, width: int, verbose: bool) -> list[str]:
    key = pair.key
    score = f"ρ {pair.combined:.3f}" if quantity == "combined" else f"{quantity} {pair.metric(quantity):.3f}"
    where = f"user {key.user_id} · item {key.item_id} · {key.kind} L{key.severity}"
    if not verbose:  # two lines: where, score and change; then both explanations side by side
        half = max(20, (width - len(_INDENT) - 8) // 2)
        return [_one_line(f"{_INDENT}{rank}. {where} · {score} · {describe_changes(pair.changes)}", width),
                f"{_INDENT}   {_one_line(_quoted(explanation_text(pair, 'original')), half)} → "
                f"{_one_line(_quoted(explanation_text(pair, 'perturbed')), half)}"]
    lines = [f"{_INDENT}{rank}. {where} · {score}"]
    indent = _INDENT + "   "
    text_width = max(40, width - len(indent) - 11)
    for label, text in (("changed:", describe_changes(pair.changes)),
                        ("original:", _quoted(explanation_text(pair, "original"))),
                        ("perturbed:", _quoted(explanation_text(pair, "perturbed")))):
        body = wrap(text, text_width) or [""]
        lines.append(f"{indent}{label:<11}{body[0]}")
        lines += [f"{indent}{'':<11}{line}" for line in body[1:]]
    return lines


def _one_line(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def _short_facts(summary: Summary, width: int) -> list[str]:
    """Without -v: the guard's checks, generation failures and cut replies (when any), the recommendation."""
    # Everything wrapped, never cut: what a CI log is read for. The guard's checks by name with the number
    # each decided on (-v shows ρ_swap, Δ and the rest); a failure count of 0 is left to -v and the JSON,
    # which keeps an all-failing run on one screen now that the guard's row wraps.
    lines = _wrapped("Guard", guard_checks_text(summary), width)
    shown = {"Recommendation": True, UNFIT_LABEL: True, "Generation failures": bool(summary.failures),
             "Replies cut at the token limit": bool(summary.cut_pairs)}
    for label, value in facts(summary, failures_note=" (listed in the JSON report)"):
        if shown.get(label, False):
            lines += _wrapped(label, value, width)
    return lines


def _quoted(text: str) -> str:
    return text if text.startswith("(generation failed") else f"“{text}”"


def comparison_lines(comparison: Comparison, width: int = 100) -> list[str]:
    """A ``stats.Comparison`` as the text table of design/reports.md."""
    name_a, name_b = comparison.names
    col = max(22, len(name_a) + 2, len(name_b) + 2)
    rows = [(row, delta_text(row), p) for row, p in table_rows(comparison)]
    # A change over a base near 0 can be "+12580.6 %": the column grows so a space always follows it.
    delta = max(10, *(len(d) + 1 for _, d, _ in rows)) if rows else 10
    lines = [f"Model comparison — {name_b} relative to {name_a}",
             f"{'':<17}{name_a:<{col}}{name_b:<{col}}{'Δ':<{delta}}{'p (paired t)':<15}d_z"]
    for row, d, p in rows:
        lines.append(f"{row.label:<17}{fmt_interval(row.mean_a):<{col}}{fmt_interval(row.mean_b):<{col}}"
                     f"{d:<{delta}}{p:<15}{fmt_d(row.d_z)}")
    lines += wrap(comparison_note(comparison), width)
    lines += wrap(f"Conclusion: {conclusion(comparison)}", width)
    return lines


def _footer(run: RunResult) -> str:
    parts = []
    if run.calls:
        calls = " · ".join(f"{v} {k}" for k, v in run.calls.items())
        parts.append(f"model calls: {calls}")
    parts += [f"{JUDGE_COST_LABEL}: {line}" for line in judge_cost_lines(run)]
    if run.timings:
        parts.append(f"time: {timings_text(run.timings)}")
    return "\n".join(parts)



def session_summary(report: ReportModel, *, width: int, verbosity: int,
                    line_of: Mapping[str, int] | None = None, written: Sequence[str] = ()) -> list[str]:
    """What pytest's terminal summary prints for the run (under its "robustness report" rule unless
    ``verbosity`` is quiet): the report at the terminal's width, kept between 80 and 140 columns, where the
    report files were ``written``, then on GitHub Actions an annotation per failed item, at its test's line
    (``line_of``)."""
    text = render_terminal(report, width=max(80, min(width, 140)), quiet=verbosity < 0, verbose=verbosity > 0)
    annotations = github_annotations(report.run, line_of=line_of) if on_github_actions() else []
    return [text, *([written_line(written)] if written else []), *annotations]


def written_line(written: Sequence[str]) -> str:
    """Where the report files went, as both doors say it: "reports written: JSON /ci/run.json · HTML …"."""
    return f"robustexplain: reports written: {' · '.join(written)}"
