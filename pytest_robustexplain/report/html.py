"""A self-contained HTML report: one file, no external resources, works offline.

Styles are inline; charts are SVG images drawn with matplotlib (the optional ``plots`` extra), imported
lazily and driven through the Agg canvas directly, so the process-wide matplotlib backend is never
switched. Without matplotlib the page still holds every table and says how to get the charts. One inline
script draws the table of all pairs (sort, filter, search, pages) from a JSON block; without JavaScript
the page still shows every other table, worst pairs included.

Every value that comes from the run (model output, user and item ids, model names, settings, gate node
ids) goes through :func:`e` (``html.escape``) in the markup, through :func:`_script_json` in the JSON
block, and reaches the DOM from the script only as ``textContent``: explanations are untrusted text. A
Content-Security-Policy lets only the page's own script (by its hash) run and nothing be fetched, so
even a string that escaped all that could neither run nor call out.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import html
import io
import json
import math
import os
import re
import warnings
from collections.abc import Iterator
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
from ..sanitize import clean, visible
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
:root{color-scheme:light dark}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#1f2328;background:#fff;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.3rem;border-bottom:1px solid #d0d7de;padding-bottom:.3rem;
margin-top:2.5rem}
h3{font-size:1.05rem;margin-top:1.6rem}
table{border-collapse:collapse;margin:.6rem 0}th,td{border:1px solid #d0d7de;padding:.3rem .55rem;
text-align:left;vertical-align:top;font-variant-numeric:tabular-nums}th{background:#f6f8fa}.PASS{color:#1a7f37;font-weight:600}.FAIL{color:#cf222e;font-weight:600}
.INCONCLUSIVE{color:#9a6700;font-weight:600}.INSENSITIVE{color:#cf222e;font-weight:600}.note{color:#57606a;font-style:italic}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,26rem),1fr));gap:.8rem;
margin:1rem 0}
.charts img{width:100%;max-width:36rem;height:auto;box-sizing:border-box;border:1px solid #eaeef2;
background:#fff}
.explanation{white-space:pre-wrap;max-width:32rem;font-size:.92rem}del{background:#ffebe9;text-decoration:none}
ins{background:#dafbe1;text-decoration:none}details pre{white-space:pre-wrap;font-size:.8rem;max-width:28rem}
.meta td:first-child{font-weight:600}
.shade{padding:.1rem .3rem;color:#1f2328}
.banner{border:2px solid #1a7f37;border-radius:6px;padding:.7rem 1rem;margin:1rem 0;background:#dafbe1}
.banner-FAIL,.banner-INSENSITIVE{border-color:#cf222e;background:#ffebe9}
.banner-INCONCLUSIVE{border-color:#9a6700;background:#fff8c5}
.table-wrap{overflow-x:auto;max-width:100%}body{overflow-wrap:break-word}img{max-width:100%;height:auto}
.pairs-controls,.pairs-pages{display:flex;flex-wrap:wrap;gap:.4rem .9rem;align-items:center;margin:.6rem 0}
select,input,button{font:inherit}select{max-width:100%}.pairs-controls label{max-width:100%}
.pairs-controls input{width:16rem;max-width:100%;box-sizing:border-box}
table.pairs td.num{text-align:right;white-space:nowrap}
table.pairs th button{font:inherit;font-weight:600;color:inherit;background:none;border:0;padding:0;
cursor:pointer;text-align:left}
table.pairs th[aria-sort=ascending] button::after{content:" ▲"}
table.pairs th[aria-sort=descending] button::after{content:" ▼"}
table.pairs th{white-space:nowrap}
.pair-texts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,20rem),1fr));gap:.2rem 1.2rem;
width:0;min-width:min(100%,calc(100vw - 4rem));position:sticky;left:.6rem}
.pair-texts .pair-perturbation{grid-column:1/-1}
.pair-texts .explanation{max-width:none;overflow-wrap:anywhere}.pair-label{font-weight:600}
tr.pair-failed td{background:#fff8c5}
@media (max-width:600px){body{margin:1rem auto;padding:0 .5rem}.explanation{max-width:none}}
@media (prefers-color-scheme:dark){body{background:#0d1117;color:#e6edf3}th{background:#161b22}
th,td,h2{border-color:#30363d}.note{color:#8b949e}.PASS{color:#3fb950}.FAIL,.INSENSITIVE{color:#f85149}
.INCONCLUSIVE{color:#d29922}.banner{background:#12261e;border-color:#3fb950}
.banner-FAIL,.banner-INSENSITIVE{background:#2d1214;border-color:#f85149}
.banner-INCONCLUSIVE{background:#2b2111;border-color:#d29922}del{background:#4c1d1d}ins{background:#12372a}
.charts img{border-color:#30363d}tr.pair-failed td{background:#2b2111}}
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
    body.append(_pairs_section(run))
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{e(_CSP)}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>robustexplain report — {e(', '.join(names))}</title>\n<style>{_CSS}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")
    # A run read from a JSON file may hold lone surrogates (a "\\ud800" escape); the page must encode.
    return clean(page)


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
            # class "shade" keeps the text dark on these light colours in dark mode too.
            cells.append(f'<span class="shade" style="background:{shade}" '
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
        parts.append(plotter.comparison(summaries))
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


# ------------------------------------------------------------------------------------- the pairs table

# Each row of the JSON block is a list in this order (then ρ and each metric): compact arrays, not objects,
# so 25,000 pairs do not repeat 15 key names each. Originals are shared by a user's pairs and stored once.
_PAIR_FIELDS = ("model", "kind", "severity", "user", "item", "failure", "changes", "original", "perturbed")
_PAGE_SIZES = (25, 50, 100, 250)
_PAGE_SIZE = 50
_SCRIPT_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                  ("\u2029", "\\u2029"))

_PAIRS_JS = r"""(() => {
"use strict";
// The table of all pairs, drawn from the JSON block one page of rows at a time. Outside text reaches the
// page only through textContent and createElement: never parsed as markup.
const app = document.getElementById("pairs-app");
const data = JSON.parse(document.getElementById("pairs-data").textContent);
const F = {};
data.fields.forEach((name, i) => { F[name] = i; });
const rows = data.rows;
const names = {model: data.models, kind: data.kinds};
const heads = Array.from(app.querySelectorAll("thead th"));
const tbody = app.querySelector("tbody");
const filters = Array.from(app.querySelectorAll("select[data-field]"));
const search = app.querySelector("input[type=search]");
const size = app.querySelector("select.page-size");
const status = app.querySelector(".pairs-status");
const nav = Array.from(app.querySelectorAll("button[data-page]"));
const collator = new Intl.Collator("en", {numeric: true});
const count = (n) => n.toLocaleString("en");
let shown = [];  // indexes of the rows that pass the filters, in sort order
let page = 0;
let sortField = null;
let sortDir = 1;
let lower = null;  // lower-cased searchable text, made by the first search

const sorted = heads.find((th) => th.hasAttribute("aria-sort"));
if (sorted) {
  sortField = sorted.dataset.field;
  sortDir = sorted.getAttribute("aria-sort") === "descending" ? -1 : 1;
}

function shownText(row, field, type) {
  const v = row[F[field]];
  if (type === "num") return v === null ? "\u2014" : v.toFixed(3);
  if (type === "sev") return "L" + v;
  if (field in names) return names[field][v];
  return v === "" ? "\u2014" : String(v);
}

function filter() {
  const wanted = filters.filter((s) => s.value !== "").map((s) => [F[s.dataset.field], Number(s.value)]);
  const query = search.value.trim().toLowerCase();
  let originalHit = null;
  if (query) {
    if (lower === null) {
      lower = {
        rows: rows.map((r) => [r[F.user], r[F.item], r[F.failure], r[F.changes], r[F.perturbed]]
          .join("\n").toLowerCase()),
        originals: data.originals.map((t) => t.toLowerCase()),
      };
    }
    originalHit = lower.originals.map((t) => t.includes(query));
  }
  shown = [];
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    if (wanted.every(([c, v]) => r[c] === v)
        && (!query || originalHit[r[F.original]] || lower.rows[i].includes(query))) shown.push(i);
  }
  sort();
  page = 0;
  render();
}

function sort() {
  if (sortField === null) return;
  const col = F[sortField];
  const named = names[sortField];
  const dir = sortDir;
  shown.sort((a, b) => {
    let x = rows[a][col];
    let y = rows[b][col];
    if (named) { x = named[x]; y = named[y]; }
    if (x === y) return a - b;
    if (x === null) return 1;  // no value (a metric the pair lacks): last either way
    if (y === null) return -1;
    const order = typeof x === "number" ? x - y : collator.compare(x, y);
    return order === 0 ? a - b : order * dir;  // ties keep the run's order
  });
}

function toggle(button, row) {
  // The pair's texts in a row of their own under it, as wide as the screen allows.
  const tr = button.closest("tr");
  if (button.getAttribute("aria-expanded") === "true") {
    tr.nextElementSibling.remove();
    button.setAttribute("aria-expanded", "false");
    button.textContent = "show";
    return;
  }
  const box = document.createElement("div");
  box.className = "pair-texts";
  const parts = [["perturbation", row[F.changes]], ["original", data.originals[row[F.original]]],
                 ["perturbed", row[F.perturbed]]];
  for (const [label, text] of parts) {
    const part = document.createElement("div");
    part.className = "pair-" + label;
    const head = document.createElement("div");
    head.className = "pair-label";
    head.textContent = label;
    const body = document.createElement("div");
    body.className = "explanation";
    body.textContent = text === "" ? "(empty)" : text;
    part.append(head, body);
    box.appendChild(part);
  }
  const cell = document.createElement("td");
  cell.colSpan = heads.length;
  cell.appendChild(box);
  const detail = document.createElement("tr");
  detail.className = "pair-detail";
  detail.appendChild(cell);
  tr.after(detail);
  button.setAttribute("aria-expanded", "true");
  button.textContent = "hide";
}

function render() {
  const per = Number(size.value);
  const pages = Math.max(1, Math.ceil(shown.length / per));
  page = Math.min(Math.max(page, 0), pages - 1);
  const start = page * per;
  const end = Math.min(shown.length, start + per);
  const fragment = document.createDocumentFragment();
  for (let k = start; k < end; k++) {
    const row = rows[shown[k]];
    const tr = document.createElement("tr");
    if (row[F.failure] !== "") tr.className = "pair-failed";
    for (const th of heads) {
      const td = document.createElement("td");
      const type = th.dataset.type;
      if (type === "texts") {
        const button = document.createElement("button");
        button.type = "button";
        button.setAttribute("aria-expanded", "false");
        button.textContent = "show";
        button.addEventListener("click", () => toggle(button, row));
        td.appendChild(button);
      } else {
        td.textContent = shownText(row, th.dataset.field, type);
        if (type === "num" || type === "sev") td.className = "num";
      }
      tr.appendChild(td);
    }
    fragment.appendChild(tr);
  }
  tbody.replaceChildren(fragment);
  const all = shown.length === rows.length ? "" : " (" + count(rows.length) + " in the run)";
  status.textContent = shown.length
    ? "pairs " + count(start + 1) + "\u2013" + count(end) + " of " + count(shown.length) + all
    : "no pair matches" + all;
  for (const button of nav) {
    const back = button.dataset.page === "first" || button.dataset.page === "prev";
    button.disabled = back ? page === 0 : page >= pages - 1;
  }
}

for (const th of heads) {
  const button = th.querySelector("button");
  if (!button) continue;
  button.addEventListener("click", () => {
    if (sortField === th.dataset.field) {
      sortDir = -sortDir;
    } else {
      sortField = th.dataset.field;
      sortDir = 1;
    }
    for (const h of heads) h.removeAttribute("aria-sort");
    th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
    sort();
    page = 0;
    render();
  });
}
for (const select of filters) select.addEventListener("change", filter);
search.addEventListener("input", filter);
size.addEventListener("change", () => { page = 0; render(); });
for (const button of nav) {
  button.addEventListener("click", () => {
    const to = button.dataset.page;
    page = to === "first" ? 0 : to === "prev" ? page - 1 : to === "next" ? page + 1 : Infinity;
    render();
  });
}
filter();
app.hidden = false;
})();"""

# Only the script above may run (by its hash), nothing may be fetched or submitted: the page works offline,
# and markup injected by some unescaped string could neither run a script nor call out.
_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{base64.b64encode(hashlib.sha256(_PAIRS_JS.encode()).digest()).decode()}'; "
        "base-uri 'none'; form-action 'none'")


def _script_json(value: Any) -> str:
    """JSON that can sit inside a ``<script>`` element: ``<``, ``>`` and ``&`` escaped, so no string can
    close the element (``</script>``) or change how the HTML parser reads it (``<!--``), and the line and
    paragraph separators too (older JavaScript parsers ended a string at them). They only occur inside
    JSON strings, where a ``\\uXXXX`` escape reads back as the same character."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escape in _SCRIPT_UNSAFE:
        text = text.replace(char, escape)
    return text


