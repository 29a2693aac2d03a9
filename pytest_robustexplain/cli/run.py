"""``robustexplain run``: resolve the options as the plugin does, plan, run the sweep, report and gate every
model; ``--dry-run`` prints the plan, Ctrl-C writes a partial report and says how to resume, and
:class:`ProgressBar` shows the sweep on stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..engine import Run, SweepFailed, SweepInterrupted, configured_models, expand, no_model_reason
from ..engine.interrupt import SigtermGuard, save_partial
from ..engine.interrupt import resume_hint as hint
from ..errors import ConfigError
from ..report.github import github_annotations, on_github_actions
from ..report.json_report import write_report
from ..report.junit import write_junit
from ..report.terminal import render_terminal, written_line
from ..results import GateResult
from ..sanitize import redact_url
from ..settings import (
    OPTIONS,
    REPORT_OUTPUTS,
    Settings,
    apply_marker,
    check_report_paths,
    ignored_settings,
    settings_from_project,
)
from ..wording import count_noun
from .common import (
    CLI_SPELLING,
    EXIT_BACKEND,
    EXIT_GATE_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    NODEID,
    PROG,
    PROTOCOLS,
    RUN_BACKENDS,
    RUN_OPTIONS,
    CommandError,
    Protocol,
    print_error,
    terminal_width,
)

if TYPE_CHECKING:
    from ..data import Dataset
    from ..engine import GatedSlice, Run, SweepInterrupted
    from ..results import RunResult
    from ..sweep import Counters


def resolve_run_settings(args: argparse.Namespace, *, env: Mapping[str, str] | None = None,
                         cwd: Path | None = None) -> tuple[Settings, dict[str, Any]]:
    """The run's Settings (shared resolution and validation) and what to record beside them
    (``protocol`` and the options that depart from it)."""
    here = Path(os.path.abspath(cwd or Path.cwd()))
    cli = {spec.dest: getattr(args, spec.dest, None) for spec in OPTIONS if spec.name in RUN_OPTIONS}
    # The same layers as pytest (its ini file, addopts, rootdir), so both doors gate the same settings.
    settings = settings_from_project(cli=cli, env=os.environ if env is None else env, invocation_dir=here)
    # Sources should name the command's flags (--users) for what was given to the command.
    given = {spec.field for spec in OPTIONS if cli.get(spec.dest) is not None}
    settings = replace(settings, sources={k: CLI_SPELLING.text(v) if k in given else v
                                          for k, v in settings.sources.items()})
    if settings.backend not in RUN_BACKENDS:
        raise ConfigError(f"{_where(settings, 'backend')}: the {settings.backend!r} backend needs a pytest "
                          f"conftest; the command supports {', '.join(RUN_BACKENDS)}")
    extra: dict[str, Any] = {}
    if args.protocol:
        settings, extra = _apply_protocol(settings, PROTOCOLS[args.protocol], given)
    return settings, extra


def _where(settings: Settings, name: str) -> str:
    source = settings.sources.get(name, "default")
    return f"{source}={getattr(settings, name)}" if source.startswith("--") else f"{name} ({source})"


def _apply_protocol(settings: Settings, protocol: Protocol, given: Collection[str]
                    ) -> tuple[Settings, dict[str, Any]]:
    """The protocol's values over everything but the options given on the command line (``given``)."""
    values: dict[str, Any] = {}
    sources = dict(settings.sources)
    departures: dict[str, Any] = {}
    for name, value in protocol.values.items():
        if name in given:  # given on the command line: it wins, and is noted
            if getattr(settings, name) != value:
                departures[name] = _jsonable(getattr(settings, name))
            continue
        values[name] = value
        sources[name] = f"--protocol {protocol.name}"
    extra: dict[str, Any] = {"protocol": protocol.name}
    if departures:
        extra["protocol_departures"] = departures
    return replace(settings, **values, sources=sources), extra


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def run_models(settings: Settings) -> tuple[str, ...]:
    """The models to run: ``--model``, or the template explainer's name for ``--backend template``."""
    models = tuple(m for m in configured_models(settings) if m)
    if not models:
        raise CommandError(no_model_reason(CLI_SPELLING))
    return models


