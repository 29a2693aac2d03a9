"""``robustexplain history``: the run history as a table per test item and model — each run's outcome and
main numbers, their range over the last runs, and the most likely change with its p-value."""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..sanitize import visible
from ..wording import count_noun
from .common import EXIT_OK, PROG, CommandError, write_output

if TYPE_CHECKING:
    from ..report.history import Trend

SHORT = {"PASS": "PASS", "FAIL": "FAIL", "INCONCLUSIVE": "INC", "INSENSITIVE": "INS"}


def cmd_history(args: argparse.Namespace) -> int:
    from ..engine import DEFAULT_CACHE_DIR
    from ..report.history import HISTORY_FILE, read_history, trends

    path = Path(args.file) if args.file else Path(args.cache_dir or DEFAULT_CACHE_DIR) / HISTORY_FILE
    if not path.is_file():
        raise CommandError(f"no run history at {path}: each gated run appends to it (the history setting "
                           "places it; 'off' keeps none)")
    if args.last < 1:
        raise CommandError(f"--last must be at least 1, got {args.last}")
    records, warnings = read_history(path)
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    chosen = [t for t in trends(records) if not args.test or args.test in t.test]
    if not chosen:
        said = f" for tests matching {args.test!r}" if args.test else ""
        raise CommandError(f"{path} holds {len(records)} runs but no test item{said}")
    lines = [f"{count_noun(len(records), 'run')} in {path}", ""]
    for trend in chosen:
        lines += [*render_trend(trend, last=args.last), ""]
    write_output("\n".join(lines).rstrip() + "\n", args.output)
    return EXIT_OK


def render_trend(trend: Trend, *, last: int) -> list[str]:
    """One test item's table: outcome and each main number per run, oldest to newest, then its range and
    the most likely change in it."""
    from ..report.history import MAIN_NUMBERS

    runs = trend.runs[-last:]
    first = len(trend.runs) - len(runs) + 1
    signature = hashlib.sha256(trend.signature.encode()).hexdigest()[:8]
    # Ids come from a file a job may share: shown, never obeyed (a line never starts with them, so no
    # "::" of theirs can be a workflow command).
    head = [f"item {visible(trend.test, commands=True)} · model {visible(trend.model, commands=True)} · "
            f"signature {signature}",
            f"  runs {first}–{len(trend.runs)} of {len(trend.runs)}"
            + (f" · {_when(runs[0].time)} → {_when(runs[-1].time)}" if runs[0].time else ""),
            f"  {'outcome':<9}" + "".join(f"{SHORT.get(r.outcome, r.outcome[:4]):>6}" for r in runs)]
    rows, summaries = [], []
    for check, label in MAIN_NUMBERS.items():
        if not any(check in r.values for r in runs):
            continue
        cells = "".join(f"{r.values[check]:>6.2f}" if check in r.values else f"{'–':>6}" for r in runs)
        rows.append(f"  {label:<9}{cells}")
        summaries.append(f"  {label}: {_summary(trend, check, last, first)}")
    tail = summaries
    digests = {r.digest for r in runs if r.digest}
    if len(digests) > 1:
        tail.append(f"  the model's digest changed within these runs ({len(digests)} digests)")
    return head + rows + tail


def _summary(trend: Trend, check: str, last: int, first: int) -> str:
    values = trend.series(check, last)
    said = f"range {min(values):.2f}–{max(values):.2f}"
    change = trend.change(check, last)
    if change is None:
        return said + " · too few runs to test for a change" if len(values) < 8 else said
    if change.significant:
        commit = trend.runs[first - 1 + change.at].commit
        where = f"run {first + change.at}" + (f" (commit {commit[:7]})" if commit else "")
        return said + f" · changed at {where}: {change.before:.2f} → {change.after:.2f} (p {change.p:.3f})"
    return said + f" · no change shown (p {change.p:.2f})"


def _when(time: str) -> str:
    return visible(time[:16].replace("T", " "))
