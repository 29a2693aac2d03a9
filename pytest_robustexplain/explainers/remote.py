"""What the HTTP backends (Ollama, OpenAI-compatible) share.

- One client and one request window per running event loop, created lazily inside that loop: an httpx or
  ollama client is bound to the loop it first ran in, and the plugin may preflight in one loop and run
  the sweep in another (a background thread).
- Bounded concurrency: never more than ``concurrency`` generation requests in flight per loop, fewer while
  the server answers that it limits the rate (:class:`~.window.AdaptiveWindow`).
- Retries through :class:`~.retry.RetryPolicy`; a request that exhausts them becomes an Explanation with
  ``failure="error"``, never text.
- Fatal conditions (nothing listening, model missing, credentials rejected) raise one BackendError,
  remembered so later calls fail at once instead of each rediscovering it.
- A warm-up request before the first generation (so the model is loaded before latencies are measured),
  counted separately. It is deferred to the first real request so a run served entirely from the
  response cache makes no model call at all.
"""

from __future__ import annotations

import asyncio
import base64
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..backends import GenerationOptions
from ..data import EvalCase, Item, UserHistory
from ..errors import BackendError, RobustExplainWarning, warn
from ..sanitize import redact_path, split_credentials
from .base import FAILURE_CONTEXT, FAILURE_ERROR, INFERRED_CONTEXT, Explanation, ModelInfo
from .context import ContextOverflow, ContextWindow, PromptSizer, overflow_of, overflow_sentence
from .prompt import PromptTemplate, check_prompt_sizes
from .reply import AnsweredAs, finish_reply, reply_text, token_count
from .retry import (
    Redirected,
    RetryExhaustedError,
    RetryPolicy,
    connect_cause,
    describe_error,
    is_connect_failure,
    retry_after_of,
    status_of,
    within_deadline,
)
from .window import AdaptiveWindow

T = TypeVar("T")

WARMUP_PROMPT = "Reply with the single word: ready."
# The warm-up also measures the tokenizer: it is sent after the start of the first real prompt (this many
# characters, a few hundred tokens), and its reported prompt count gives the characters per token of this
# model on this kind of text — what a prompt longer than the context is told by (context.py).
CALIBRATION_CHARS = 1000


def is_warmup_prompt(prompt: str) -> bool:
    """Whether a request's prompt is the warm-up's (which ends with :data:`WARMUP_PROMPT`)."""
    return prompt.endswith(WARMUP_PROMPT)


# After a refused connection, one quick second look: a server that is just (re)starting gets a chance,
# a dead one costs a quarter of a second, not a minute of backoff.
RECHECK_DELAY_S = 0.25


def http_options(url: str) -> dict[str, Any]:
    """httpx client options for ``url``, the same for every client a backend builds: redirects refused
    (:class:`~.retry.Redirected`: the hook sees every 3xx before httpx could follow it), and no certificate
    store for a plain-http server — building one cost ~30 ms per client (an SSL context and the system's
    certificates), for nothing, since a plain-http server is never left for another. Every reply is read
    through :class:`~.transport.BoundedTransport`: decoded as it streams, refused past the reply bound.

    Every server gets a connection per request, never a pooled one: httpx keeps whatever a server sent past
    a reply in its parser and hands it to the next request on that connection as *its* reply (a server
    that sent one reply twice had 17 of 20 answers belong to other prompts, over http and https alike), and
    nothing public shows those bytes. A local connection costs a fraction of a millisecond; over https a
    handshake costs about 4 ms of CPU and a round trip or two over a network — against model calls of
    seconds."""
    import httpx  # lazy: loads httpx

    from .transport import BoundedTransport  # lazy: loads httpx

    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0),
                                     verify=not url.startswith("http://"))
    return {"follow_redirects": False, "event_hooks": {"response": [_refuse_redirect]},
            "transport": BoundedTransport(inner)}


async def _refuse_redirect(response: Any) -> None:
    if 300 <= response.status_code < 400:
        raise Redirected(response.request.method, str(response.request.url), response.status_code,
                         response.headers.get("location", ""))