def cmd_run(args: argparse.Namespace) -> int:
    """``robustexplain run``: plan, run, report and gate — the engine's :class:`Run`, as under pytest."""
    settings, extra = resolve_run_settings(args)
    if args.junitxml:  # the command's own report: not on the path of another
        outputs = {name: (getattr(settings, name), _where(settings, name)) for name in REPORT_OUTPUTS}
        outputs["junitxml"] = (Path(os.path.abspath(args.junitxml)), f"--junitxml={args.junitxml}")
        check_report_paths(outputs)
    models = run_models(settings)
    for what in ignored_settings(settings).values():
        print(f"{PROG}: note: ignoring {what}", file=sys.stderr)
    if extra.get("protocol_departures"):
        shown = ", ".join(f"{k}={_show(v)}" for k, v in extra["protocol_departures"].items())
        print(f"{PROG}: note: departing from the {extra['protocol']} protocol on the command line: {shown}",
              file=sys.stderr)
    run = Run(settings, say=lambda note: print(f"{PROG}: {note}", file=sys.stderr),
              extra_settings=extra, spelling=CLI_SPELLING)
    slices = _plan(run, models)
    if args.dry_run or settings.dry_run:
        return _dry_run(run, slices)
    run.announce_size(" (--dry-run shows the plan)")
    progress = ProgressBar.for_stream(sys.stderr, mode=settings.progress)
    sigterm = SigtermGuard()
    sigterm.arm()  # SIGTERM (a CI job cancelled, a timeout) stops the run as Ctrl-C does
    try:
        result = run.run_all(poll=progress)
    except SweepInterrupted as stop:
        progress.close()
        return _interrupted(args, settings, stop, run.cache_dir)
    except SweepFailed as failed:
        progress.close()
        print_error(args, CLI_SPELLING.text(str(failed.error)))
        _save_partial(args, settings, failed.partial, run.cache_dir, "stopped")
        return EXIT_BACKEND
    finally:
        sigterm.disarm()
        progress.close()
    return finish_run(args, run, result)


