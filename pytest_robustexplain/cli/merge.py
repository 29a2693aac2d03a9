"""``robustexplain merge SHARD.json…``: the shards of one gate (``--robustexplain-shard=I/N``, one CI job
each) decided as one run would decide them — every verdict, interval and finding recomputed from the shards'
pairs, never from their summaries — with ``robustexplain run``'s reports, verdict line and exit code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..engine.shards import check_shards, merged_run, missing_shards
from ..report.json_report import atomic_write_text, read_json
from ..report.pr_comment import render_pr_comment
from .common import CLI_SPELLING, PROG
from .run import finish_run


def cmd_merge(args: argparse.Namespace) -> int:
    """``robustexplain merge``: check the shards are one plan's, decide, report."""
    shards = check_shards([(path, read_json(path)) for path in args.shards])
    missing = missing_shards(shards)
    if missing:
        which = (f"shard{'s' if len(missing) > 1 else ''} {', '.join(str(s.index) for s in missing)} of "
                 f"{missing[0].count}")
        print(f"{PROG}: note: {which} not given: their users are not measured, and a gate that needs them "
              "is INCONCLUSIVE", file=sys.stderr)
    outputs = {name: Path(os.path.abspath(path)) for name in ("json", "html", "markdown", "history")
               if (path := getattr(args, name))}
    run, result = merged_run(shards, spelling=CLI_SPELLING,
                             say=lambda note: print(f"{PROG}: {note}", file=sys.stderr), **outputs)
    if args.pr_comment:
        atomic_write_text(args.pr_comment, render_pr_comment(result, run.baseline,
                                                             details_url=args.details_url or ""))
    return finish_run(args, run, result)


def add_merge(commands: Any) -> None:
    merge = commands.add_parser(
        "merge", help="decide the shards of one gate as one run",
        description="Decide the JSON reports of a gate's shards (each run with --robustexplain-shard=I/N or "
                    "'robustexplain run --shard I/N') as one run would: every verdict, interval and finding "
                    "recomputed from their pairs. Shards of different plans, repeated or overlapping shards "
                    "are refused; a missing shard leaves its users not measured. Exit codes as 'run'.")
    merge.add_argument("shards", nargs="+", metavar="SHARD.json", help="the shards' JSON reports")
    for name, what in (("json", "the merged JSON report"), ("html", "the HTML report"),
                       ("markdown", "the Markdown report"), ("junitxml", "a JUnit XML file"),
                       ("pr-comment", "the pull-request comment (Markdown)")):
        merge.add_argument(f"--{name}", metavar="PATH", default=None, help=f"Write {what} to PATH.")
    merge.add_argument("--history", metavar="PATH", default=None,
                       help="Append the merged run to this run history (JSON lines; shards keep none).")
    merge.add_argument("--details-url", metavar="URL", default=None,
                       help="pr-comment: where the full report is (the workflow run).")
    merge.add_argument("-q", "--quiet", action="store_true", help="Print one line per model.")
    merge.set_defaults(handler=cmd_merge)