@dataclass
class BackendStats:
    """Request counters of one explainer (all event loops together)."""

    requests: int = 0  # generation HTTP attempts, retries included, warm-up excluded
    retries: int = 0
    warmup_calls: int = 0
    errors: int = 0  # explanations that ended with failure "error"

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "retries": self.retries, "warmup_calls": self.warmup_calls,
                "errors": self.errors}


@dataclass
class Reply:
    """The backend-neutral part of a model response."""

    text: Any  # str or None once checked (RemoteExplainer.checked): a server may send anything
    prompt_tokens: Any = None  # int or None once checked
    completion_tokens: Any = None
    stop_reason: str | None = None  # done_reason / finish_reason as the server said it
    retries: int = 0  # attempts after the first before this reply came
    thought: bool = False  # the reply carried reasoning (Ollama's message.thinking, OpenAI's reasoning)
    # How many of the prompt's tokens the server took from its prompt cache (OpenAI's ``cached_tokens``,
    # llama.cpp's ``timings.cache_n``), None when it does not say.
    reused_tokens: int | None = None
    model: Any = None  # the model the reply names (``model``), as the server sent it

    @property
    def whole_count(self) -> bool:
        """Whether the reply's prompt count is the whole prompt's: a server that says what it reused counts
        all of it (context.PromptSizer reads a count below any tokenizer's as a truncation only then)."""
        return self.reused_tokens is not None


