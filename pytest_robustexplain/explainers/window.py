"""How many requests one explainer keeps in flight to its server: at most ``concurrency``, fewer while the
server says it is limiting the rate.

A hosted endpoint or a gateway that allows fewer requests at once than ``concurrency`` answers the rest
429 (or 503 with ``Retry-After``). Waiting as told (``retry.RetryPolicy``) keeps those calls from failing,
but every call then comes back at once and the same share is refused again, round after round. The window
backs off as TCP does: it halves on a rate-limit answer — once per round, since a request sent before the
last cut says nothing about the window since — and grows by one after four times its size in answers, back
up to ``concurrency``: a growth that finds the limit again costs a refused request (and, with
``Retry-After``, a pause of every call), so the window probes slowly. Measured against a fake server that
refuses a third request at once (60 calls, 4 at a time, one retry each): 25–26 refusals and 9–11 failed
calls before, 5 and none now. A request waits for a place in the window; one that waits for a retry gives
its place up (``RemoteExplainer`` takes one per attempt).
"""

from __future__ import annotations

import asyncio
from collections import deque


class AdaptiveWindow:
    """At most ``limit`` requests in flight (first come, first served); ``limit`` moves between 1 and
    ``ceiling`` as the server answers (module docstring). Used on one event loop."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"a window holds at least one request, got {ceiling}")
        self.ceiling = self.limit = ceiling
        self.in_flight = 0
        self.cuts = 0  # times a rate-limit answer halved the window
        self.smallest = ceiling  # the smallest the window has been
        self._round = 0  # advances at each cut: a request's round says whether it was sent since
        self._answers = 0  # answers since the window last moved
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> int:
        """A place in the window (waiting for one, in turn); returns the round it was taken in."""
        if self.in_flight < self.limit and not any(not w.done() for w in self._waiters):
            self.in_flight += 1
            return self._round
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # given a place, then cancelled: hand it on
                self.release()
            raise
        return self._round

    def release(self) -> None:
        """Give a place back (an answer or an error came, or the request was cancelled)."""
        self.in_flight -= 1
        self._wake()

    def answered(self) -> None:
        """A request was answered (not refused for the rate): after four times the window's size in
        answers, it grows by one, up to the ceiling."""
        self._answers += 1
        if self.limit < self.ceiling and self._answers >= 4 * self.limit:
            self.limit += 1
            self._answers = 0
            self._wake()

    def limited(self, sent_in: int) -> None:
        """The server refused a request sent in round ``sent_in`` for the rate: halve the window, unless
        a request sent before the last cut brings the news (the window has been cut since)."""
        if sent_in != self._round:
            return
        self._round += 1
        self._answers = 0
        self.limit = max(1, self.limit // 2)
        self.smallest = min(self.smallest, self.limit)
        self.cuts += 1

    def _wake(self) -> None:
        # The place is counted for the waiter as it is woken, so no newcomer takes it first.
        for waiter in self._waiters:
            if self.in_flight >= self.limit:
                break
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
