"""``robustexplain report``: render a saved JSON report as the terminal report, Markdown, HTML, the
pull-request comment or the paper's tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..report.html import render_html
from ..report.json_report import read_json
from ..report.markdown import render_markdown
from ..report.paper_tables import render_paper_tables
from ..report.pr_comment import render_pr_comment
from ..report.terminal import render_terminal
from .common import EXIT_OK, PROG, CommandError, terminal_width, write_output

if TYPE_CHECKING:
    from ..results import RunResult


def cmd_report(args: argparse.Namespace) -> int:
    """``robustexplain report``: render a saved JSON report."""
    if args.tables and args.format == "pr-comment":
        raise CommandError(f"--tables {args.tables} prints the tables as text, Markdown or HTML; it cannot "
                           "be combined with --format pr-comment")
    run = read_json(args.report)
    partial_note(run, args.report)
    if args.tables == "paper":

        text = render_paper_tables(run, args.format if args.format in ("markdown", "html") else "text")
    elif args.format == "markdown":

        text = render_markdown(run)
    elif args.format == "html":

        text = render_html(run)
    elif args.format == "pr-comment":

        baseline = read_json(args.baseline) if args.baseline and Path(args.baseline).is_file() else None
        # A baseline asked for but not there yet (the Action's first pull requests): say where it comes from.
        note = "No baseline yet: the default branch saves one when its gate passes." if args.baseline else ""
        text = render_pr_comment(run, baseline, baseline_note=note, details_url=args.details_url or "")
    else:

        text = render_terminal(run, width=terminal_width(), quiet=args.quiet)
    write_output(text, args.output)
    return EXIT_OK


def partial_note(run: RunResult, path: str) -> None:
    if run.settings.get("partial"):
        print(f"{PROG}: note: {path} is a partial run (interrupted); its numbers cover the finished pairs "
              "only", file=sys.stderr)
