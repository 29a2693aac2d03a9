"""The run's record and report files: the record assembled from what the run gathered, every writer the
settings ask for, the GitHub step summary, and the model facts as the record keeps them. A report that
cannot be written is one message, never a changed verdict."""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..errors import RobustExplainWarning, warn
from ..metrics import metric_signature
from ..metrics.user import tags_signature
from ..report.github import github_step_summary
from ..report.history import HISTORY_FILE, append_run, current_commit, run_line, run_trends
from ..report.json_report import write_json, write_report
from ..report.markdown import write_markdown
from ..report.summary import ReportModel
from ..results import GateResult, ModelInfo, PairResult, RunResult, counts_signature
from ..safe_files import make_cache_dir
from ..settings import Spelling

if TYPE_CHECKING:
    from ..explainers.base import Explainer
    from ..report.summary import ReportModel
    from ..settings import Settings
    from .decide import Outcome


@dataclass(frozen=True)
class RunOutcome:
    """The end of a run, as both doors print it: the record as every writer read it, each decided item's
    outcome (the rule both doors apply), one message per report that could not be written, and the report
    files that were (``written``: "JSON robustness.json", in the order of the settings)."""

    report: ReportModel
    outcomes: tuple[Outcome, ...]
    errors: tuple[str, ...]
    written: tuple[str, ...] = ()

    @property
    def result(self) -> RunResult:
        return self.report.run

    @property
    def failed(self) -> list[GateResult]:
        """The gates of the items that did not pass (this process's decided items)."""
        failing = {o.nodeid for o in self.outcomes if not o.passed}
        return [gate for gate in self.result.gates if gate.nodeid in failing]


def close_explainers(explainers: Mapping[str, Explainer]) -> None:
    """Close explainers that were built but never run on the sweep's loop (their HTTP clients)."""

    async def close_all() -> None:
        for explainer in explainers.values():
            await explainer.aclose()

    asyncio.run(close_all())


# What the doors call each report file when they say where they wrote it.
REPORT_LABELS: Mapping[str, str] = {"json": "JSON", "save-baseline": "baseline", "html": "HTML",
                                    "markdown": "Markdown"}


def write_reports(settings: Settings, result: RunResult | ReportModel, *,
                  spelling: Spelling) -> tuple[list[str], list[str]]:
    """The JSON, baseline, HTML and Markdown reports the settings ask for, and the GitHub step summary:
    ``(written, errors)`` — each file written ("HTML /path/report.html") and one message per failure."""
    report = ReportModel.of(result)  # every writer reads the same summaries, computed once
    targets: list[tuple[str, Path | None, Callable[[ReportModel, Path], object]]] = [
        ("json", settings.json, write_json), ("save-baseline", settings.save_baseline, write_json),
        ("html", settings.html, _write_html), ("markdown", settings.markdown, _write_markdown)]
    written, errors = [], []
    for name, path, write in targets:
        if path is None:
            continue
        error = write_report(lambda p=path, w=write: _write(w, report, p), f"{spelling.flag(name)}={path}")
        if error:
            errors.append(error)
        elif name != "markdown" or not _is_step_summary(path):  # the job summary is said by GitHub itself
            written.append(f"{REPORT_LABELS[name]} {path}")
    error = write_report(lambda: github_step_summary(report),
                         f"$GITHUB_STEP_SUMMARY={os.environ.get('GITHUB_STEP_SUMMARY', '')}")
    return written, errors + ([error] if error else [])


def record_history(settings: Settings, result: RunResult, *, cache_dir: Path, base_dir: Path | None,
                   spelling: Spelling) -> str | None:
    """Append the finished run to the history (``report.history``) and put its items' recent runs into
    the record (``settings.history_trend``, what the reports show beside today's numbers). None when done or
    off; else one message — an error when the ``history`` setting named the file, a warning at the default
    place (a read-only cache directory must not turn every passing run into a failed one)."""
    if settings.history == "off" or result.settings.get("partial") or not result.gates or result.shard:
        return None  # (a shard's items are measured, not decided: its merge is the run to remember)
    if settings.history is None and settings.cache not in ("write", "read-write"):
        return None  # the default place is the cache directory, which this cache mode does not write
    path = settings.history if isinstance(settings.history, Path) else cache_dir / HISTORY_FILE
    try:
        if path.parent == cache_dir:
            make_cache_dir(cache_dir)
        text = append_run(path, run_line(result, commit=current_commit(os.environ, base_dir or Path.cwd())))
        trend, warnings = run_trends(text, path, result)
    except OSError as exc:
        message = f"{spelling.flag('history')}={path}: cannot append this run to the history: " + (
            exc.strerror or str(exc))
        if settings.history is None:
            warn(RobustExplainWarning(message))
            return None
        return message
    for warning in warnings:
        warn(RobustExplainWarning(warning))
    if trend:
        result.settings["history_trend"] = trend
    return None


def _is_step_summary(path: Path) -> bool:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return summary is not None and summary != "" and Path(summary) == path


def _write(write: Callable[[ReportModel, Path], object], result: ReportModel, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write(result, path)


def _write_html(result: ReportModel, path: Path) -> None:
    from ..report.html import write_html  # lazy: loads matplotlib, for an HTML report only

    write_html(result, path)


def _write_markdown(result: ReportModel, path: Path) -> None:
    write_markdown(result, path)


def model_record(name: str, info: ModelInfo) -> dict[str, Any]:
    """Model facts for ``RunResult.models`` under the name the pairs carry (the server's resolved name,
    when different, goes to ``extra``)."""
    data = asdict(info)
    if info.name != name:
        data["extra"] = {**data.get("extra", {}), "resolved_name": info.name}
        data["name"] = name
    return data


def run_record(settings: Settings, *, models: Sequence[dict[str, Any]], pairs: Sequence[PairResult],
               gates: Sequence[GateResult], calls: Mapping[str, int], extra: Mapping[str, Any],
               started: float, started_at: str, metric_tags: Collection[str] = (),
               judge_tokens: Mapping[str, Mapping[str, int]] | None = None) -> RunResult:
    """The run as one record: its settings with ``extra`` (judge, dataset name, partial-run facts), each
    item's last gate (a re-decided item replaces its earlier gate), the wall time since ``started``
    (``time.monotonic``); ``metric_tags`` (``name@version``) the user metrics its tests measured, which the
    signature lists."""
    last: dict[str, GateResult] = {}
    for gate in gates:
        last[gate.nodeid] = gate
    return RunResult(
        signature=metric_signature(weights=settings.weights, embedding=settings.embed_model)
        + counts_signature(settings.perturbation_counts) + tags_signature(metric_tags),
        seed=settings.seed, models=list(models), settings={**settings.to_dict(), **extra}, pairs=list(pairs),
        gates=list(last.values()), calls=dict(calls),
        timings={"wall_s": round(time.monotonic() - started, 3)},
        started_at=started_at, finished_at=utc_now(), package_version=__version__,
        judge_tokens={model: dict(counts) for model, counts in (judge_tokens or {}).items()})


def utc_now() -> str:
    """Now, as the record writes its start and end (UTC, to the second)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
