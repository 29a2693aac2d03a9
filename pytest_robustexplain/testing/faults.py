"""The faults a test queues on the fake server, one per coming chat request (``fail_next``, ``hang_next``,
``script([...])``, …), and the gateway limits it can switch on (``rate_limit``, ``limit_concurrency``): the
part of :class:`~.server.FakeOllamaServer`'s API that scripts what goes wrong."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from .calls import DEFAULT_HANG_SECONDS, FAULTS, Fault


def non_negative_count(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"FakeOllamaServer.{what}: n must be an integer >= 0, got {n!r}")
    return n


class FaultScript:
    """The fault-scripting methods; the server holds the queue and the limits they set (under ``_cond``)."""

    _cond: threading.Condition
    _faults: deque[Fault]
    _limit_seconds: int
    _limit_after: int
    _limit_steady: int
    _most_at_once: int | None
    _busy_retry_after: int | None
    _rate_limited: int

    def fail_next(self, n: int = 1, status: int = 503, retry_after: int | None = None) -> None:
        """The next ``n`` chat requests get HTTP ``status`` (503 "server busy" or 500 runner crash), with a
        ``Retry-After: retry_after`` header when given."""
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(
                f"FakeOllamaServer.fail_next: status must be an HTTP error code 400-599, got {status!r}")
        if retry_after is not None:
            non_negative_count(retry_after, "fail_next(retry_after)")
        fault = Fault("fail", status=status, retry_after=retry_after)
        self._queue(fault, non_negative_count(n, "fail_next"))

    def rate_limit(self, seconds: int = 1, *, after: int = 0, steady: bool = False) -> None:
        """A gateway's rate limit: the chat request after the next ``after`` ones opens a window of
        ``seconds``; it and every chat request that arrives before the window ends get 429 with
        ``Retry-After`` (the seconds left, rounded up). A client that waits as told gets through; one that
        retries sooner is refused again. ``steady``: the limit holds for good — each request let through
        opens the next window (one chat request per ``seconds``, as a hosted endpoint's quota)."""
        with self._cond:
            self._limit_seconds = non_negative_count(seconds, "rate_limit")
            self._limit_after = non_negative_count(after, "rate_limit(after)")
            self._limit_steady = self._limit_seconds if steady else 0

    def limit_concurrency(self, most: int | None, *, retry_after: int | None = None) -> None:
        """A hosted endpoint's limit on requests at once: a chat request that arrives while ``most`` are in
        flight gets 429 ("rate limit exceeded"), with ``Retry-After: retry_after`` when given; None lifts
        the limit. Counted in :attr:`rate_limited`."""
        with self._cond:
            self._most_at_once = None if most is None else non_negative_count(most, "limit_concurrency")
            self._busy_retry_after = (None if retry_after is None
                                      else non_negative_count(retry_after, "limit_concurrency(retry_after)"))

    @property
    def rate_limited(self) -> int:
        """How many chat requests the rate limit refused (429)."""
        with self._cond:
            return self._rate_limited

    def redirect_next(self, n: int = 1, *, to: str, status: int = 301) -> None:
        """The next ``n`` chat requests are redirected: HTTP ``status`` (301, 302, 303, 307 or 308) with
        ``Location: <to><the request's path>`` — a proxy or a moved server (``to`` is a base URL such as
        ``http://127.0.0.1:9999``)."""
        if status not in (301, 302, 303, 307, 308):
            raise ValueError("FakeOllamaServer.redirect_next: status must be a redirect (301, 302, 303, "
                             f"307, 308), got {status!r}")
        if not isinstance(to, str) or not to.startswith(("http://", "https://", "/")):
            raise ValueError(f"FakeOllamaServer.redirect_next: to must be a URL or an absolute path, "
                             f"got {to!r}")
        self._queue(Fault("redirect", status=status, location=to.rstrip("/")),
                    non_negative_count(n, "redirect_next"))

    def hang_next(self, n: int = 1, seconds: float = DEFAULT_HANG_SECONDS) -> None:
        """The next ``n`` chat requests get no answer for ``seconds``, then their connection is closed."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"FakeOllamaServer.hang_next: seconds must be >= 0, got {seconds!r}")
        self._queue(Fault("hang", seconds=float(seconds)), non_negative_count(n, "hang_next"))

    def drop_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests have their connection closed without any response."""
        self._queue(Fault("drop"), non_negative_count(n, "drop_next"))

    def empty_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests are answered normally but with empty content."""
        self._queue(Fault("empty"), non_negative_count(n, "empty_next"))

    def refuse_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests are answered with :data:`REFUSAL_TEXT`."""
        self._queue(Fault("refuse"), non_negative_count(n, "refuse_next"))

    def bloat_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests are answered with 20 MB of content, past ``num_predict`` (a server
        or gateway that ignores every limit)."""
        self._queue(Fault("bloat"), non_negative_count(n, "bloat_next"))

    def bomb_next(self, n: int = 1, *, inflated: int = 0) -> None:
        """The next ``n`` chat requests are answered with a gzip body of about 20 KB that inflates to 20 MB,
        or to ``inflated`` bytes (1 GiB: a body of about 1 MiB) — a compression bomb: a client must refuse it
        by what it inflates to, not by what came."""
        self._queue(Fault("bomb", inflated=inflated), non_negative_count(n, "bomb_next"))

    def extra_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests are answered twice on their connection: the reply, then the same
        reply again, unasked (a broken proxy or server). A client that reads it as the next request's
        reply answers that request with this one's text."""
        self._queue(Fault("extra"), non_negative_count(n, "extra_next"))

    def trailers_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests get their (non-streamed) reply chunked, with a trailer section
        after the last chunk (``Checksum: abc123``), as HTTP/1.1 allows."""
        self._queue(Fault("trailers"), non_negative_count(n, "trailers_next"))

    def reshape_next(self, n: int = 1, **fields: Any) -> None:
        """The next ``n`` chat requests are answered normally, then the reply's JSON has ``fields`` set — a
        server whose reply fields have other types or ranges than its protocol's. Keys are dotted paths with
        ``__`` for the dot (``message__content=7``, ``eval_count=-1``, ``usage=[]``,
        ``choices__0__message__content=[...]``); values are written as JSON (``float("inf")`` as
        ``Infinity``, as Python's encoder does)."""
        if not fields:
            raise ValueError("FakeOllamaServer.reshape_next: name at least one field to set")
        fault = Fault("reshape", fields=tuple((k.replace("__", "."), v) for k, v in fields.items()))
        self._queue(fault, non_negative_count(n, "reshape_next"))

    def compress_next(self, n: int = 1, encoding: str = "gzip") -> None:
        """The next ``n`` chat replies come compressed with ``encoding`` although the request asked for none
        (a proxy that compresses regardless): ``gzip`` and ``deflate`` are compressed; any other name is only
        announced in ``Content-Encoding``, the body left as it is."""
        self._queue(Fault("compress", encoding=encoding), non_negative_count(n, "compress_next"))

    def script(self, faults: Iterable[str]) -> None:
        """Queue faults by name, one per coming chat request, in order.

        Names: ``ok`` (normal answer), ``fail`` (503), ``fail500`` (500), ``hang`` (default seconds),
        ``drop``, ``empty``, ``refuse``, ``bloat``, ``extra``, ``trailers``, ``bomb``. All fault methods
        append to the same queue.
        """
        if isinstance(faults, str):
            raise ValueError("FakeOllamaServer.script takes a list of fault names, not a single string")
        queued = []
        for i, name in enumerate(faults):
            if name not in FAULTS:
                raise ValueError(f"FakeOllamaServer.script: item {i} is {name!r}; "
                                 f"valid fault names: {', '.join(FAULTS)}")
            queued.append(Fault(name, status=500 if name == "fail500" else 503))
        with self._cond:
            self._faults.extend(queued)

    def clear_faults(self) -> None:
        """Forget every scripted fault that has not been used yet."""
        with self._cond:
            self._faults.clear()

    @property
    def pending_faults(self) -> list[str]:
        """Names of the scripted faults not used yet, in order."""
        with self._cond:
            return [f.kind for f in self._faults]

    def _queue(self, fault: Fault, n: int) -> None:
        with self._cond:
            self._faults.extend([fault] * n)
