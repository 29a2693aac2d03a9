"""One retry policy for every HTTP backend: bounded attempts, exponential backoff with full jitter.

What is retried: overload and gateway statuses (429, 500, 502, 503, 504), read/write/pool timeouts and
dropped connections (every ``httpx.TransportError`` except a refused or failed connect). What is not:
client errors such as 400 and 404 (retrying cannot fix them) and refused connections (nothing is
listening; the backends turn that into one clear BackendError instead of a minute of backoff).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urljoin

from ..sanitize import visible
from ..wording import count_noun

T = TypeVar("T")

RETRY_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})

Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[int, BaseException, float], None]


class RetryExhaustedError(Exception):
    """Every attempt failed with a retryable error; ``last`` is the final one."""

    def __init__(self, attempts: int, last: BaseException, *, told: float = 0.0, told_limit: float = 0.0
                 ) -> None:
        # A call the server paced gives up only past the total wait it states (issue 61): said with it.
        paced = (f"; before them it waited {told:.0f} s in all as the server asked (Retry-After), the most "
                 f"a call waits so ({told_limit:g} s)" if told else "")
        super().__init__(f"{count_noun(attempts, 'attempt')} failed; last error: "
                         f"{describe_error(last)}{paced}")
        self.attempts = attempts
        self.last = last


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (httpx.HTTPStatusError, ollama.ResponseError), if any."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None) if response is not None else None
    if status is None:
        status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and status > 0 else None


def retry_after_of(exc: BaseException) -> float | None:
    """Seconds the server asked the client to wait (``Retry-After``: delay-seconds or an HTTP date), from
    an error that carries it: an httpx status error's response, or the Ollama client's ``retry_after``."""
    raw = getattr(exc, "retry_after", None)
    if raw is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        raw = headers.get("retry-after") if headers is not None and hasattr(headers, "get") else None
    if not isinstance(raw, str) or not raw.strip():
        return None
    text = raw.strip()
    if text.isdigit():
        return float(text)

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _is_httpx(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is an ``httpx.<name>`` (or a subclass), by the class's name and module rather than
    its identity: code that re-imports httpx (pytester restoring ``sys.modules`` after an in-process run,
    importlib.reload) holds exceptions of another copy of the class, which ``isinstance`` would miss —
    and a refused connection would then be retried and described as an unknown failure. Nor does it
    import httpx: a run whose replies are all cached calls no client."""
    return any(cls.__name__ == name and cls.__module__.split(".")[0] == "httpx" for cls in type(exc).__mro__)


def is_connect_failure(exc: BaseException) -> bool:
    """True when no connection could be made at all (refused, no route, unknown host)."""
    # ollama's client turns httpx.ConnectError into a bare builtin ConnectionError.
    return (_is_httpx(exc, "ConnectError") or isinstance(exc, ConnectionRefusedError)
            or type(exc) is ConnectionError)


def connect_cause(exc: BaseException) -> str:
    """Why no connection was made, in words: a host name that does not resolve is not a refusal."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return _cause_of(seen)


class Redirected(Exception):
    """A 3xx reply, never followed. A 301, 302 or 303 turns the POST into a GET, so the server at the new
    address answers "not found" or "method not allowed" and the user is sent to pull a model they have;
    a 307 or 308 keeps the request but lets another server answer while the report names the first. So
    the run stops with one sentence naming both addresses (:meth:`advice`). (The status is
    ``redirect_status``, not ``status_code``: :func:`status_of` must not read it as an error status.)"""

    def __init__(self, method: str, url: str, status: int, location: str) -> None:
        self.method, self.url, self.redirect_status = method, url, status
        self.location = urljoin(url, location) if location else ""  # a relative Location, made absolute
        super().__init__(f"{method} {url} was redirected (HTTP {status}) to {self.location or 'nowhere'}")

    def advice(self, host: str) -> str:
        """The sentence for a run against ``host``: what happened and the host to set instead."""
        asked = self.url[len(host):] if self.url.startswith(host) else ""  # the path below the host
        target = visible(self.location) or "no address (the reply has no Location)"
        said = (f"{host} redirected {self.method} {asked or self.url} (HTTP {self.redirect_status}) to "
                f"{target}; redirects are not followed (a 301 or 302 turns the request into a GET, and the "
                "report would name a server that did not answer)")
        if self.location and asked and self.location.endswith(asked):
            return f"{said}: set --robustexplain-host to {visible(self.location[:-len(asked)])}"
        return f"{said}: set --robustexplain-host to the address that answers"


def _cause_of(seen: list[BaseException]) -> str:
    text = " ".join(str(e) for e in seen).lower()
    if any(isinstance(e, socket.gaierror) for e in seen) or any(
            marker in text for marker in ("name or service not known", "nodename nor servname",
                                          "name resolution", "getaddrinfo failed")):
        return "host name not found"
    if any(isinstance(e, ConnectionRefusedError) for e in seen) or "refused" in text:
        return "connection refused"
    if "unreachable" in text or "no route" in text:
        return "network unreachable"
    return "no connection"


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed request is worth another attempt."""
    status = status_of(exc)
    if status is not None:
        return status in RETRY_STATUSES
    if is_connect_failure(exc):
        return False
    # TransportError covers read/write/pool/connect timeouts, resets and servers that hang up mid-reply.
    return _is_httpx(exc, "TransportError") or isinstance(exc, (TimeoutError, asyncio.TimeoutError,
                                                                 ConnectionError))


