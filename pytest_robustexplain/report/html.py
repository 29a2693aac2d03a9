"""A self-contained HTML report: one file, no scripts, no external resources.

Styles are inline; charts are base64 PNG images drawn with matplotlib (the optional ``plots`` extra),
imported lazily and driven through the Agg canvas directly, so the process-wide matplotlib backend is
never switched. Without matplotlib the page still holds every table and says how to get the charts.

Every value that comes from the run (model output, user and item ids, model names, settings, gate node
ids) goes through :func:`e` (``html.escape``): explanations are untrusted text.
"""

from __future__ import annotations

import base64
import difflib
import html
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..results import (
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    METRICS,
    OVERALL,
    PASS,
    PairResult,
    RunResult,
    metrics_of,
)
from .comparison import comparison_note, conclusion, delta_text, model_comparisons
from .json_report import atomic_write_text
from .summary import (
    METRIC_DESCRIPTIONS,
    FailedGate,
    Summary,
    describe_changes,
    facts,
    failed_gates,
    find_gate,
    fmt_d,
    fmt_interval,
    fmt_mean,
    fmt_p,
    fmt_pct,
    gate_check,
    gate_thresholds,
    model_info,
    model_names,
    model_outcome,
    overall_verdict_note,
    security_rows,
    sensitivity_rows,
    summarize,
    timings_text,
    verdict_text,
    worst_pairs,
)

if TYPE_CHECKING:
    from ..stats import Comparison

