"""The six tables of the RobustExplain paper (arXiv 2601.19120), filled with this run's numbers.

Same layouts as the paper — Tables 1 and 2 end with an Average row, Table 3 with the paired test of severity 1
against 5 (Cohen's d, per user, as §4.7) and Tukey HSD between the kinds, Table 4 with the largest-vs-smallest
gap, Table 5 has a row per model and metric and a column per kind with each column's best value starred —
but every mean carries its 95 % interval (cluster-robust by user), and each table ends with a ``Paper:`` line
quoting the published values (design/paper-reference.md) for comparison. Pairs of several models are pooled
where the paper averages over models ("Average"); control pairs never count, generation failures count with
their 0 scores (the method's rule) except in the correlations.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from html import escape as escape_all

from ..checks.controls import guard_line
from ..results import COUNTS_PAPER, METRICS, Interval, PairResult, RunResult, counts_of
from .formatting import wrap
from .summary import fmt_mean, interval_of, model_info, model_names, ordered_kinds, summarize

# Column names the paper uses for the five kinds.
SHORT_KIND = {"noise_injection": "Noise", "temporal_shuffle": "Shuffle", "behavior_dilution": "Dilute",
              "category_drift": "Drift", "missing_values": "Missing"}
METRIC_TITLE = {"semantic": "Semantic", "keyword": "Keyword", "structural": "Structural", "length": "Length"}

PAPER = {
    1: "LLaMA 3.1-70B 0.534 0.528 0.531 0.538 0.535 | 0.532; Qwen2.5-14B 0.521 0.509 0.518 0.526 0.522 | "
       "0.519; LLaMA 3.1-8B 0.498 0.487 0.494 0.489 0.493 | 0.492; Qwen2.5-7B 0.484 0.500 0.491 0.493 "
       "0.492 | 0.492 (Noise Shuffle Dilute Drift Missing | Overall).",
    2: "70B 0.638 0.512 0.405 0.742; 14B 0.612 0.489 0.387 0.721; 8B 0.583 0.461 0.362 0.698; "
       "7B 0.579 0.458 0.358 0.695 (Semantic Keyword Structural Length).",
    3: "Noise 0.538 0.535 0.527 0.519 0.526; Shuffle 0.529 0.528 0.521 0.514 0.521; Dilution 0.531 0.530 "
       "0.522 0.515 0.522; Drift 0.541 0.538 0.529 0.521 0.528; Missing 0.527 0.528 0.518 0.516 0.523; "
       "Average 0.533 0.532 0.523 0.517 0.524 (L1…L5; 1.7 % degradation L1 → L5).",
    4: "70B 0.532, 14B 0.519, 8B 0.492, 7B 0.492 (the largest 8.1 % more robust than the smallest).",
    5: "each model's four metrics for each kind; the pattern holds across kinds: length highest, "
       "structural lowest (the best value of each column in bold).",
    6: "Sem–Key 0.72, Sem–Struct 0.58, Key–Struct 0.65, Length with the others 0.24–0.31.",
}
_LABEL = 16
_CELL = 20


def render_paper_tables(run: RunResult, fmt: str = "text") -> str:
    """Tables 1–6 of the paper for ``run``, each followed by the paper's values: as aligned text (``fmt``
    "text", the terminal's), as Markdown (pipe tables, for a job summary) or as an HTML page."""
    names = model_names(run)
    pairs = {name: run.model_pairs(name) for name in names}
    pooled = [p for name in names for p in pairs[name]]
    kinds = ordered_kinds(p.key.kind for p in pooled)
    label = max([_LABEL, *(len(n) + 2 for n in names)])
    tables = [
        _table1(pairs, kinds, label),
        _table2(pairs, label),
        _table3(pooled, kinds),
        _table4(run, pairs),
        _table5(pairs, kinds, label),
        _table6(pooled),
    ]
    title = "RobustExplain paper tables (arXiv 2601.19120) for this run"
    about = (f"seed {run.seed}, {len({p.key.user_id for p in pooled})} users, {len(pooled)} pairs; "
             "mean [95 % CI], cluster-robust by user")
    notes = [f"signature: {run.signature}", _formulas(run), *_not_models(run, names)]
    guard = _guard_block(run, names)
    if fmt == "markdown":
        return _markdown(f"{title} — {about}", notes, tables, guard)
    if fmt == "html":
        return _html(title, about, notes, tables, guard)
    head = "\n".join([f"{title} — {about}", notes[0], *(line for n in notes[1:] for line in wrap(n, 110))])
    return "\n\n".join([head, *(_text(t) for t in tables), "\n".join(
        [guard[0], *(line for g in guard[1:] for line in wrap(g, 110, subsequent_indent="    "))])])


