"""Exception and warning types shared by every module.

``DataError`` and ``ConfigError`` carry a message that already names the file, record, field or option
at fault; the plugin turns them into ``pytest.UsageError`` without adding a traceback.
"""

from __future__ import annotations

import threading
import warnings
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class RobustExplainError(Exception):
    """Base class of every error this package raises on purpose."""


class DataError(RobustExplainError, ValueError):
    """A history, catalog or evaluation-case file (or object) is malformed.

    The message names the source (file), the record (line or index) and the field.
    """

    def __init__(self, message: str, *, source: str | None = None, record: str | None = None,
                 field: str | None = None) -> None:
        parts = [p for p in (source, record, f"field {field!r}" if field else None) if p]
        prefix = ", ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.source = source
        self.record = record
        self.field = field


class ConfigError(RobustExplainError, ValueError):
    """A setting has a bad value; the message names where the value came from."""


class BackendError(RobustExplainError):
    """The model backend cannot serve this run at all (unreachable, model missing, every call failed)."""


class CacheMissError(RobustExplainError):
    """Replay-only cache mode met a request that is not in the cache."""


class RobustExplainWarning(UserWarning):
    """Warnings from pytest-robustexplain (corrupt cache entries, fragile verdicts, flagged pairs...).

    A plain ``UserWarning`` rather than ``pytest.PytestWarning``, so that ``robustexplain run`` and the
    Python API never import pytest; filter it by name (``-W error::pytest_robustexplain.errors.
    RobustExplainWarning``)."""


class WarningQueue:
    """One run's warnings raised off the main thread, waiting for the main thread's next :meth:`flush`.
    A deque's append and popleft are thread-safe."""

    def __init__(self) -> None:
        self._waiting: deque[Warning] = deque()

    def put(self, warning: Warning) -> None:
        self._waiting.append(warning)

    def flush(self) -> None:
        """Raise, on the calling (main) thread, every warning waiting, in order."""
        while self._waiting:
            try:
                warning = self._waiting.popleft()
            except IndexError:  # pragma: no cover - another flush took the last one
                return
            warnings.warn(warning, stacklevel=2)


# Which run's queue a thread's warnings wait in: set by the sweep's loop thread for its callbacks and tasks,
# and inherited by what they start (``asyncio.to_thread`` copies the context). Per context, not per process:
# two runs in one process (pytester's inline runs) never say each other's warnings.
_ROUTE: ContextVar[WarningQueue | None] = ContextVar("robustexplain_warnings", default=None)


@contextmanager
def routed_to(queue: WarningQueue) -> Iterator[None]:
    """Within this block (and what it starts), off-main-thread warnings wait in ``queue``."""
    token = _ROUTE.set(queue)
    try:
        yield
    finally:
        _ROUTE.reset(token)


def route_to(queue: WarningQueue) -> None:
    """From here on in the current context (a thread's own, a task's copy), warnings wait in ``queue``."""
    _ROUTE.set(queue)


def warn(warning: Warning) -> None:
    """``warnings.warn`` now on the main thread; from any other thread (the sweep's event loop, a cache
    write on a worker thread) the warning waits in its run's queue for the main thread's next flush.

    Why: pytest records warnings phase by phase on the main thread's clock (``catch_warnings`` swaps
    process-wide state), so a sweep thread's warning landed in whichever test happened to be running,
    or, raised between two phases, on stderr and in no report at all — which one depended on timing.
    A thread no run routes (none of ours) warns where it is.
    """
    queue = None if threading.current_thread() is threading.main_thread() else _ROUTE.get()
    if queue is None:
        warnings.warn(warning, stacklevel=3)
    else:
        queue.put(warning)
