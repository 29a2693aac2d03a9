"""The six tables of the RobustExplain paper (arXiv 2601.19120), filled with this run's numbers.

Same layouts as the paper, but every mean carries its 95 % interval (cluster-robust by user), and each
table ends with a ``Paper:`` line quoting the published values (design/paper-reference.md) for
comparison. Pairs of several models are pooled where the paper averages over models; control pairs never
count, generation failures count with their 0 scores (the method's rule) except in the correlations.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence

from ..results import METRICS, Interval, PairResult, RunResult
from .summary import fmt_mean, guard_line, interval_of, model_info, model_names, ordered_kinds, summarize

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
    4: "70B 0.532, 14B 0.519, 8B 0.492, 7B 0.492 (larger models ~8 % more robust).",
    5: "each model's four metrics for each kind; the pattern holds across kinds: length highest, "
       "structural lowest.",
    6: "Sem–Key 0.72, Sem–Struct 0.58, Key–Struct 0.65, Length with the others 0.24–0.31.",
}
_LABEL = 16
_CELL = 20


def render_paper_tables(run: RunResult) -> str:
    """Tables 1–6 of the paper for ``run``, as aligned text, each followed by the paper's values."""
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
        _guard_block(run, names),
    ]
    head = (f"RobustExplain paper tables (arXiv 2601.19120) for this run — seed {run.seed}, "
            f"{len({p.key.user_id for p in pooled})} users, {len(pooled)} pairs; mean [95 % CI], "
            f"cluster-robust by user\nsignature: {run.signature}")
    return "\n\n".join([head, *tables])


def _guard_block(run: RunResult, names: Sequence[str]) -> str:
    """Not in the paper: the cross-user control beside its tables (docs/guard.md)."""
    lines = ["Guard — the same item explained for another user (not in the paper; docs/guard.md)"]
    for name in names:
        lines += _wrap(guard_line(summarize(run, name)), 110, subsequent_indent="    ")
    return "\n".join(lines)


def compact(iv: Interval) -> str:
    """``0.513 [0.50, 0.53]``: the paper's three decimals for the mean, two for the bounds."""
    if math.isnan(iv.mean):
        return "n/a"
    return f"{iv.mean:.3f} [{iv.low:.2f}, {iv.high:.2f}]"


def _grid(title: str, header: Sequence[str], rows: Sequence[Sequence[str]], paper: str,
          label: int = _LABEL, cell: int = _CELL) -> str:
    lines = [title, f"{header[0]:<{label}}" + "".join(f"{h:<{cell}}" for h in header[1:]).rstrip()]
    lines += [f"{row[0]:<{label}}" + "".join(f"{c:<{cell}}" for c in row[1:]).rstrip() for row in rows]
    lines += _wrap(f"Paper: {paper}", 110, subsequent_indent="       ")
    return "\n".join(lines)


def _of_kind(pairs: Sequence[PairResult], kind: str) -> list[PairResult]:
    return [p for p in pairs if p.key.kind == kind]


def _table1(pairs: dict[str, list[PairResult]], kinds: list[str], label: int) -> str:
    rows = [[name, *(compact(interval_of(_of_kind(ps, k))) for k in kinds), compact(interval_of(ps))]
            for name, ps in pairs.items()]
    header = ["Model", *(SHORT_KIND.get(k, k) for k in kinds), "Overall"]
    return _grid("Table 1 — Robustness ρ by model and perturbation kind", header, rows, PAPER[1], label)


def _table2(pairs: dict[str, list[PairResult]], label: int) -> str:
    rows = [[name, *(compact(interval_of(ps, m)) for m in METRICS)] for name, ps in pairs.items()]
    header = ["Model", *(METRIC_TITLE[m] for m in METRICS)]
    return _grid("Table 2 — Per-metric similarity by model", header, rows, PAPER[2], label)


def _table3(pooled: list[PairResult], kinds: list[str]) -> str:
    severities = sorted({p.key.severity for p in pooled})
    rows = []
    for kind in kinds:
        chosen = _of_kind(pooled, kind)
        rows.append([SHORT_KIND.get(kind, kind),
                     *(compact(interval_of([p for p in chosen if p.key.severity == s])) for s in severities)])
    rows.append(["Average", *(compact(interval_of([p for p in pooled if p.key.severity == s]))
                              for s in severities)])
    header = ["Kind", *(f"L{s}" for s in severities)]
    return _grid("Table 3 — ρ by perturbation kind and severity (pairs of all models pooled)", header, rows,
                 PAPER[3])


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


def _table4(run: RunResult, pairs: dict[str, list[PairResult]]) -> str:
    groups: dict[str, list[str]] = {}
    for name in pairs:
        size = model_info(run, name).parameter_size
        groups.setdefault(size if size and parse_size(size) is not None else "unknown", []).append(name)
    # Largest first, as the paper lists them; "unknown" last.
    order = sorted(groups, key=lambda s: -(parse_size(s) or -1.0))
    rows = [[size, compact(interval_of([p for n in groups[size] for p in pairs[n]])), ", ".join(groups[size])]
            for size in order]
    return _grid("Table 4 — ρ by model size (parameters from the model server)",
                 ["Parameters", "Overall ρ", "Models"], rows, PAPER[4], _LABEL, _CELL + 2)


def _table5(pairs: dict[str, list[PairResult]], kinds: list[str], label: int) -> str:
    rows = []
    for name, ps in pairs.items():
        for kind in kinds:
            chosen = _of_kind(ps, kind)
            cells = [compact(interval_of(chosen, m)) for m in METRICS]
            rows.append([name, SHORT_KIND.get(kind, kind), *cells])
    body = [[f"{r[0]:<{label}}{r[1]}", *r[2:]] for r in rows]
    header = [f"{'Model':<{label}}Kind", *(METRIC_TITLE[m] for m in METRICS)]
    return _grid("Table 5 — Per-metric similarity by model and perturbation kind", header, body, PAPER[5],
                 label + 10)


def _table6(pooled: list[PairResult]) -> str:
    from ..stats import metric_correlations

    corr = metric_correlations(pooled)
    rows = [[METRIC_TITLE[a], *(fmt_mean(corr.r[a][b], 2) if corr.r[a][b] is not None else "n/a"
                                for b in METRICS)] for a in METRICS]
    title = (f"Table 6 — Pearson correlations between metrics ({corr.n} scored pairs of all models; "
             "generation failures left out)")
    return _grid(title, ["", *(METRIC_TITLE[m] for m in METRICS)], rows, PAPER[6], _LABEL, 12)


def _wrap(text: str, width: int, *, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False,
                         initial_indent=initial_indent, subsequent_indent=subsequent_indent)