def _show(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _plan(run: Run, models: Sequence[str]) -> list[GatedSlice]:
    """The gated items of a bare ``@pytest.mark.robustness`` test, named as pytest names them."""
    gate = apply_marker(run.settings, {}, nodeid=NODEID)
    # Each model × each kind and the overall, as pytest expands a bare marked test (the same rule).
    refs = [run.expect(f"{NODEID}[{param}]", gate, param).ref for param in expand(models, gate)]
    return [run.plan_item(ref) for ref in refs]


def _dry_run(run: Run, slices: Sequence[GatedSlice]) -> int:
    design = design_lines(run.settings, run.extra_settings, run.dataset, len(slices[0].spec.cases))
    print("\n".join(run.dry_run_lines(by_model=True, design=design)))
    return EXIT_OK


def design_lines(settings: Settings, extra: Mapping[str, Any], dataset: Dataset, n_cases: int) -> list[str]:
    """What every model of a ``robustexplain run`` shares (one settings for all): protocol and grid."""
    protocol = f"protocol {extra['protocol']}: " if extra.get("protocol") else ""
    balanced = settings.design == "balanced"
    severities = 1 if balanced else len(settings.severities)
    per_model = n_cases * len(settings.perturbations) * severities * settings.repeats
    levels = (f"one of {len(settings.severities)} severities (balanced design)" if balanced
              else count_noun(len(settings.severities), "severity", "severities"))
    return [f"{protocol}dataset {dataset.name}: {count_noun(n_cases, 'user')} × "
            f"{count_noun(len(settings.perturbations), 'kind')} × {levels} × "
            f"{count_noun(settings.repeats, 'repeat')} = {per_model} pairs per model"]


def finish_run(args: argparse.Namespace, run: Run, result: RunResult) -> int:
    """Print the report and verdict line, write the JUnit file, and the exit code (``run``, ``merge``)."""
    done = run.finish(result)  # every report and each item's outcome, as under pytest
    assert done is not None
    errors = list(done.errors)
    print(render_terminal(done.report, width=terminal_width(), quiet=args.quiet))
    for outcome in done.outcomes:  # the rule pytest applies to each item, on the same decided slices
        if outcome.passed and outcome.warning is not None:
            print(f"{PROG}: warning: {outcome.warning}", file=sys.stderr)
    failed = done.failed
    written = list(done.written)
    if args.junitxml:
        junit_errors = _write_junit(run.settings, result, failed, Path(args.junitxml))
        errors += junit_errors
        written += [] if junit_errors else [f"JUnit {Path(args.junitxml).resolve()}"]
    if written:
        print(written_line(written))
    print(verdict_line(result, failed) if not result.shard else
          f"{PROG}: shard {result.shard['shard']} measured — robustexplain merge of every shard's JSON "
          "report decides the gate")

    if on_github_actions():  # the same annotations as under pytest, without a file to point at
        for line in github_annotations(result):
            print(line)
    for error in errors:  # after the verdict, which stands: a report that cannot be written is its own error
        print(f"{PROG}: error: {error}", file=sys.stderr)
    if failed:
        return EXIT_GATE_FAILED
    return EXIT_USAGE if errors else EXIT_OK


def verdict_line(result: RunResult, failed: Sequence[GateResult]) -> str:
    """The last line of ``run``: how many models passed every gate, and which items of which failed."""
    models = list(dict.fromkeys(g.model for g in result.gates))
    n = len(models)
    if not failed:
        return f"{PROG}: PASS — {n} of {count_noun(n, 'model')} passed the gate"
    by_model: dict[str, list[GateResult]] = {}
    for gate in failed:
        by_model.setdefault(gate.model, []).append(gate)
    parts = []
    for model, gates in by_model.items():
        outcomes = {g.verdict.outcome for g in gates}
        total = sum(g.model == model for g in result.gates)
        if len(gates) == total > 1 and len(outcomes) == 1:
            parts.append(f"{model} (all {total} items {outcomes.pop()})")
        else:
            parts.append(f"{model} ({', '.join(f'{g.slice} {g.verdict.outcome}' for g in gates)})")
    names = ", ".join(parts)
    return f"{PROG}: FAIL — {len(by_model)} of {count_noun(n, 'model')} failed the gate: {names}"


def _write_junit(settings: Settings, result: RunResult, failed: Sequence[GateResult],
                 path: Path) -> list[str]:
    nodeids = {g.nodeid for g in failed}
    error = write_report(lambda: write_junit(result, path, nodeids, confidence=1 - settings.alpha),
                         f"--junitxml={path}")
    return [error] if error else []


def _interrupted(args: argparse.Namespace, settings: Settings, stop: SweepInterrupted,
                 cache_dir: Path) -> int:
    """Ctrl-C or SIGTERM: write what finished as a partial JSON report and say how to resume."""
    print(file=sys.stderr)
    _save_partial(args, settings, stop.partial, cache_dir, stop.how)
    return EXIT_TERMINATED if stop.how != "interrupted" else EXIT_INTERRUPTED


def _save_partial(args: argparse.Namespace, settings: Settings, partial: RunResult, cache_dir: Path,
                  how: str) -> None:
    """What finished before the run was interrupted or stopped, as a partial report, and how to resume."""
    for line in save_partial(partial, how=how, json_path=settings.json, cache_dir=cache_dir):
        print(f"{PROG}: {line}", file=sys.stderr)
    print(f"{PROG}: {resume_hint(settings, cache_dir, args.argv)}", file=sys.stderr)


def resume_hint(settings: Settings, cache_dir: Path, argv: Sequence[str]) -> str:
    """How to pick up an interrupted run, given what the response cache kept."""
    return hint(backend=settings.backend, cache=settings.cache, cache_dir=cache_dir,
                command=[PROG, *(_redacted(arg) for arg in argv)], spelling=CLI_SPELLING)


def _redacted(arg: str) -> str:
    """A command-line word as the hint may print it: a URL's password (``--host http://u:pw@…`` or
    ``--host=…``) shown as ``***`` — the hint lands in CI logs, which outlive the secret's need to know."""
    flag, equals, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    return f"{flag}{equals}{redact_url(value)}" if "://" in value else arg


class ProgressBar:
    """``robustexplain: [####------] 120/500 pairs · 130/520 calls · 25 cached · 14.2/s · ETA 27s``.

    Called with the sweep's counters while it runs. On a terminal the line is redrawn in place; in a
    log (not a TTY) a plain line is printed every ``interval`` seconds, so long runs show they are alive
    without flooding the log.
    """

    BAR_WIDTH = 20

    def __init__(self, stream: TextIO, *, in_place: bool, enabled: bool = True, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._in_place = in_place
        self._enabled = enabled
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._shown = 0  # width of the line on screen (in-place mode)
        self.lines = 0  # lines printed so far

    @classmethod
    def for_stream(cls, stream: TextIO, *, mode: str) -> ProgressBar:
        """In place on a terminal, periodic lines otherwise; nothing with ``mode == "off"``."""
        tty = bool(getattr(stream, "isatty", lambda: False)())
        return cls(stream, in_place=tty, enabled=mode != "off", interval=0.2 if tty else 10.0)

    def __call__(self, counters: Counters) -> None:
        now = self._clock()
        if not self._enabled or (self._last is not None and now - self._last < self._interval):
            return
        if self._last is None and not self._in_place:
            self._last = now  # in a log, the first line comes after one interval: short runs stay quiet
            return
        self._last = now
        line = self.line(counters, now)
        if self._in_place:
            width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
            text = line[:width]
            self._stream.write("\r" + text.ljust(self._shown))
            self._shown = len(text)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
        self.lines += 1

    def line(self, counters: Counters, now: float | None = None) -> str:
        """The progress line for these counters."""
        return counters.progress_line(self._clock() if now is None else now, bar_width=self.BAR_WIDTH)

    def close(self) -> None:
        """Clear the in-place line (the report follows on stdout)."""
        if self._in_place and self._shown:
            self._stream.write("\r" + " " * self._shown + "\r")
            self._stream.flush()
            self._shown = 0
