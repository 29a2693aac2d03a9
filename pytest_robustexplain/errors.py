"""Exception and warning types shared by every module.

``DataError`` and ``ConfigError`` carry a message that already names the file, record, field or option
at fault; the plugin turns them into ``pytest.UsageError`` without adding a traceback.
"""

from __future__ import annotations

import threading
import warnings
from collections import deque


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


# Warnings raised off the main thread, waiting for it (see ``warn``). Process-wide like the warnings
# machinery itself; a deque's append and popleft are thread-safe.
_DEFERRED: deque[Warning] = deque()


def warn(warning: Warning) -> None:
    """``warnings.warn`` now on the main thread; from any other thread (the sweep's event loop, a cache
    write on a worker thread) the warning waits for the main thread's next :func:`flush_warnings`.

    Why: pytest records warnings phase by phase on the main thread's clock (``catch_warnings`` swaps
    process-wide state), so a sweep thread's warning landed in whichever test happened to be running,
    or, raised between two phases, on stderr and in no report at all — which one depended on timing.
    """
    if threading.current_thread() is threading.main_thread():
        warnings.warn(warning, stacklevel=3)
    else:
        _DEFERRED.append(warning)


def flush_warnings() -> None:
    """Raise, on the calling (main) thread, every warning other threads deferred, in order."""
    while _DEFERRED:
        try:
            warning = _DEFERRED.popleft()
        except IndexError:  # pragma: no cover - another flush took the last one
            return
        warnings.warn(warning, stacklevel=2)