async def within_deadline(request: Awaitable[T], deadline: float | None) -> T:
    """``request`` bounded as a whole by ``deadline`` seconds (None: unbounded): httpx's timeouts bound
    each read only, so a server trickling a byte at a time would otherwise hold a call forever. Every
    backend's request — preflight, warm-up, generation, embeddings — ends within it."""
    try:
        return await (request if deadline is None else asyncio.wait_for(request, deadline))
    except asyncio.TimeoutError:
        raise TimeoutError(f"no complete reply within {deadline:g} s (timeout + connect-timeout)") from None


def describe_error(exc: BaseException) -> str:
    """A one-line description: type plus message, or the HTTP status and the server's reason."""
    status = status_of(exc)
    message = visible(str(exc).strip()) or type(exc).__name__  # a server's error body: outside text
    if status is not None and str(status) not in message:
        return f"HTTP {status}: {message}"
    return message if type(exc).__name__ in message else f"{type(exc).__name__}: {message}"


@dataclass
class RetryPolicy:
    """Bounded attempts with exponential backoff and full jitter.

    The delay before retry ``k`` (1-based) is uniform in ``[0, min(max_delay, base_delay * 2**(k-1))]``
    (AWS "full jitter"), which spreads simultaneous retries from many concurrent requests apart instead
    of hammering a recovering server in lock-step — unless the server said how long to wait
    (``Retry-After`` on a 429 or 503). A reply that says when to come back is the server pacing the run, not
    a failure: the call waits as told (up to ``max_retry_after``, plus a jitter of at most ``base_delay`` so
    the waiting calls do not return in one burst) without using one of its attempts, up to
    ``max_told_wait`` seconds of such waits in all a call (then they count as attempts, and a call that runs
    out of them says how long it waited); and every other call of the policy — one explainer's, sharing its
    server — waits until then too before its next request, so the whole run slows to the server's pace
    instead of some calls exhausting their retries. The jitter is seeded so runs are reproducible;
    ``sleep`` is injectable so tests do not wait.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0  # the longest Retry-After honoured (a longer one is cut to it)
    max_told_wait: float = 600.0  # seconds in all a server's Retry-After may make one call wait, not attempts
    seed: int | None = 0
    sleep: Sleep = asyncio.sleep
    retryable: Callable[[BaseException], bool] = is_retryable
    _rng: random.Random = field(init=False, repr=False)
    _not_before: float = field(default=0.0, init=False, repr=False)  # time.monotonic() the server asked for

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must not be negative")
        self._rng = random.Random(self.seed)

    def backoff(self, retry: int) -> float:
        """The (jittered) delay before the ``retry``-th retry, 1-based."""
        cap = min(self.max_delay, self.base_delay * 2 ** (retry - 1))
        return self._rng.uniform(0.0, cap)

    async def run(self, attempt: Callable[[], Awaitable[T]], *, on_retry: OnRetry | None = None) -> T:
        """Await ``attempt()`` until it succeeds, a non-retryable error is raised, or attempts run out.

        Non-retryable errors propagate unchanged; exhausting the attempts raises RetryExhaustedError.
        """
        number, waited, told_just_now = 1, 0.0, False
        while True:
            if not told_just_now:  # a call that has just waited as told is already past the pause
                await self._wait_as_told()
            try:
                return await attempt()
            except Exception as exc:
                if not self.retryable(exc):
                    raise
                told = retry_after_of(exc)
                told_just_now = told is not None and waited < self.max_told_wait
                if told is not None and told_just_now:
                    delay = min(told, self.max_retry_after)  # the server pacing the run: not an attempt
                    # Each wait counts as a second at least (Retry-After's unit): "0" for ever still ends.
                    waited += max(delay, 1.0)
                    self._not_before = max(self._not_before, time.monotonic() + delay)
                    delay += self._rng.uniform(0.0, self.base_delay)
                elif number == self.max_attempts:
                    raise RetryExhaustedError(number, exc, told=waited,
                                              told_limit=self.max_told_wait) from exc
                else:
                    delay = self.backoff(number)
                    number += 1
                if on_retry is not None:
                    on_retry(number, exc, delay)
                await self.sleep(delay)

    async def _wait_as_told(self) -> None:
        """Before a call's request: wait out what the server last asked any call of this policy to wait."""
        left = self._not_before - time.monotonic()
        if left > 0:
            await self.sleep(left)