def _score(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 3)


def pairs_data(run: RunResult) -> dict[str, Any]:
    """Every pair of the run, as the pairs table reads it (see ``_PAIR_FIELDS``)."""
    pairs = run.pairs
    models = {name: i for i, name in enumerate(dict.fromkeys(p.key.model for p in pairs))}
    kinds = {name: i for i, name in enumerate(dict.fromkeys(p.key.kind for p in pairs))}
    metrics = metrics_of(pairs)
    originals: dict[str, int] = {}
    rows = []
    for p in pairs:
        original = originals.setdefault(p.original[:_EXPLANATION_LIMIT], len(originals))
        rows.append([models[p.key.model], kinds[p.key.kind], p.key.severity, p.key.user_id, p.key.item_id,
                     p.failure or "", describe_changes(p.changes), original, p.perturbed[:_EXPLANATION_LIMIT],
                     _score(p.combined), *(_score(getattr(p, m)) for m in metrics)])
    return {"fields": [*_PAIR_FIELDS, "combined", *metrics], "models": list(models), "kinds": list(kinds),
            "originals": list(originals), "rows": rows}


def _pairs_section(run: RunResult) -> str:
    """Every pair in one table to sort, filter and search, drawn by the page's script one page at a time
    (so 25,000 pairs open quickly); the static tables above stay the page without JavaScript."""
    if not run.pairs:
        return ""
    data = pairs_data(run)
    severities = sorted({p.key.severity for p in run.pairs})

    def choice(field: str, label: str, options: list[tuple[Any, str]]) -> str:
        items = "".join(f'<option value="{e(value)}">{e(text)}</option>' for value, text in options)
        return (f'<label>{label} <select data-field="{field}"><option value="">all</option>{items}</select>'
                "</label>")

    controls = [choice("kind", "kind", list(enumerate(data["kinds"]))),
                choice("severity", "severity", [(s, f"L{s}") for s in severities])]
    columns = [("user", "text", "user"), ("item", "text", "item"), ("kind", "kind", "kind"),
               ("severity", "sev", "severity"), ("combined", "num", "ρ"),
               *((m, "num", m) for m in data["fields"][len(_PAIR_FIELDS) + 1:]),
               ("failure", "text", "failure")]
    if len(data["models"]) > 1:
        controls.insert(0, choice("model", "model", list(enumerate(data["models"]))))
        columns.insert(0, ("model", "model", "model"))
    head = "".join(f'<th data-field="{field}" data-type="{kind}"'
                   + (' aria-sort="ascending"' if field == "combined" else "")  # least robust first
                   + f'><button type="button">{e(label)}</button></th>' for field, kind, label in columns)
    # The texts' toggle first: on a phone it is in view without scrolling the table sideways.
    head = '<th data-field="original" data-type="texts">texts</th>' + head
    sizes = "".join(f'<option{" selected" if n == _PAGE_SIZE else ""}>{n}</option>' for n in _PAGE_SIZES)
    pages = "".join(f'<button type="button" data-page="{to}">{text}</button>'
                    for to, text in (("first", "« first"), ("prev", "‹ previous"), ("next", "next ›"),
                                     ("last", "last »")))
    return (f'<section id="all-pairs"><h2>All {len(run.pairs):,} pairs</h2>'
            '<noscript><p class="note">This table needs JavaScript; the least robust pairs are listed under '
            "each model above, and the JSON report holds every pair.</p></noscript>"
            '<div id="pairs-app" hidden><div class="pairs-controls">' + "".join(controls)
            + '<label>text <input type="search" placeholder="user, item, explanation…" '
            'aria-label="search the pairs"></label></div>'
            f'<div class="table-wrap"><table class="pairs"><thead><tr>{head}</tr></thead><tbody></tbody>'
            f'</table></div><div class="pairs-pages">{pages}<span class="pairs-status" aria-live="polite">'
            f"</span><label>rows per page <select class=\"page-size\">{sizes}</select></label></div></div>"
            f'<script type="application/json" id="pairs-data">{_script_json(data)}</script>'
            f"<script>{_PAIRS_JS}</script></section>")


