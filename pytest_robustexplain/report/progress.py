"""A live progress line while test items wait for their slice of the sweep.

On a terminal the line is rewritten in place; in CI logs (not a TTY) a plain line is printed every
``interval`` seconds, so long sweeps show they are alive without flooding the log — but only between
rows of pytest's progress dots, never in the middle of one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any


class Progress:
    """Prints ``robustexplain: 120/500 calls · 25 cached · 14.2/s · ETA 27s``."""

    def __init__(self, line: Callable[[], str], *, writer: Any, in_place: bool, enabled: bool,
                 interval: float = 10.0, capture: Any = None) -> None:
        self.line = line
        self._capture = capture
        self._writer = writer
        self._in_place = in_place
        self._enabled = enabled
        self._interval = interval
        self._last = 0.0
        self._shown = False

    @classmethod
    def for_reporter(cls, line: Callable[[], str], reporter: Any, *, mode: str, quiet: bool, worker: bool,
                     capture: Any = None) -> Progress:
        """For pytest's terminal reporter (None: no terminal), the ``progress`` setting's ``mode``: "auto"
        shows it except in an xdist worker, whose output nobody sees live."""
        tty = bool(reporter is not None and getattr(reporter, "isatty", False))
        enabled = reporter is not None and not quiet and (mode == "on" or (mode == "auto" and not worker))
        return cls(line, writer=reporter, in_place=tty and mode != "off", enabled=enabled,
                   interval=0.5 if tty else 10.0, capture=capture)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._shown and self._in_place:
            with self._uncaptured():
                self._writer.write("\r" + " " * 79 + "\r", flush=True)

    def tick(self) -> None:
        now = time.monotonic()
        if not self._enabled or now - self._last < self._interval:
            return
        if not self._in_place and self._mid_line():
            return  # a log line here would split pytest's row of dots: wait until the row ends
        self._last = now
        line = self.line()
        with self._uncaptured():
            if self._in_place:
                self._writer.write("\r" + line.ljust(79)[:79], flush=True)
            else:
                self._writer.write_line(line)
        self._shown = True

    def _mid_line(self) -> bool:
        """Whether the terminal writer is in the middle of a line (a row of dots or a test id)."""
        writer = getattr(self._writer, "_tw", None)
        return bool(getattr(writer, "width_of_current_line", 0))

    def _uncaptured(self) -> contextlib.AbstractContextManager[None]:
        """Write past pytest's output capture (as live logging does), not into the item's captured
        output: the line is for the person watching the run, not part of the test's report."""
        capture = self._capture
        if capture is None:
            return contextlib.nullcontext()
        manager: contextlib.AbstractContextManager[None] = capture.global_and_fixture_disabled()
        return manager


