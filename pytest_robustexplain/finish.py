"""The end of a pytest session's run: the engine's record and reports, the hook, the terminal summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .report.github import github_annotations, on_github_actions
from .runner import is_xdist_worker

if TYPE_CHECKING:
    from .report.summary import ReportModel
    from .runner import RobustnessRun


# pytest's exit code when every test passed but a report could not be written (documented in README):
# distinct from 1, so a broken report path never reads as a failed gate, nor passes unnoticed.
REPORT_ERROR_EXIT = pytest.ExitCode.USAGE_ERROR


def finish_session(run: RobustnessRun, session: pytest.Session, notes: list[tuple[str, bool]]
                   ) -> ReportModel | None:
    """The end of the session for the run: an xdist worker hands its counters to the controller; a stopped
    session saves what finished and says how to resume; otherwise the record and every report, a report
    that could not be written being an error line (and, where every test passed, the exit status 4)."""
    config = session.config
    try:
        if is_xdist_worker(config):
            config.workeroutput["robustexplain"] = run.worker_output()  # type: ignore[attr-defined]
            return None
        if session.exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C or SIGTERM: what finished, how on
            notes += [(line, False) for line in finish_stopped(run)]
            return None
        report, errors = finish_run(run)
    finally:
        run.close()
    if errors:
        failing = session.exitstatus == pytest.ExitCode.OK
        if failing:
            session.exitstatus = REPORT_ERROR_EXIT
        notes += [(f"ERROR: {error}", True) for error in errors]
        said = f"the run exits {int(session.exitstatus)}: a report could not be written; " if failing else ""
        notes.append((f"{said}every verdict above stands", True))
    return report


def finish_run(run: RobustnessRun) -> tuple[ReportModel | None, list[str]]:
    """Build the run's record and write every configured report (the engine's writers, as for
    ``robustexplain run``): (the run as the writers read it, or None when nothing was gated; one message
    per report that could not be written — naming the option, path and cause)."""
    done = run.finish()
    if done is None:
        return None, []
    run.config.hook.pytest_robustexplain_report(run=done.result, config=run.config)
    return done.report, list(done.errors)


def finish_stopped(run: RobustnessRun) -> list[str]:
    """A session stopped by Ctrl-C or SIGTERM: what finished, as a partial JSON report (``json``, else in
    the cache directory), and how to resume — as ``robustexplain run`` says it. Nothing when no robustness
    test ran."""
    from .engine.interrupt import resume_hint, save_partial

    partial = run.stopped_result()
    if partial is None:
        return []
    settings, cache_dir = run.settings, run.engine.cache_dir
    lines = save_partial(partial, how=run.stopped_how, json_path=settings.json, cache_dir=cache_dir)
    return [*lines, resume_hint(backend=settings.backend, cache=settings.cache, cache_dir=cache_dir,
                                spelling=run.engine.spelling)]


def print_summary(result: ReportModel, terminalreporter: Any, config: pytest.Config,
                  line_of: dict[str, int] | None = None) -> None:
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
        for line in github_annotations(result.run, line_of=line_of):
            terminalreporter.write_line(line)