PLOTS_NOTE = "charts need the plots extra: pip install 'pytest-robustexplain[plots]'"
_EXPLANATION_LIMIT = 2000  # characters of each explanation shown in the worst-pairs table
_WORST_SHOWN = 5

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#1f2328;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.3rem;border-bottom:1px solid #d0d7de;padding-bottom:.3rem;
margin-top:2.5rem}
h3{font-size:1.05rem;margin-top:1.6rem}
table{border-collapse:collapse;margin:.6rem 0}th,td{border:1px solid #d0d7de;padding:.3rem .55rem;
text-align:left;vertical-align:top;font-variant-numeric:tabular-nums}th{background:#f6f8fa}.PASS{color:#1a7f37;font-weight:600}.FAIL{color:#cf222e;font-weight:600}
.INCONCLUSIVE{color:#9a6700;font-weight:600}.INSENSITIVE{color:#cf222e;font-weight:600}.note{color:#57606a;font-style:italic}
.charts img{max-width:100%;box-sizing:border-box;margin:.4rem .8rem .4rem 0;border:1px solid #eaeef2}
.explanation{white-space:pre-wrap;max-width:32rem;font-size:.92rem}del{background:#ffebe9;text-decoration:none}
ins{background:#dafbe1;text-decoration:none}details pre{white-space:pre-wrap;font-size:.8rem;max-width:28rem}
.meta td:first-child{font-weight:600}
.banner{border:2px solid #1a7f37;border-radius:6px;padding:.7rem 1rem;margin:1rem 0;background:#dafbe1}
.banner-FAIL,.banner-INSENSITIVE{border-color:#cf222e;background:#ffebe9}
.banner-INCONCLUSIVE{border-color:#9a6700;background:#fff8c5}
.table-wrap{overflow-x:auto;max-width:100%}body{overflow-wrap:break-word}img{max-width:100%;height:auto}
@media (max-width:600px){body{margin:1rem auto;padding:0 .5rem}.explanation{max-width:none}
.charts img{margin:.4rem 0}}
@media (prefers-color-scheme:dark){body{background:#0d1117;color:#e6edf3}th{background:#161b22}
th,td,h2{border-color:#30363d}.note{color:#8b949e}.PASS{color:#3fb950}.FAIL,.INSENSITIVE{color:#f85149}
.INCONCLUSIVE{color:#d29922}.banner{background:#12261e;border-color:#3fb950}
.banner-FAIL,.banner-INSENSITIVE{background:#2d1214;border-color:#f85149}
.banner-INCONCLUSIVE{background:#2b2111;border-color:#d29922}del{background:#4c1d1d}ins{background:#12372a}
.charts img{background:#fff}}
"""


def e(value: Any) -> str:
    """HTML-escape any value (quotes included, so it is safe in attributes too)."""
    return html.escape(str(value), quote=True)


def render_html(run: RunResult) -> str:
    """The HTML report of ``run`` as one self-contained page."""
    names = model_names(run)
    summaries = [summarize(run, name) for name in names]
    plotter = _Plotter.load()
    body = ["<h1>robustexplain report</h1>", _banner(run, summaries), _meta_table(run),
            _status_list(run, summaries)]
    if plotter is None:
        body.append(f'<p class="note">{PLOTS_NOTE}</p>')
    if not names:
        body.append("<p>No pairs were scored.</p>")
    body += [_model_section(run, s, plotter) for s in summaries]
    comparisons = model_comparisons(run)
    if comparisons:  # only models that ran the same cases
        body.append(_comparison_section(comparisons, summaries, plotter))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>robustexplain report — {e(', '.join(names))}</title>\n<style>{_CSS}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def _banner(run: RunResult, summaries: list[Summary]) -> str:
    """The verdict first: one line per model with its outcome, ρ and the reason of its first failed item."""
    if not summaries:
        return ""
    lines = []
    rank = {FAIL: 0, INSENSITIVE: 1, INCONCLUSIVE: 2, PASS: 3}
    outcomes = [model_outcome(run, s.model) or PASS for s in summaries]
    worst = min(outcomes, key=lambda o: rank.get(o, 3))
    for s, outcome in zip(summaries, outcomes, strict=True):
        failed = next((g for g in run.gates if g.model == s.model and g.verdict.outcome != PASS), None)
        reason = f" — {e(failed.slice)}: {e(failed.verdict.message.split('. ')[0])}" if failed else ""
        lines.append(f"<div>{_status(outcome)} · <b>{e(s.model)}</b> · ρ {e(fmt_interval(s.overall))}"
                     f"{reason}</div>")
    return f'<div class="banner banner-{e(worst)}" role="status">' + "".join(lines) + "</div>"


def write_html(run: RunResult, path: str | os.PathLike[str]) -> Path:
    """Write the HTML report of ``run`` to ``path`` atomically."""
    return atomic_write_text(path, render_html(run))


# ------------------------------------------------------------------------------------------ page parts


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table from cells that are already HTML (callers escape their values)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    attr = f' class="{cls}"' if cls else ""
    # A wide table scrolls inside its own box, so the page itself never scrolls sideways on a phone.
    return (f'<div class="table-wrap"><table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def _td(content: str) -> str:
    return f"<td>{content}</td>"


def _status(text: str) -> str:
    """A verdict text with its outcome word coloured; unknown words stay plain."""
    word = text.split(" ", 1)[0]
    if word in (PASS, FAIL, INCONCLUSIVE, INSENSITIVE):
        return f'<span class="{word}">{e(word)}</span>{e(text[len(word):])}'
    return e(text)


def _meta_table(run: RunResult) -> str:
    rows = [["signature", e(run.signature)], ["seed", e(run.seed)],
            ["pytest-robustexplain", e(run.package_version or "unknown")],
            ["started / finished", f"{e(run.started_at or '?')} / {e(run.finished_at or '?')}"]]
    if run.calls:
        rows.append(["model calls", e(" · ".join(f"{v} {k}" for k, v in run.calls.items()))])
    if run.timings:
        rows.append(["time", e(timings_text(run.timings))])
    if run.settings:
        settings = e(json.dumps(run.settings, indent=1, sort_keys=True, default=str))
        rows.append(["settings", f"<details><summary>show</summary><pre>{settings}</pre></details>"])
    return _table(["run", ""], rows, "meta")


def _status_list(run: RunResult, summaries: list[Summary]) -> str:
    items = []
    for s in summaries:
        outcome = model_outcome(run, s.model)
        verdict = _status(outcome) if outcome else "not gated"
        items.append(f"<li><b>{e(s.model)}</b>: ρ {e(fmt_interval(s.overall))} — {verdict} · "
                     f"{s.n_pairs} pairs · {s.cached_pairs} cached · {s.n_failures} generation failures</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _model_section(run: RunResult, summary: Summary, plotter: _Plotter | None) -> str:
    info = model_info(run, summary.model)
    parts = [f'<section id="model-{e(summary.model)}">',
             f"<h2>robustexplain — model {e(info.label())}</h2>",
             f"<p>seed {e(run.seed)} · {summary.n_users} users · {summary.n_pairs} pairs · "
             f"{summary.cached_pairs} cached · backend {e(info.backend)}"
             + (f" · server {e(info.server_version)}" if info.server_version else "")
             + (f" · host {e(info.host)}" if info.host else "") + "</p>",
             _gate_table(run, summary), _metric_table(run, summary),
             _heatmap_table(summary, gate_thresholds(run, summary.model)["combined"]),
             _sensitivity(summary), _security(summary), _facts(summary)]
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


def _gate_table(run: RunResult, summary: Summary) -> str:
    overall = find_gate(run, summary.model, OVERALL)
    check = gate_check(overall, "combined")
    rows = [["<b>Overall ρ</b>", e(fmt_interval(summary.overall)),
             e(f"≥ {check.threshold:.2f}") if check else "—",
             _status(verdict_text(overall, "combined")) if overall and check else "not gated"]]
    note = overall_verdict_note(run, summary.model)
    if note:
        rows.append(["Gate verdict (all checks)", "", "", _status(note)])
    for kind, interval in summary.by_kind.items():
        gate = find_gate(run, summary.model, kind)
        kind_check = gate_check(gate, "combined")
        rows.append([e(kind), e(fmt_interval(interval)),
                     e(f"≥ {kind_check.threshold:.2f}") if kind_check else "—",
                     _status(verdict_text(gate)) if gate else "not gated"])
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
                     _status(verdict_text(gate, metric)) if gate and check else "not gated"])
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
            shade = _shade(row[s].mean, gate)
            cells.append(f'<span style="background:{shade};padding:.1rem .3rem" '
                         f'title="{e(fmt_interval(row[s]))}">{e(fmt_mean(row[s].mean))}</span>')
        rows.append(cells)
    return "<h3>Kind × severity (ρ)</h3>" + _table(["", *(f"L{s}" for s in severities)], rows)


_RED, _YELLOW, _GREEN = (248, 105, 107), (255, 235, 132), (99, 190, 123)


def _shade(value: float, gate: float) -> str:
    """Diverging at the gate on the fixed scale 0–1: red below it, yellow at it, green above it.

    Anchored to the gate, not to the run's range, so one colour means the same in every run: a cell
    above the gate is never red, however close the run's other cells are.
    """
    u = _gate_position(value, gate)
    start, end, u = (_RED, _YELLOW, u * 2) if u < 0.5 else (_YELLOW, _GREEN, u * 2 - 1)
    red, green, blue = (round(a + (b - a) * u) for a, b in zip(start, end, strict=True))
    return f"rgb({red},{green},{blue})"


def _gate_position(value: float, gate: float) -> float:
    """Where ``value`` sits on a 0–1 scale whose middle (0.5) is the gate: [0, gate] → [0, 0.5],
    [gate, 1] → [0.5, 1] (a gate of 0 or 1 leaves one half unused)."""
    value = min(1.0, max(0.0, value))
    if value < gate:
        return 0.5 * value / gate
    return 1.0 if gate >= 1 else 0.5 + 0.5 * (value - gate) / (1 - gate)


def _sensitivity(summary: Summary) -> str:
    rows = [[e(label), e(value)] for label, value in sensitivity_rows(summary)]
    return ("<h3>Sensitivity — the same item explained for another user</h3>"
            + _table(["", ""], rows))


def _security(summary: Summary) -> str:
    rows = [[e(label), e(value)] for label, value in security_rows(summary)]
    return "<h3>Security — adversarial histories</h3>" + _table(["", ""], rows) if rows else ""


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
        original, perturbed = _word_diff(pair.original[:_EXPLANATION_LIMIT],
                                         pair.perturbed[:_EXPLANATION_LIMIT])
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


def _comparison_section(comparisons: list[Comparison], summaries: list[Summary],
                        plotter: _Plotter | None) -> str:
    parts = ["<section><h2>Model comparison</h2>"]
    if plotter is not None:
        parts.append(plotter.comparison_chart(summaries))
    for comparison in comparisons:
        name_a, name_b = comparison.names
        parts.append(f"<h3>{e(name_a)} vs {e(name_b)}</h3>")
        rows = [[e(r.label), e(fmt_interval(r.mean_a)), e(fmt_interval(r.mean_b)), e(delta_text(r)),
                 e(fmt_p(r.p_holm)), e(fmt_d(r.d_z))] for r in comparison.rows]
        parts += [_table(["", e(name_a), e(name_b), "Δ", "p (paired t, Holm)", "d<sub>z</sub>"], rows),
                  f'<p class="note">{e(comparison_note(comparison))}</p>',
                  f"<p>Conclusion: {e(conclusion(comparison))}</p>"]
    parts.append("</section>")
    return "\n".join(parts)


# -------------------------------------------------------------------------------------------- charts


class _Plotter:
    """Draws the charts as base64 PNG ``<img>`` tags; exists only when matplotlib imports."""

    def __init__(self, figure_cls: Any, canvas_cls: Any) -> None:
        self._figure_cls = figure_cls
        self._canvas_cls = canvas_cls

    @classmethod
    def load(cls) -> _Plotter | None:
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            return None
        return cls(Figure, FigureCanvasAgg)

    def _img(self, fig: Any, alt: str) -> str:
        self._canvas_cls(fig)  # attaches the Agg canvas: no global backend involved
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight", metadata={"Software": None})
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        return f'<img alt="{e(alt)}" src="data:image/png;base64,{data}">'

    def model_charts(self, summary: Summary, thresholds: dict[str, float]) -> str:
        charts = [self.heatmap(summary, thresholds["combined"]), self.metric_bars(summary, thresholds),
                  self.severity_curve(summary, thresholds["combined"])]
        return '<div class="charts">' + "".join(c for c in charts if c) + "</div>"

    def heatmap(self, summary: Summary, gate: float) -> str:
        severities = summary.severities
        kinds = list(summary.kind_severity)
        if not severities or not kinds:
            return ""
        grid = [[row[s].mean if s in row else float("nan") for s in severities]
                for row in summary.kind_severity.values()]
        # The colour of a cell is its place against the gate (see _gate_position), the same in every run.
        shown = [[_gate_position(v, gate) if v == v else v for v in values] for values in grid]
        fig = self._figure_cls(figsize=(5.6, 0.5 * len(kinds) + 1.4))
        ax = fig.add_subplot()
        image = ax.imshow(shown, cmap="RdYlGn", aspect="auto", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(severities)), [f"L{s}" for s in severities])
        ax.set_yticks(range(len(kinds)), [_plain_text(k) for k in kinds])
        for i, values in enumerate(grid):
            for j, value in enumerate(values):
                # White on the dark ends of the colour map, black in its light middle.
                t = shown[i][j]
                color = "white" if t < 0.15 or t > 0.85 else "black"
                ax.text(j, i, fmt_mean(value), ha="center", va="center", fontsize=8, color=color)
        bar = fig.colorbar(image, ax=ax, label=f"ρ (gate {gate:g} in the middle)")
        ticks = sorted({0.0, gate, 1.0})
        bar.set_ticks([_gate_position(t, gate) for t in ticks], labels=[f"{t:g}" for t in ticks])
        ax.set_title(_plain_text(f"ρ by kind × severity — {summary.model}"), fontsize=10)
        return self._img(fig, f"heatmap of ρ by kind and severity for {summary.model}")

    def metric_bars(self, summary: Summary, thresholds: dict[str, float]) -> str:
        fig = self._figure_cls(figsize=(5.2, 3.2))
        ax = fig.add_subplot()
        names = list(summary.by_metric)  # the four, and the opt-in embedding when the run measured it
        means = [summary.by_metric[m].mean for m in names]
        errors = [[summary.by_metric[m].mean - summary.by_metric[m].low for m in names],
                  [summary.by_metric[m].high - summary.by_metric[m].mean for m in names]]
        ax.bar(names, means, yerr=errors, capsize=4, color="#4c78a8")
        # One gate mark per gated bar: metrics may have thresholds of their own.
        for index, metric in enumerate(m for m in names if m in thresholds):
            ax.hlines(thresholds[metric], index - 0.45, index + 0.45, color="#cf222e", linestyle="--",
                      linewidth=1.2, label="gate" if index == 0 else None)
        ax.set_ylim(0, 1)
        ax.set_ylabel("score (95 % CI)")
        ax.legend(fontsize=8)
        ax.set_title(_plain_text(f"Metrics — {summary.model}"), fontsize=10)
        return self._img(fig, f"bar chart of the metrics for {summary.model}")

    def severity_curve(self, summary: Summary, threshold: float) -> str:
        severities = summary.severities
        if len(severities) < 2:
            return ""
        fig = self._figure_cls(figsize=(5.6, 3.4))
        ax = fig.add_subplot()
        for kind, row in summary.kind_severity.items():
            points = [s for s in severities if s in row]
            ax.plot(points, [row[s].mean for s in points], marker=".", linewidth=1, alpha=0.7,
                    label=_plain_text(kind))
        overall = [summary.by_severity[s] for s in severities]
        ax.plot(severities, [iv.mean for iv in overall], color="black", linewidth=2.2, label="all kinds")
        ax.fill_between(severities, [iv.low for iv in overall], [iv.high for iv in overall], color="grey",
                        alpha=0.2)
        ax.axhline(threshold, color="#cf222e", linestyle="--", linewidth=1)
        ax.set_xticks(severities, [f"L{s}" for s in severities])
        ax.set_ylabel("ρ")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        title = f"Severity degradation — {summary.model} ({fmt_pct(summary.degradation_pct)})"
        ax.set_title(_plain_text(title), fontsize=10)
        return self._img(fig, f"ρ by severity for {summary.model}")

    def comparison_chart(self, summaries: list[Summary]) -> str:
        quantities = ["combined", *METRICS]
        fig = self._figure_cls(figsize=(7.5, 3.4))
        ax = fig.add_subplot()
        width = 0.8 / len(summaries)
        for index, summary in enumerate(summaries):
            intervals = [summary.overall if q == "combined" else summary.by_metric[q] for q in quantities]
            xs = [q + (index - (len(summaries) - 1) / 2) * width for q in range(len(quantities))]
            ax.bar(xs, [iv.mean for iv in intervals], width,
                   yerr=[[iv.mean - iv.low for iv in intervals], [iv.high - iv.mean for iv in intervals]],
                   capsize=3, label=_plain_text(summary.model))
        ax.set_xticks(range(len(quantities)), ["ρ", *METRICS])
        ax.set_ylim(0, 1)
        ax.set_ylabel("score (95 % CI)")
        ax.legend(fontsize=8)
        ax.set_title("Models compared", fontsize=10)
        return self._img(fig, "bar chart comparing the models")


def _plain_text(text: str) -> str:
    # matplotlib reads "$...$" as mathtext: a model or kind name with a dollar sign must stay literal.
    return text.replace("$", r"\$")
