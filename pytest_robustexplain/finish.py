"""The end of a run: assemble the record, write the reports, tell GitHub Actions, print the summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .report.github import github_annotations, github_step_summary, on_github_actions
from .report.json_report import write_report
from .report.markdown import write_markdown
from .results import RunResult

if TYPE_CHECKING:
    from .runner import RobustnessRun


# pytest's exit code when every test passed but a report could not be written (documented in README):
# distinct from 1, so a broken report path never reads as a failed gate, nor passes unnoticed.
REPORT_ERROR_EXIT = pytest.ExitCode.USAGE_ERROR


def finish_run(run: RobustnessRun) -> tuple[RunResult | None, list[str]]:
    """Build the run's record and write every configured report: (the record or None when nothing was
    gated, one message per report that could not be written — naming the option, path and cause)."""
    result = run.run_result()
    if result is None:
        return None, []
    settings = run.settings
    from .report.json_report import write_json

    writes: list[tuple[str, Path | None, Any]] = [("json", settings.json, write_json),
                                                  ("save-baseline", settings.save_baseline, write_json)]
    if settings.html is not None:
        from .report.html import write_html

        writes.append(("html", settings.html, write_html))
    writes.append(("markdown", settings.markdown, write_markdown))
    errors = []
    for name, path, writer in writes:
        if path is not None:
            error = write_report(lambda p=path, w=writer: (p.parent.mkdir(parents=True, exist_ok=True),
                                                             w(result, p)), f"--robustexplain-{name}={path}")
            if error:
                errors.append(error)
    summary_error = write_report(lambda: github_step_summary(result),
                                 f"$GITHUB_STEP_SUMMARY={os.environ.get('GITHUB_STEP_SUMMARY', '')}")
    if summary_error:
        errors.append(summary_error)
    run.config.hook.pytest_robustexplain_report(run=result, config=run.config)
    return result, errors


def print_summary(result: RunResult, terminalreporter: Any, config: pytest.Config) -> None:
    """The "Robustness report" section (one line in quiet mode) and GitHub annotations."""
    from .report.terminal import render_terminal

    quiet = config.get_verbosity() < 0
    width = getattr(terminalreporter, "_tw", None)
    text = render_terminal(result, width=max(80, min(getattr(width, "fullwidth", 100), 140)), quiet=quiet,
                           verbose=config.get_verbosity() > 0)
    if not quiet:
        terminalreporter.write_sep("=", "robustness report")
    terminalreporter.write_line(text)
    if on_github_actions():
        for line in github_annotations(result):
            terminalreporter.write_line(line)