@dataclass(frozen=True)
class Table:
    """One of the paper's tables: title, header, rows of cells, the paper's values (``paper``) and the
    lines the paper prints below it (``notes``: the severity test, Tukey's rows, the size gap). ``widths``
    are the text columns' widths (the last width repeats)."""

    title: str
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    paper: str
    widths: Sequence[int] = (_LABEL, _CELL)
    notes: Sequence[str] = ()

    def width(self, column: int) -> int:
        return self.widths[min(column, len(self.widths) - 1)]


def _text(t: Table) -> str:
    """The table as aligned text: its columns padded to their widths, the paper's line wrapped."""
    def line(cells: Sequence[str]) -> str:
        return "".join(f"{c:<{t.width(j)}}" for j, c in enumerate(cells)).rstrip()

    lines = [t.title, line(t.header), *(line(row) for row in t.rows)]
    lines += wrap(f"Paper: {t.paper}", 110, subsequent_indent="       ")
    return "\n".join([*lines, *t.notes])


def _markdown(head: str, notes: Sequence[str], tables: Sequence[Table], guard: Sequence[str]) -> str:
    """The tables as Markdown: a heading and a pipe table each, the paper's values and notes below."""
    def cells(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") or " " for c in row) + " |"

    out = [f"## {head}", "", *(f"{n}  " for n in notes)]
    for t in tables:
        out += ["", f"### {t.title}", "", cells(t.header), "|" + "---|" * len(t.header),
                *(cells(row) for row in t.rows), "", f"*Paper: {t.paper}*"]
        out += ["", *(f"- {n.strip()}" for n in t.notes)] if t.notes else []
    out += ["", f"### {guard[0]}", "", *(f"- {g}" for g in guard[1:])]
    return "\n".join(out) + "\n"


def _html(title: str, about: str, notes: Sequence[str], tables: Sequence[Table], guard: Sequence[str]) -> str:
    """The tables as one HTML page (every text escaped; text nodes only, so quotes stay as they are)."""
    escape = partial(escape_all, quote=False)

    def row(tag: str, cells: Sequence[str]) -> str:
        return "<tr>" + "".join(f"<{tag}>{escape(c)}</{tag}>" for c in cells) + "</tr>"

    body = [f"<h1>{escape(title)}</h1>", f"<p>{escape(about)}</p>", *(f"<p>{escape(n)}</p>" for n in notes)]
    for t in tables:
        body += [f"<h2>{escape(t.title)}</h2>", "<table>", f"<thead>{row('th', t.header)}</thead>", "<tbody>",
                 *(row("td", r) for r in t.rows), "</tbody></table>",
                 f"<p class=\"paper\">Paper: {escape(t.paper)}</p>"]
        body += ["<ul>", *(f"<li>{escape(n.strip())}</li>" for n in t.notes), "</ul>"] if t.notes else []
    body += [f"<h2>{escape(guard[0])}</h2>", "<ul>", *(f"<li>{escape(g)}</li>" for g in guard[1:]), "</ul>"]
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse}"
             "th,td{border:1px solid #ccc;padding:.2em .6em;text-align:left;"
             "font-variant-numeric:tabular-nums}"
             ".paper{color:#555;font-style:italic}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape(title)
            + f"</title><style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _not_models(run: RunResult, names: Sequence[str]) -> list[str]:
    """A run of the template explainer or the fake model server under a model's name ("qwen2.5:7b") is
    said to be none, so that no reader sets its rows beside the paper's model of that name."""
    labels = [model_info(run, name).label() for name in names if not model_info(run, name).is_llm]
    if not labels:
        return []
    return [f"Not a language model, so not comparable with the paper's models: {'; '.join(labels)}."]


