"""GitHub Actions outputs: the job step summary and ``::error`` annotations, for both entry points.

A report writer like the others (``robustexplain run`` uses it without importing pytest). Outside text in
an annotation is made visible (controls, bidi) and percent-encoded as GitHub documents for workflow
commands, so nothing in a model reply or an id can end the command or start another.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..results import FAIL, INCONCLUSIVE, INSENSITIVE, RunResult
from ..sanitize import visible
from .markdown import render_markdown

if TYPE_CHECKING:
    from .summary import ReportModel


def on_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def github_step_summary(result: RunResult | ReportModel) -> None:
    """Under GitHub Actions, append the Markdown report to the job's step summary."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not on_github_actions() or not target:
        return

    with open(target, "a", encoding="utf-8") as handle:
        handle.write(render_markdown(result) + "\n")


def github_annotations(result: RunResult, *, line_of: Mapping[str, int] | None = None) -> list[str]:
    """Workflow commands, one per gate that did not pass, so it shows on the pull request: ``::error`` for
    FAIL, INSENSITIVE and an INCONCLUSIVE that the run's ``inconclusive`` policy fails, ``::warning`` for
    an INCONCLUSIVE it passes; ``file=`` when the gate is a pytest item, and ``line=`` when ``line_of`` (node
    id -> the test's 1-based line, which pytest's reports give) knows it."""
    lines = []
    inconclusive_fails = str(result.settings.get("inconclusive", "fail")) == "fail"
    for gate in result.gates:
        outcome = gate.verdict.outcome
        if outcome not in (FAIL, INSENSITIVE, INCONCLUSIVE):
            continue
        level = "warning" if outcome == INCONCLUSIVE and not inconclusive_fails else "error"
        path, sep, _ = gate.nodeid.partition("::")
        line = (line_of or {}).get(gate.nodeid)
        where = f"file={_escape_property(path)},{f'line={line},' if line else ''}" if sep else ""
        message = gate.verdict.message or f"robustness gate failed for {gate.slice}"
        lines.append(f"::{level} {where}title=robustness gate {gate.verdict.outcome} "
                     f"({_escape_property(gate.slice)})::{_escape(gate.nodeid + ': ' + message)}")
    return lines


def _escape(text: str) -> str:
    # Outside text made visible (controls, bidi), then workflow-command escaping: %, CR and LF must be
    # percent-encoded in the message, as GitHub documents.
    return visible(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"), commands=True)


def _escape_property(text: str) -> str:
    # Properties additionally escape ":" and "," (they delimit the command's properties).
    return _escape(text).replace(":", "%3A").replace(",", "%2C")
