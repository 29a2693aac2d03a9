"""Stopping a run from outside: SIGTERM as Ctrl-C, a stop file for xdist workers, how to resume, and what a
stopped :meth:`~.run.Run.run_all` raises (:class:`SweepInterrupted`, :class:`SweepFailed`: the partial run).

CI runners and process managers stop a job with SIGTERM (GitHub Actions sends SIGINT, then SIGTERM, on
cancel; ``timeout`` and systemd send SIGTERM alone). Python's default is to die at once: no partial report,
no resume hint, and the sweep's calls lost. While a run is armed, SIGTERM raises :class:`Terminated` — a
KeyboardInterrupt — in the main thread instead, so both doors stop it exactly as they stop Ctrl-C.

Under xdist a signal to the controller reaches no worker (they are its children, not its process group's
foreground), and xdist's own teardown lets them run for seconds more. So the controller names a stop file
for every worker (``workerinput``), creates it when it is stopped, and each worker's wait for its results
looks for it between two polls and stops as if it had been signalled itself.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, RobustExplainError
from ..report.json_report import write_json
from ..settings import Spelling

if TYPE_CHECKING:
    from ..results import RunResult


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :meth:`Run.run_all`: ``partial`` is the run up to that moment.

    A KeyboardInterrupt subclass, so code that does not know about it still stops as on Ctrl-C. The
    finished pairs' explanations are already in the response cache; rerunning resumes from them.
    """

    def __init__(self, partial: RunResult, how: str = "interrupted") -> None:
        super().__init__(how)
        self.partial = partial
        self.how = how  # "interrupted" (Ctrl-C) or "terminated (SIGTERM)"


class SweepFailed(BackendError):
    """The backend broke off during :meth:`Run.run_all` (a server killed mid-run, every call failing):
    the error, and in ``partial`` the run up to that moment, as for Ctrl-C (finished pairs are cached)."""

    def __init__(self, error: RobustExplainError, partial: RunResult) -> None:
        super().__init__(str(error))
        self.error = error
        self.partial = partial


class Terminated(KeyboardInterrupt):
    """SIGTERM (or the controller's stop file, in an xdist worker), raised like Ctrl-C."""


class SigtermGuard:
    """SIGTERM raises :class:`Terminated` in the main thread between :meth:`arm` and :meth:`disarm`.

    Armed only from the main thread (where Python runs signal handlers) and only over the default action:
    a host program that handles SIGTERM itself keeps its handler. ``on_signal`` runs first, in the handler
    (the xdist controller creates its workers' stop file there)."""

    def __init__(self, on_signal: Callable[[], None] | None = None) -> None:
        self._on_signal = on_signal or (lambda: None)
        self._previous: Any = None
        self.armed = False
        self.fired = False

    def arm(self) -> None:
        if self.armed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self.armed = True

    def disarm(self) -> None:
        if self.armed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self.armed = False

    def _handle(self, signum: int, frame: object) -> None:
        if self.fired:  # a second SIGTERM while stopping: the default action, at once
            self.disarm()
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.fired = True
        self._on_signal()
        raise Terminated


class StopFile:
    """A file whose existence tells xdist workers to stop (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def request(self) -> None:
        """Ask every worker to stop (called in a signal handler: one small write, errors ignored)."""
        with contextlib.suppress(OSError):
            self.path.touch()

    def check(self) -> None:
        """Raise :class:`Terminated` when the stop was requested."""
        if self.path.exists():
            raise Terminated


def stop_how(exc: BaseException | None) -> str:
    """How the run was stopped, in the words the messages use."""
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def resume_hint(*, backend: str, cache: str, cache_dir: Path, command: Sequence[str] = (),
                spelling: Spelling) -> str:
    """How to pick up an interrupted run, given what the response cache kept (``command``: the rerun's
    words, already redacted; none under pytest, whose command line the user has)."""
    again = f": {shlex.join(command)}" if command else ""
    if backend == "template":
        return f"the template explainer is instant and not cached; rerun to start over{again}"
    if cache in ("off", "read"):
        return (f"the response cache was not written ({spelling.flag('cache')} {cache}): a rerun starts "
                f"over. Use {spelling.flag('cache')} read-write to make runs resumable{again}")
    if cache == "write":
        return (f"the finished explanations are in {cache_dir}; rerun with {spelling.flag('cache')} "
                "read-write to resume from them instead of regenerating them")
    return (f"the finished explanations are in the response cache ({cache_dir}); rerun the same command "
            f"to resume (cache hits are free){again}")


PARTIAL_REPORT = "partial-report.json"  # where a stopped run's report goes without a JSON report path


def save_partial(partial: RunResult, *, how: str, json_path: Path | None, cache_dir: Path) -> list[str]:
    """Write what finished before the run was stopped as a partial JSON report (to ``json_path``, else
    :data:`PARTIAL_REPORT` in the cache directory); the lines that say so, for either door to print."""
    planned = partial.settings.get("pairs_planned")
    of = f" of {planned}" if planned else ""
    calls = partial.calls
    lines = [f"{how} — {len(partial.pairs)}{of} pairs finished ({calls.get('made', 0)} model calls made, "
             f"{calls.get('cached', 0)} from the cache)"]  # controls included, as in the planned count
    target = json_path or cache_dir / PARTIAL_REPORT
    try:
        write_json(partial, target)
        lines.append(f"partial report (\"partial\": true in its settings) written to {target}")
    except OSError as exc:
        lines.append(f"could not write the partial report to {target}: {exc.strerror or exc}")
    return lines


class Stopper:
    """What stops one run from outside (see the module docstring): SIGTERM, and in an xdist worker the
    controller's stop file (``watch``); an xdist controller names ``stop_file`` for its workers and
    creates it when SIGTERM comes."""

    def __init__(self, *, stop_file: StopFile | None = None, watch: StopFile | None = None) -> None:
        self.stop_file, self.watch = stop_file, watch
        self.guard = SigtermGuard(on_signal=stop_file.request if stop_file is not None else None)

    def arm(self) -> None:
        self.guard.arm()

    def disarm(self) -> None:
        self.guard.disarm()

    def remove_stop_file(self) -> None:
        """After the workers are gone (not at the session's end: they may not have looked yet)."""
        if self.stop_file is not None:
            with contextlib.suppress(OSError):
                self.stop_file.path.unlink(missing_ok=True)

    def check(self) -> None:
        """Between two polls of a wait: raise :class:`Terminated` when the controller asked to stop."""
        if self.watch is not None:
            self.watch.check()

    @property
    def how(self) -> str:
        """How the run was stopped, if it was: by SIGTERM (here or to the controller), else Ctrl-C."""
        asked = self.watch is not None and self.watch.path.exists()
        return stop_how(Terminated() if self.guard.fired or asked else None)