def _formulas(run: RunResult) -> str:
    """Where this run's formulas depart from the paper's text, and the text from the authors' code."""
    inserted = ("exactly s items (perturbation-counts=paper, the paper's words)"
                if counts_of(run.signature) == COUNTS_PAPER else
                "round(0.1·s·n) items of a history of n (perturbation-counts=proportional; the paper says s)")
    return (f"Formulas: ρ weighs the four metrics as this run's signature says (the paper: .25 each); noise "
            f"and dilution insert {inserted}. The authors' released code differs from the paper's text: "
            "weights .4/.25/.2/.15, a dilution that removes items and a drift that adds them.")


def _guard_block(run: RunResult, names: Sequence[str]) -> list[str]:
    """Not in the paper: the cross-user control beside its tables (docs/guard.md), a title and a line a
    model."""
    return ["Guard — the same item explained for another user (not in the paper; docs/guard.md)",
            *(guard_line(summarize(run, name)) for name in names)]


def compact(iv: Interval) -> str:
    """``0.513 [0.50, 0.53]``: the paper's three decimals for the mean, two for the bounds."""
    if math.isnan(iv.mean):
        return "n/a"
    return f"{iv.mean:.3f} [{iv.low:.2f}, {iv.high:.2f}]"


def _of_kind(pairs: Sequence[PairResult], kind: str) -> list[PairResult]:
    return [p for p in pairs if p.key.kind == kind]


def _with_average(pairs: dict[str, list[PairResult]]) -> dict[str, list[PairResult]]:
    """The models' pairs and, last, every model's pooled: the paper's "Average" row."""
    return {**pairs, "Average": [p for ps in pairs.values() for p in ps]}


def _table1(pairs: dict[str, list[PairResult]], kinds: list[str], label: int) -> Table:
    rows = [[name, *(compact(interval_of(_of_kind(ps, k))) for k in kinds), compact(interval_of(ps))]
            for name, ps in _with_average(pairs).items()]
    header = ["Model", *(SHORT_KIND.get(k, k) for k in kinds), "Overall"]
    return Table("Table 1 — Robustness ρ by model and perturbation kind", header, rows, PAPER[1],
                 (label, _CELL))


def _table2(pairs: dict[str, list[PairResult]], label: int) -> Table:
    rows = [[name, *(compact(interval_of(ps, m)) for m in METRICS)]
            for name, ps in _with_average(pairs).items()]
    header = ["Model", *(METRIC_TITLE[m] for m in METRICS)]
    return Table("Table 2 — Per-metric similarity by model", header, rows, PAPER[2], (label, _CELL))


def _table3(pooled: list[PairResult], kinds: list[str]) -> Table:
    severities = sorted({p.key.severity for p in pooled})
    rows = []
    for kind in kinds:
        chosen = _of_kind(pooled, kind)
        rows.append([SHORT_KIND.get(kind, kind),
                     *(compact(interval_of([p for p in chosen if p.key.severity == s])) for s in severities)])
    rows.append(["Average", *(compact(interval_of([p for p in pooled if p.key.severity == s]))
                              for s in severities)])
    header = ["Kind", *(f"L{s}" for s in severities)]
    return Table("Table 3 — ρ by perturbation kind and severity (pairs of all models pooled)", header, rows,
                 PAPER[3], notes=[*_severity_lines(pooled), *_tukey_lines(pooled)])


