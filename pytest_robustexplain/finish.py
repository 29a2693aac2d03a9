"""The end of a run: assemble the record, write the reports, tell GitHub Actions, print the summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .results import FAIL, INSENSITIVE, RunResult

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


def write_report(write: Any, where: str) -> str | None:
    """Run one report write; an OS error (no such directory, a file in the way, read-only, disk full)
    becomes one message naming ``where`` and the cause, never a traceback."""
    try:
        write()
    except OSError as exc:
        cause = exc.strerror or str(exc)
        if exc.filename and not where.endswith(f"={exc.filename}"):
            cause = f"{cause} ({exc.filename})"  # e.g. a file where its directory should be
        return f"{where}: cannot write the report: {cause}"
    return None


def write_markdown(result: RunResult, path: Path) -> None:
    """The Markdown report, written atomically (shared by the plugin and the CLI)."""
    from .report.json_report import atomic_write_text
    from .report.markdown import render_markdown

    atomic_write_text(path, render_markdown(result) + "\n")


def github_step_summary(result: RunResult) -> None:
    """Under GitHub Actions, append the Markdown report to the job's step summary."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if os.environ.get("GITHUB_ACTIONS") != "true" or not target:
        return
    from .report.markdown import render_markdown

    with open(target, "a", encoding="utf-8") as handle:
        handle.write(render_markdown(result) + "\n")


def print_summary(result: RunResult, terminalreporter: Any, config: pytest.Config) -> None:
    """The "Robustness report" section (one line in quiet mode) and GitHub annotations."""
    from .report.terminal import render_terminal

    quiet = config.get_verbosity() < 0
    width = getattr(terminalreporter, "_tw", None)
    text = render_terminal(result, width=max(80, min(getattr(width, "fullwidth", 100), 140)), quiet=quiet)
    if not quiet:
        terminalreporter.write_sep("=", "robustness report")
    terminalreporter.write_line(text)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(result):
            terminalreporter.write_line(line)


def github_annotations(result: RunResult) -> list[str]:
    """``::error`` workflow commands, one per failed gate, so the failure shows on the PR."""
    lines = []
    for gate in result.gates:
        if gate.verdict.outcome not in (FAIL, INSENSITIVE):
            continue
        path = gate.nodeid.split("::", 1)[0]
        message = gate.verdict.message or f"robustness gate failed for {gate.slice}"
        lines.append(f"::error file={path},title=robustness gate failed ({_escape(gate.slice)})::"
                     f"{_escape(gate.nodeid + ': ' + message)}")
    return lines


def _escape(text: str) -> str:
    # Outside text made visible (controls, bidi), then workflow-command escaping: %, CR and LF must be
    # percent-encoded in the message, as GitHub documents.
    from .sanitize import visible

    return visible(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"), commands=True)