@dataclass
class _LoopState:
    client: Any
    window: AdaptiveWindow  # the requests in flight, fewer while the server limits the rate
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class RemoteExplainer(ABC):
    """Base class of the HTTP backends; subclasses provide the client, the request and the checks."""

    backend: str = "remote"
    is_llm = True

    def __init__(self, model: str, *, host: str, options: GenerationOptions, prompt: PromptTemplate | None,
                 retry: RetryPolicy | None) -> None:
        if not model or not model.strip():
            raise BackendError(f"{self.backend}: the model name is empty")
        if options.concurrency < 1:
            raise BackendError(f"{self.backend}: concurrency must be at least 1, got {options.concurrency}")
        self.model = model.strip()
        # Credentials in the URL go to the Authorization header only; ``url`` (without them) is where the
        # requests go, and ``host`` — the same with a key in its path shown as *** — is what every record,
        # cache file and message shows (sanitize.split_credentials, redact_path).
        self.url, self._credentials = split_credentials(host)
        self.host = redact_path(self.url)
        self.options = options
        self.prompt = prompt if prompt is not None else PromptTemplate()
        self.retry = retry if retry is not None else RetryPolicy(max_attempts=options.max_attempts,
                                                                 seed=options.seed)
        self.stats = BackendStats()
        self.info: ModelInfo | None = None
        self._fatal: BackendError | None = None
        self._warmed = False
        self.warmup_error: str | None = None  # why the warm-up failed, when it failed non-fatally
        self._said_counts = False  # token counts that are not counts were warned of (once an explainer)
        self._said_window = False  # the request window backed off for the rate was said (once an explainer)
        self._said_context = False  # a context inferred from the counts was said (once an explainer)
        self.answered = AnsweredAs(model, host)  # the models the replies named (reply.py)
        # The model's context as the server states it (None: it does not say), and the prompt sizer that
        # learns the tokenizer's characters per token from the replies (context.py).
        self.context: ContextWindow | None = None
        self.sizer = PromptSizer()
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary())

    def checked(self, reply: Reply) -> Reply:
        """``reply`` with its fields of the types they promise, whatever the server sent: content as text
        (a list of text parts joined; a number or an object is a MalformedReply, so the call fails saying
        so), token counts finite non-negative integers — any other value is unknown (None), said once."""
        text = reply_text(reply.text)
        prompt, completion = token_count(reply.prompt_tokens), token_count(reply.completion_tokens)
        seen = (("prompt", reply.prompt_tokens, prompt), ("completion", reply.completion_tokens, completion))
        bad = [f"{what} {value!r}" for what, value, kept in seen if value is not None and kept is None]
        if bad and not self._said_counts:
            self._said_counts = True
            warn(RobustExplainWarning(
                f"{self.model} on {self.host} reports token counts that are not counts ({', '.join(bad)} "
                "tokens): they are recorded as unknown, and the reports count no tokens for those calls "
                "(said once)"))
        self.answered.heard(reply.model, self.info)
        return replace(reply, text=text, prompt_tokens=prompt, completion_tokens=completion)

    def _rate_limited(self, window: AdaptiveWindow, sent_in: int, status: int | None) -> None:
        """The server refused a request for its rate: the window backs off, and the first time it does the
        person running this hears why the run slows down (said once)."""
        window.limited(sent_in)
        if window.cuts == 1 and not self._said_window:
            self._said_window = True
            warn(RobustExplainWarning(
                f"{self.model} on {self.host} refuses requests for its rate (HTTP {status or 429}): requests "
                f"in flight cut from {window.ceiling} to {window.limit}, grown back slowly; a lower "
                "concurrency avoids the refused requests (said once)"))

    def _basic_auth(self) -> dict[str, str]:
        """The Authorization header of the URL's ``user:password@`` (empty without)."""
        if self._credentials is None:
            return {}
        token = base64.b64encode(":".join(self._credentials).encode("utf-8")).decode("ascii")
        return {"Authorization": f"Basic {token}"}

    # The generation options, read where the requests are built.
    @property
    def temperature(self) -> float:
        return self.options.temperature

    @property
    def seed(self) -> int:
        return self.options.seed

    @property
    def num_predict(self) -> int:
        return self.options.num_predict

    @property
    def concurrency(self) -> int:
        return self.options.concurrency

    @property
    def connect_timeout(self) -> float:
        return self.options.connect_timeout

    @property
    def read_timeout(self) -> float:
        return self.options.read_timeout

    # ------------------------------------------------------------------ subclass hooks
    @abstractmethod
    def _make_client(self) -> Any:
        """A new client for the running event loop."""

    @abstractmethod
    async def _close_client(self, client: Any) -> None: ...

    @abstractmethod
    async def _request(self, client: Any, prompt: str, *, seed: int, num_predict: int) -> Reply:
        """One generation request (no retries); raises on transport or HTTP errors."""

    @abstractmethod
    async def _inspect(self, client: Any) -> ModelInfo:
        """Check the server and the model and describe them; raise BackendError when unusable."""

    @abstractmethod
    def _fatal_for(self, exc: BaseException) -> BackendError | None:
        """The BackendError a request error means for the whole run, or None for a per-pair failure."""

    @abstractmethod
    def identity_options(self) -> dict[str, Any]:
        """The generation options that determine a reply (part of the cache key)."""

    def _context_window(self, info: ModelInfo) -> ContextWindow | None:
        """The context the server states for the model (None when it does not say)."""
        return None

    def use_model_info(self, info: ModelInfo) -> None:
        """Adopt model facts recorded earlier (offline cache replay) instead of asking the server."""
        self.info = info
        recorded = info.extra.get("context")
        if isinstance(recorded, dict) and isinstance(recorded.get("tokens"), int):
            self.context = ContextWindow(recorded["tokens"], str(recorded.get("source", "recorded")))

    def _adopt(self, info: ModelInfo) -> ModelInfo:
        """The preflight's facts, with the context window found in them recorded for the reports."""
        self.info = info
        self.context = self._context_window(info)
        if self.context is not None:
            info.extra["context"] = self.context.to_dict()
        return info

    # ------------------------------------------------------------------ protocol
    async def preflight(self) -> ModelInfo:
        """Check the server and the model once; raise one clear BackendError when they are unusable."""
        if self._fatal is not None:
            raise self._fatal
        # A client of its own, closed at once: preflight often runs in a short-lived event loop (the
        # plugin's start-up) that is gone before the sweep's loop sends the first generation request.
        client = self._make_client()
        what = f"{self.backend} preflight against {self.host} failed"
        try:
            info = await self.retry.run(lambda: self._with_recheck(
                lambda: self._within_deadline(self._inspect(client))))
        except BackendError as exc:
            raise self._remember(exc) from None
        except RetryExhaustedError as exc:
            raise self._remember(BackendError(f"{what}: {exc}")) from None
        except Exception as exc:
            raise self._as_fatal(exc, what) from None
        finally:
            await self._close_client(client)
        return self._adopt(info)

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        """Generate one explanation; transport trouble after every retry becomes failure "error"."""
        return await self.complete(self.prompt.render(history, item), seed=seed)

    async def complete(self, prompt: str, *, seed: int, purpose: str = "") -> Explanation:
        """The model's reply to ``prompt`` as it is (the faithfulness judge's calls; :meth:`explain` renders
        its prompt and comes here): retried, bounded, read for cut replies and truncated prompts alike.
        ``purpose`` only names the call for the response cache (:meth:`completion_identity`)."""
        state = self._state()
        await self._ensure_ready(state, sample=prompt)
        started: list[float] = []  # when the first attempt had its place: a latency leaves the queue out
        try:
            reply = await self._generate(state, prompt, seed=seed, num_predict=self.num_predict,
                                         started=started)
        except BackendError:
            raise
        except ContextOverflow as exc:  # this prompt only: other users' prompts may fit
            return Explanation(text="", model=self.model, latency_s=_since(started), failure=FAILURE_CONTEXT,
                               detail=exc.detail)
        except Exception as exc:  # RetryExhaustedError or a non-retryable per-request error
            self.stats.errors += 1
            retries = exc.attempts - 1 if isinstance(exc, RetryExhaustedError) else 0
            return Explanation(text="", model=self.model, latency_s=_since(started), failure=FAILURE_ERROR,
                               detail=describe_error(exc), retries=retries)
        return self.explanation_of(prompt, reply, _since(started))

    def explanation_of(self, prompt: str, reply: Reply, latency: float) -> Explanation:
        """The explanation a checked ``reply`` to ``prompt`` is: read for empty, refused, cut and truncated
        replies alike, whether it came from a call or a batch (``explainers/batch.py``)."""
        explanation = finish_reply(reply.text, model=self.model, latency_s=latency,
                                   prompt_tokens=reply.prompt_tokens,
                                   completion_tokens=reply.completion_tokens, stop_reason=reply.stop_reason,
                                   thought=reply.thought, reused_tokens=reply.reused_tokens)
        if reply.retries:
            explanation = replace(explanation, retries=reply.retries)
        if self.sizer.truncated(prompt, reply.prompt_tokens, self.context, whole=reply.whole_count):
            window = self.sizer.window(self.context)
            assert window is not None  # truncated() says False without a context
            detail = overflow_sentence(self.sizer.estimate(prompt), window.tokens, estimated=True,
                                       read=reply.prompt_tokens)
            explanation = replace(explanation, truncated=True, detail=explanation.detail or detail)
        self._say_inferred_context()
        return explanation

    def _say_inferred_context(self) -> None:
        """The first time the counts show a context smaller than the one stated (or any, when none is), the
        person running it hears it once, and the model's record carries it for the reports."""
        inferred = self.sizer.inferred
        if inferred is None or self._said_context or self.sizer.window(self.context) is not inferred:
            return
        self._said_context = True
        if self.info is not None:
            self.info.extra[INFERRED_CONTEXT] = inferred.to_dict()
        stated = (f"less than the {self.context.tokens:,} tokens it states" if self.context is not None
                  else "a context it does not state")
        warn(RobustExplainWarning(
            f"{self.model} on {self.host} truncates prompts at about {inferred.tokens:,} tokens, {stated}: "
            f"{self.sizer.evidence}. Replies from here on whose prompt did not fit are flagged and their "
            "gates not measured (a gateway that drops num_ctx, or an endpoint that ignores it, does this): "
            "lower max-history, or give the server a larger context (said once)"))

    async def oversized(self, cases: Sequence[EvalCase]) -> tuple[ContextWindow | None, list[tuple[str, int]],
                                                                  bool]:
        """Before any call: the context, the (user id, tokens) of the cases whose own prompt may not fit it,
        and whether those tokens were counted by the server's tokenizer (else estimated, erring high), so
        the person running it hears it before the calls are spent. Exact counts also teach the sizer.

        A prompt longer than :data:`~.prompt.MAX_PROMPT_CHARS` is a DataError here, before any call: no
        model's context holds it, and rendering, sending and caching it for every pair costs gigabytes."""
        prompts = [(c.user_id, self.prompt.render(c.history, c.item)) for c in cases]
        check_prompt_sizes(prompts, cases)
        if self.context is None:
            return None, [], False
        exact = await self._count_tokens([p for _, p in prompts])
        if exact is not None:
            for (_, prompt), n in zip(prompts, exact, strict=True):
                self.sizer.calibrate(len(prompt), n, None)
        counts = exact if exact is not None else [self.sizer.cautious_estimate(p) for _, p in prompts]
        over = [(u, n) for (u, _), n in zip(prompts, counts, strict=True) if n >= self.context.tokens]
        return self.context, over, exact is not None

    async def _count_tokens(self, texts: Sequence[str]) -> list[int] | None:
        """Each text's tokens by the server's own tokenizer, where it has one to ask (None otherwise)."""
        return None

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        """Everything that determines the reply; host-independent so a cache moves between machines."""
        info = self.info
        return {
            "backend": self.backend,
            "model": info.name if info is not None else self.model,
            "digest": info.digest if info is not None else None,
            "prompt": self.prompt.render(history, item),
            "options": self.identity_options(),
            "seed": seed,
            "repeat": repeat,
        }

    def completion_identity(self, prompt: str, *, seed: int, purpose: str) -> dict[str, Any]:
        """What determines :meth:`complete`'s reply, for the response cache; ``purpose`` ("judge") keeps
        such entries apart from explanations."""
        info = self.info
        return {"backend": self.backend, "model": info.name if info is not None else self.model,
                "digest": info.digest if info is not None else None, "prompt": prompt,
                "options": self.identity_options(), "seed": seed, "purpose": purpose}

    async def current_digest(self) -> str | None:
        """The model's digest as the server lists it now — a model re-pulled mid-run shows here — or None
        when nothing was generated since preflight (nothing could mix two versions) or the server cannot
        say (gone, slow, the model removed): a check at the end of a run never fails it."""
        if self.stats.requests == 0 or self.info is None:
            return None
        client = self._make_client()
        try:
            return (await self._within_deadline(self._inspect(client))).digest
        except Exception:
            return None
        finally:
            await self._close_client(client)

    async def aclose(self) -> None:
        """Close the client of the running loop; clients of finished loops died with them."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - aclose is always awaited
            return
        state = self._states.pop(loop, None)
        self._states.clear()
        if state is not None:
            await self._close_client(state.client)

    # ------------------------------------------------------------------ internals
    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            state = _LoopState(client=self._make_client(), window=AdaptiveWindow(self.concurrency))
            self._states[loop] = state
        return state

    def _as_fatal(self, exc: BaseException, what: str) -> BackendError:
        """The remembered BackendError for an error that makes the run impossible."""
        return self._remember(self._fatal_for(exc) or BackendError(f"{what}: {describe_error(exc)}"))

    def _remember(self, error: BackendError) -> BackendError:
        if self._fatal is None:
            self._fatal = error
        return self._fatal

    async def _ensure_ready(self, state: _LoopState, *, sample: str = "") -> None:
        if self._fatal is not None:
            raise self._fatal
        if self.info is not None and self._warmed:
            return
        async with state.lock:
            if self._fatal is not None:  # found while we waited for the lock
                raise self._fatal
            if self.info is None:
                await self.preflight()
            if not self._warmed:
                await self._warm_up(state, sample)

    async def _warm_up(self, state: _LoopState, sample: str = "") -> None:
        head = sample[:CALIBRATION_CHARS]
        prompt = f"{head}\n\n{WARMUP_PROMPT}" if head else WARMUP_PROMPT

        async def attempt() -> Reply:
            self.stats.warmup_calls += 1
            request = self._request(state.client, prompt, seed=self.seed, num_predict=8)
            return self.checked(await self._within_deadline(request))

        try:
            reply = await self.retry.run(lambda: self._with_recheck(attempt))
            if head:
                self.sizer.calibrate(len(prompt), reply.prompt_tokens, self.context, whole=reply.whole_count)
        except BackendError:
            raise
        except Exception as exc:
            fatal = self._fatal_for(exc)
            if fatal is not None:  # model missing, credentials rejected: nothing will ever work
                raise self._remember(fatal) from None
            # Server trouble (overload, a crashed runner): the real requests retry on their own and
            # their failures are counted per pair, so the warm-up does not decide the run for them.
            self.warmup_error = describe_error(exc)
        self._warmed = True

    def _deadline(self) -> float | None:
        """Seconds one attempt may take in all (connect and every read): httpx's read timeout bounds each
        read only, so a server trickling a byte at a time would otherwise hold a call forever."""
        connect, read = getattr(self, "connect_timeout", None), getattr(self, "read_timeout", None)
        return None if read is None else float(read) + float(connect or 0.0)

    async def _within_deadline(self, request: Awaitable[T]) -> T:
        """``request`` under :meth:`_deadline` (:func:`~.retry.within_deadline`)."""
        return await within_deadline(request, self._deadline())

    async def _generate(self, state: _LoopState, prompt: str, *, seed: int, num_predict: int,
                        started: list[float]) -> Reply:
        async def attempt() -> Reply:
            # A place in the window for each attempt: a call waiting to retry gives its place up, so a
            # window the server's rate limits cut holds only requests that are on their way.
            sent_in = await state.window.acquire()
            try:
                if self._fatal is not None:  # found by a request that held a place before us
                    raise self._fatal
                if not started:
                    started.append(time.perf_counter())
                self.stats.requests += 1
                request = self._request(state.client, prompt, seed=seed, num_predict=num_predict)
                reply = self.checked(await self._within_deadline(request))
            except Exception as exc:
                if status_of(exc) == 429 or retry_after_of(exc) is not None:
                    self._rate_limited(state.window, sent_in, status_of(exc))
                raise
            finally:
                state.window.release()
            state.window.answered()
            return reply

        retried = 0

        def on_retry(_n: int, _exc: BaseException, _delay: float) -> None:
            nonlocal retried
            self.stats.retries += 1
            retried += 1

        try:
            reply = await self.retry.run(lambda: self._with_recheck(attempt), on_retry=on_retry)
            return replace(reply, retries=retried) if retried else reply
        except RetryExhaustedError:
            raise
        except BackendError:
            raise
        except Exception as exc:
            overflow = overflow_of(status_of(exc), _error_body(exc))
            if overflow is not None:  # a prompt longer than the context: this call's failure, said plainly
                raise overflow from None
            fatal = self._fatal_for(exc)
            if fatal is not None:
                raise self._remember(fatal) from None
            raise

    async def _with_recheck(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()``; after a refused connection look once more, then give up (fatal)."""
        try:
            return await call()
        except Exception as exc:
            if not is_connect_failure(exc):
                raise
        await asyncio.sleep(RECHECK_DELAY_S)
        try:
            return await call()
        except Exception as exc:
            if is_connect_failure(exc):
                raise self._remember(self._unreachable(connect_cause(exc))) from None
            raise

    @abstractmethod
    def _unreachable(self, cause: str = "connection refused") -> BackendError:
        """The error for a server no connection can be made to (``cause``: refused, host name not found…)."""

    def _status_fatal(self, exc: BaseException) -> BackendError | None:
        """Errors no retry can fix, so the run stops loudly instead of scoring pairs 0: credentials
        rejected, or a request the server refuses as malformed (e.g. a prompt longer than its context)."""
        if isinstance(exc, Redirected):
            return BackendError(exc.advice(self.host))
        status = status_of(exc)
        if status in (401, 403):
            return BackendError(f"{self.host} rejected the request (HTTP {status}: {describe_error(exc)}); "
                                f"check the API key / credentials for the {self.backend} backend.")
        if status in (400, 413, 422):
            return BackendError(f"{self.host} refused a request as invalid (HTTP {status}: "
                                f"{describe_error(exc)}); check the model's context size (num_ctx / the "
                                "server's context) against the prompt length, and the generation options.")
        return None


def _error_body(exc: BaseException) -> str:
    """The server's error text an HTTP error carries (httpx's response body, ollama's ``error``)."""
    response = getattr(exc, "response", None)
    try:
        text = getattr(response, "text", None)
    except Exception:  # a streamed response whose body was not read
        text = None
    if isinstance(text, str) and text:
        return text
    error = getattr(exc, "error", None)
    return error if isinstance(error, str) else str(exc)


def _since(started: Sequence[float]) -> float:
    """Seconds since the first attempt had its place in the window (0 when none got one)."""
    return time.perf_counter() - started[0] if started else 0.0