def _severity_lines(pooled: list[PairResult]) -> list[str]:
    """§4.7: the change from severity 1 to 5 in the users' mean ρ, and the paired test of it over the users
    with pairs at both levels, with Cohen's d_z."""
    from ..stats import severity_test  # lazy: loads numpy

    found = severity_test(pooled)
    if found is None:
        return ["L1 vs L5: not measured (no user has pairs at both severity 1 and 5)."]
    change = f"{(found.mean_l5 - found.mean_l1) / found.mean_l1 * 100:+.1f} %" if found.mean_l1 else "n/a"
    head = (f"L1 vs L5: users' mean ρ {found.mean_l1:.3f} → {found.mean_l5:.3f} ({change}), paired over "
            f"{found.users} users: ")
    if found.t is None or found.p is None or found.d is None:
        return [head + "the paired test is undefined (fewer than 2 users, or no spread in the changes)."]
    return [head + f"t({found.users - 1}) = {found.t:.2f}, {_p(found.p)}, Cohen's d_z = {found.d:.2f}"]


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _tukey_lines(pooled: list[PairResult]) -> list[str]:
    """Tukey HSD between the kinds (pairs as observations, as the paper did: it overstates the evidence when
    users differ — the Friedman test in the report's findings takes users as blocks)."""
    from ..stats import kind_differences  # lazy: loads numpy

    rows = kind_differences(pooled).tukey
    if not rows:
        return ["Tukey HSD: not measured (needs at least 2 kinds with spread)."]
    lines = ["Tukey HSD between kinds (ρ difference [95 % CI], p; pairs as observations, as in the paper):"]
    lines += [f"  {SHORT_KIND.get(r.kind_a, r.kind_a)} − {SHORT_KIND.get(r.kind_b, r.kind_b)}: "
              f"{r.diff:+.3f} [{r.low:+.3f}, {r.high:+.3f}], {_p(r.p)}" for r in rows]
    return lines


def parse_size(size: str | None) -> float | None:
    """``"8.0B"`` → 8e9, ``"500M"`` → 5e8; None when absent or unreadable."""
    if not size:
        return None
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMBT]?)\s*", size.upper())
    if not match:
        return None
    try:
        number = float(match.group(1))
    except ValueError:
        return None
    return number * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[match.group(2)]


def _table4(run: RunResult, pairs: dict[str, list[PairResult]]) -> Table:
    groups: dict[str, list[str]] = {}
    for name in pairs:
        size = model_info(run, name).parameter_size
        groups.setdefault(size if size and parse_size(size) is not None else "unknown", []).append(name)
    # Largest first, as the paper lists them; "unknown" last.
    order = sorted(groups, key=lambda s: -(parse_size(s) or -1.0))
    means = {size: interval_of([p for n in groups[size] for p in pairs[n]]) for size in order}
    rows = [[size, compact(means[size]), ", ".join(groups[size])] for size in order]
    sized = [size for size in order if size != "unknown"]
    if len(sized) < 2:
        gap_line = "Largest vs smallest: needs models of two known sizes."
    else:
        large, small = means[sized[0]].mean, means[sized[-1]].mean
        gap = f"{(large - small) / small * 100:+.1f} %" if small else "n/a"
        gap_line = f"Largest vs smallest: {sized[0]} ρ {large:.3f} vs {sized[-1]} {small:.3f} ({gap})."
    return Table("Table 4 — ρ by model size (parameters from the model server)",
                 ["Parameters", "Overall ρ", "Models"], rows, PAPER[4], (_LABEL, _CELL + 2), [gap_line])


def _table5(pairs: dict[str, list[PairResult]], kinds: list[str], label: int) -> Table:
    """The paper's orientation: a row per model and metric, a column per kind, each column's best starred."""
    cells = {(name, m): [interval_of(_of_kind(ps, k), m) for k in kinds] for name, ps in pairs.items()
             for m in METRICS}
    best = [max((iv[j].mean for iv in cells.values() if not math.isnan(iv[j].mean)), default=math.nan)
            for j in range(len(kinds))]
    body = [[name, METRIC_TITLE[m],
             *(compact(iv) + ("*" if iv.mean == best[j] else "") for j, iv in enumerate(row))]
            for (name, m), row in cells.items()]
    header = ["Model", "Metric", *(SHORT_KIND.get(k, k) for k in kinds)]
    title = "Table 5 — Per-metric similarity by model and perturbation kind (* the column's best)"
    return Table(title, header, body, PAPER[5], (label, 12, _CELL))


def _table6(pooled: list[PairResult]) -> Table:
    from ..stats import metric_correlations  # lazy: loads numpy

    corr = metric_correlations(pooled)
    rows = [[METRIC_TITLE[a], *(fmt_mean(corr.r[a][b], 2) if corr.r[a][b] is not None else "n/a"
                                for b in METRICS)] for a in METRICS]
    title = (f"Table 6 — Pearson correlations between metrics ({corr.n} scored pairs of all models; "
             "generation failures left out)")
    return Table(title, ["", *(METRIC_TITLE[m] for m in METRICS)], rows, PAPER[6], (_LABEL, 12))