# -------------------------------------------------------------------------------------------- charts

# Charts are drawn 4.4 in wide (422 CSS px) and shown at the width of their column, which is ~384 px on a
# 400 px phone: no text is set below 9 pt, so none is smaller than 10.9 CSS px there.
_CHART_WIDTH = 4.4
_CHART_PX_PER_INCH = 96  # CSS pixels per inch: the <img> width and height attributes
# Widths in points of outside text in a chart, cut short with "…" beyond them (the tables hold it whole): a
# title, and a tick label or legend entry (two legend columns fit), stay inside the 317 pt figure.
_TITLE_WIDTH = 290.0
_LABEL_WIDTH = 105.0
_CHART_STYLE = {
    "font.size": 9, "figure.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9,
    # Text as glyph outlines, not <text>: no outside string is ever SVG markup, only shapes.
    "svg.fonttype": "path",
    # Ids (clip paths, glyphs) are hashes salted with this instead of a random uuid: one run, one file.
    "svg.hashsalt": "robustexplain",
}
# What the page does not need from matplotlib's SVG: the XML declaration and DOCTYPE (the DTD's URL), the
# RDF metadata, and the comments, which repeat every text drawn (escaped, but a model's name need not be
# in the file at all); the indentation between elements (text is outlines: no whitespace is content). A
# path's coordinates keep two decimals (0.01 pt is far below a pixel) on one line.
_SVG_DROP = re.compile(r"<\?xml[^>]*\?>\s*|<!DOCTYPE[^>]*>\s*|<metadata>.*?</metadata>\s*|<!--.*?-->\s*",
                       re.DOTALL)
