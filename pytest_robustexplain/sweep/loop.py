"""The background thread that owns the sweep's event loop: started once, handed callbacks and coroutines
from other threads, stopped with a last coroutine (cancel what is left, close the explainers). Everything it
runs — its callbacks, its tasks and the worker threads they start — warns into the run's
:class:`~pytest_robustexplain.errors.WarningQueue`, which the main thread flushes."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..errors import WarningQueue, route_to

T = TypeVar("T")


class LoopThread:
    """One event loop on one daemon thread. ``loop`` is None until :meth:`start`."""

    def __init__(self, warnings: WarningQueue, name: str = "robustexplain-sweep") -> None:
        self._name = name
        self.warnings = warnings
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._context: contextvars.Context | None = None  # the loop thread's, warnings routed

    def start(self, first: Callable[[asyncio.AbstractEventLoop], None],
              last: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the loop (once): ``first(loop)`` runs on it before anything else, ``last()`` after it was
        stopped. Returns when the loop is running."""
        if self._thread is not None:
            return
        ready = threading.Event()

        def run() -> None:
            route_to(self.warnings)
            self._context = contextvars.copy_context()
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            first(loop)
            ready.set()
            loop.run_forever()
            loop.run_until_complete(last())
            loop.close()

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()
        ready.wait()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop thread (from any thread)."""
        assert self.loop is not None
        # In the loop thread's context, not the caller's: the tasks the callback starts copy it.
        self.loop.call_soon_threadsafe(callback, *args, context=self._context)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the loop from another thread and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(self._routed(coro), self.loop).result()

    async def _routed(self, coro: Coroutine[Any, Any, T]) -> T:
        route_to(self.warnings)  # in this task's own context (a copy of the caller's), and what it starts
        return await coro

    def close(self, timeout: float = 30) -> None:
        """Stop the loop (its ``last`` coroutine runs) and wait for the thread."""
        if self.loop is None or self._thread is None:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=timeout)
        self._thread = None
