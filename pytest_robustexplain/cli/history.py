"""``robustexplain history``: the run history, compact — grouped by test, model and dataset, one line an item
with its outcomes, its last values and any change over the last runs — or as JSON (``--format json``)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine import DEFAULT_CACHE_DIR
from ..report.history import HISTORY_FILE, MAIN_NUMBERS, read_history, trends
from ..sanitize import visible
from ..stats.trend import MIN_RUNS
from ..wording import count_noun
from .common import EXIT_OK, PROG, CommandError, write_output

if TYPE_CHECKING:
    from ..report.history import Trend


def cmd_history(args: argparse.Namespace) -> int:
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
    items = [item_of(trend, args.last) for trend in chosen]
    if args.format == "json":
        text = json.dumps({"file": str(path), "runs": len(records), "last": args.last, "items": items},
                          ensure_ascii=False, indent=1) + "\n"
    else:
        text = "\n".join(render_items(items, runs=len(records), path=path)) + "\n"
    write_output(text, args.output)
    return EXIT_OK


def item_of(trend: Trend, last: int) -> dict[str, Any]:
    """One test item's recent runs: outcomes, each main number's values, the change in each (None: no
    change shown; absent: too few runs to test)."""
    runs = trend.runs[-last:]
    values = {check: [r.values.get(check) for r in runs] for check in MAIN_NUMBERS
              if any(check in r.values for r in runs)}
    changes: dict[str, Any] = {}
    for check in values:
        change = trend.change(check, last)
        if change is not None:
            changes[check] = ({"run": len(trend.runs) - len(runs) + 1 + change.at, "before": change.before,
                               "after": change.after, "p": change.p, "commit": runs[change.at].commit}
                              if change.significant else None)
    digests = {r.digest for r in runs if r.digest}
    return {"test": trend.test, "model": trend.model, "dataset": trend.dataset,
            "signature": hashlib.sha256(trend.signature.encode()).hexdigest()[:8],
            "runs": len(trend.runs), "first": len(trend.runs) - len(runs) + 1,
            "from": runs[0].time, "to": runs[-1].time, "commits": [r.commit for r in runs],
            "outcomes": [r.outcome for r in runs], "values": values, "changes": changes,
            "digests": len(digests)}


def render_items(items: Sequence[dict[str, Any]], *, runs: int, path: Path) -> list[str]:
    """The compact text: a heading per test, model and dataset, one line per item under it, the "too few
    runs" note once at the end."""
    lines = [f"{count_noun(runs, 'run')} in {path}"]
    heading, untested = None, 0
    for item in items:
        test, _, param = item["test"].partition("[")
        group = (test, item["model"], item["dataset"], item["signature"])
        if group != heading:
            heading = group
            # Ids come from a file a job may share: shown, never obeyed (a line never starts with them, so
            # no "::" of theirs can be a workflow command).
            lines += ["", f"test {_shown(test)} · model {_shown(item['model'])} · dataset "
                          f"{_shown(item['dataset']) or 'not named'} · signature {item['signature']}"]
        label = f"[{param}" if param else "(whole test)"
        shown = [f"{MAIN_NUMBERS[c]} {_number(v[-1])}" for c, v in item["values"].items()]
        changes = [f"{MAIN_NUMBERS[c]} changed at run {ch['run']}"
                   + (f" (commit {_shown(ch['commit'][:7])})" if ch["commit"] else "")
                   + f": {ch['before']:.2f} → {ch['after']:.2f} (p {ch['p']:.3f})"
                   for c, ch in item["changes"].items() if ch is not None]
        untested += not item["changes"] and len(item["outcomes"]) < MIN_RUNS
        window = f"runs {item['first']}–{item['runs']}" if item["runs"] > 1 else "run 1"
        lines.append("  " + " · ".join([
            f"{_shown(label)} {window} {_outcomes(item['outcomes'])}", *shown,
            *(changes or (["no change shown"] if item["changes"] else [])),
            *([f"{item['digests']} model digests"] if item["digests"] > 1 else [])]))
    if untested:
        lines += ["", f"{count_noun(untested, 'item')} with fewer than {MIN_RUNS} runs shown: too few to "
                      "test for a change"]
    return lines


def _outcomes(outcomes: Sequence[str]) -> str:
    """"PASS×7 FAIL×3, last FAIL": the count of each outcome and the newest."""
    counts = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
    return " ".join(f"{visible(o)}×{n}" for o, n in counts.items()) + f", last {visible(outcomes[-1])}"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _shown(text: str) -> str:
    return visible(text, commands=True)