_SVG_GAPS = re.compile(r">\s+<")
_SVG_PATH_DATA = re.compile(r' d="([^"]*)"')
_DECIMALS = re.compile(r"(\.\d\d)\d+")


class _Plotter:
    """Draws the charts as SVG images; exists only when matplotlib imports.

    Each chart is an ``<img src="data:image/svg+xml;base64,…">``, not inline ``<svg>``: an image is its
    own document, so nothing in it runs or loads anything, its ids and its ``<style>`` (matplotlib writes
    a global ``*{…}`` rule) cannot collide with the page's or another chart's, and base64 cannot close the
    attribute whatever the SVG holds. It costs a third more bytes than inline SVG — a small share of the
    page next to the pairs' explanations.
    """

    def __init__(self, matplotlib: Any, figure_cls: Any, canvas_cls: Any) -> None:
        from matplotlib.font_manager import FontProperties
        from matplotlib.textpath import TextToPath

        self._matplotlib = matplotlib
        self._figure_cls = figure_cls
        self._canvas_cls = canvas_cls
        self._font = FontProperties
        self._text_path = TextToPath()

    @classmethod
    def load(cls) -> _Plotter | None:
        try:
            import matplotlib
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            return None
        return cls(matplotlib, Figure, FigureCanvasAgg)

    def _text(self, text: str, width: float = _LABEL_WIDTH, size: float = 9) -> str:
        """Outside text for a chart: one line of visible characters (matplotlib cannot lay out a lone
        surrogate, and would draw a line break), cut short with "…" to ``width`` points at ``size``, and
        no mathtext ("$...$" would be read as a formula). Measured, not counted: "W" is four times "i"."""
        line = visible(text, commands=True)
        font = self._font(size=size)

        def fits(candidate: str) -> bool:
            measured = self._text_path.get_text_width_height_descent(candidate, font, ismath=False)
            return bool(measured[0] <= width)

        if not fits(line):
            low, high = 0, len(line)  # the longest prefix that fits with its ellipsis
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if fits(line[:middle] + "…") else (low, middle - 1)
            line = line[:low] + "…"
        return line.replace("$", r"\$")

    @contextlib.contextmanager
    def style(self) -> Iterator[None]:
        """The charts' fonts and SVG settings, for drawing and saving (not the process-wide defaults)."""
        with self._matplotlib.rc_context(_CHART_STYLE), warnings.catch_warnings():
            # A character the font lacks (a CJK model name, a control picture) is drawn as a box; it is not
            # worth a warning in the user's test run.
            warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
            yield

    def _figure(self, height: float) -> Any:
        # Constrained layout keeps titles, tick labels and legends inside the figure and apart.
        fig = self._figure_cls(figsize=(_CHART_WIDTH, height), layout="constrained")
        self._canvas_cls(fig)  # attaches the Agg canvas (text metrics): no global backend involved
        return fig

    def svg(self, fig: Any) -> str:
        """The figure as compact, deterministic SVG text."""
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        svg = _SVG_GAPS.sub("><", _SVG_DROP.sub("", buffer.getvalue()))
        return _SVG_PATH_DATA.sub(_compact_path, svg)

    def _img(self, chart: tuple[Any, str] | None) -> str:
        if chart is None:
            return ""
        fig, alt = chart
        data = base64.b64encode(self.svg(fig).encode("utf-8")).decode("ascii")
        width, height = (round(v * _CHART_PX_PER_INCH) for v in fig.get_size_inches())
        return (f'<img alt="{e(alt)}" width="{width}" height="{height}" '
                f'src="data:image/svg+xml;base64,{data}">')

    def model_charts(self, summary: Summary, thresholds: dict[str, float]) -> str:
        with self.style():
            charts = [self.heatmap(summary, thresholds["combined"]), self.metric_bars(summary, thresholds),
                      self.severity_curve(summary, thresholds["combined"])]
            return '<div class="charts">' + "".join(self._img(c) for c in charts) + "</div>"

    def comparison(self, summaries: list[Summary]) -> str:
        with self.style():
            return '<div class="charts">' + self._img(self.comparison_chart(summaries)) + "</div>"

    def heatmap(self, summary: Summary, gate: float) -> tuple[Any, str] | None:
        severities = summary.severities
        kinds = list(summary.kind_severity)
        if not severities or not kinds:
            return None
        grid = [[row[s].mean if s in row else float("nan") for s in severities]
                for row in summary.kind_severity.values()]
        # The colour of a cell is its place against the gate (see _gate_position), the same in every run.
        shown = [[_gate_position(v, gate) if v == v else v for v in values] for values in grid]
        fig = self._figure(0.42 * len(kinds) + 1.5)
        ax = fig.add_subplot()
        # Vector cells (imshow would embed a bitmap, blurred when the page scales the chart).
        mesh = ax.pcolormesh(shown, cmap="RdYlGn", vmin=0.0, vmax=1.0, edgecolors="white", linewidth=0.5)
        ax.invert_yaxis()
        ax.set_xticks([j + 0.5 for j in range(len(severities))], [f"L{s}" for s in severities])
        ax.set_yticks([i + 0.5 for i in range(len(kinds))], [self._text(k) for k in kinds])
        ax.tick_params(length=0)
        for i, values in enumerate(grid):
            for j, value in enumerate(values):
                if value != value:
                    continue
                # White on the dark ends of the colour map, black in its light middle.
                t = shown[i][j]
                ax.text(j + 0.5, i + 0.5, fmt_mean(value), ha="center", va="center",
                        color="white" if t < 0.15 or t > 0.85 else "black")
        bar = fig.colorbar(mesh, ax=ax, label=f"ρ (gate {gate:g} in the middle)")
        ticks = sorted({0.0, gate, 1.0})
        bar.set_ticks([_gate_position(t, gate) for t in ticks], labels=[f"{t:g}" for t in ticks])
        fig.suptitle(self._text(f"ρ by kind × severity — {summary.model}", _TITLE_WIDTH, 10))
        return fig, f"heatmap of ρ by kind and severity for {summary.model}"

    def metric_bars(self, summary: Summary, thresholds: dict[str, float]) -> tuple[Any, str]:
        fig = self._figure(3.3)
        ax = fig.add_subplot()
        names = list(summary.by_metric)  # the four, and the opt-in embedding when the run measured it
        means = [summary.by_metric[m].mean for m in names]
        errors = [[summary.by_metric[m].mean - summary.by_metric[m].low for m in names],
                  [summary.by_metric[m].high - summary.by_metric[m].mean for m in names]]
        ax.bar(names, means, yerr=errors, capsize=4, color="#4c78a8", label="mean, 95 % CI")
        # One gate mark per gated bar, over that bar: metrics may have thresholds of their own.
        gated = [(index, m) for index, m in enumerate(names) if m in thresholds]
        for index, metric in gated:
            ax.hlines(thresholds[metric], index - 0.45, index + 0.45, color="#cf222e", linestyle="--",
                      linewidth=1.2, label="gate" if (index, metric) == gated[0] else None)
        ax.set_ylim(0, 1)
        ax.set_ylabel("score")
        # Under the axes, never over a bar (at the top right it hid the length bar).
        fig.legend(loc="outside lower center", ncols=2, frameon=False)
        fig.suptitle(self._text(f"Metrics — {summary.model}", _TITLE_WIDTH, 10))
        return fig, f"bar chart of the metrics for {summary.model}"

    def severity_curve(self, summary: Summary, threshold: float) -> tuple[Any, str] | None:
        severities = summary.severities
        if len(severities) < 2:
            return None
        fig = self._figure(4.0)
        ax = fig.add_subplot()
        for kind, row in summary.kind_severity.items():
            points = [s for s in severities if s in row]
            ax.plot(points, [row[s].mean for s in points], marker=".", linewidth=1, alpha=0.8,
                    label=self._text(kind))
        overall = [summary.by_severity[s] for s in severities]
        ax.plot(severities, [iv.mean for iv in overall], color="black", linewidth=2.2, label="all kinds")
        ax.fill_between(severities, [iv.low for iv in overall], [iv.high for iv in overall], color="grey",
                        alpha=0.2)
        ax.axhline(threshold, color="#cf222e", linestyle="--", linewidth=1, label="gate")
        ax.set_xticks(severities, [f"L{s}" for s in severities])
        ax.set_ylabel("ρ")
        fig.legend(loc="outside lower center", ncols=2, frameon=False)
        title = f"Severity degradation {fmt_pct(summary.degradation_pct)} — {summary.model}"
        fig.suptitle(self._text(title, _TITLE_WIDTH, 10))
        return fig, f"ρ by severity for {summary.model}"

    def comparison_chart(self, summaries: list[Summary]) -> tuple[Any, str]:
        quantities = ["combined", *METRICS]
        fig = self._figure(3.5)
        ax = fig.add_subplot()
        width = 0.8 / len(summaries)
        for index, summary in enumerate(summaries):
            intervals = [summary.overall if q == "combined" else summary.by_metric[q] for q in quantities]
            xs = [q + (index - (len(summaries) - 1) / 2) * width for q in range(len(quantities))]
            ax.bar(xs, [iv.mean for iv in intervals], width,
                   yerr=[[iv.mean - iv.low for iv in intervals], [iv.high - iv.mean for iv in intervals]],
                   capsize=3, label=self._text(summary.model))
        ax.set_xticks(range(len(quantities)), ["ρ", *METRICS])
        ax.set_ylim(0, 1)
        ax.set_ylabel("score (95 % CI)")
        fig.legend(loc="outside lower center", ncols=2, frameon=False)
        fig.suptitle("Models compared")
        return fig, "bar chart comparing the models"


def _compact_path(match: re.Match[str]) -> str:
    return ' d="' + " ".join(_DECIMALS.sub(r"\1", match.group(1)).split()) + '"'
