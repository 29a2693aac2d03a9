"""The fake Ollama server: lifecycle, counters and the state the handler uses (the faults a test queues:
``faults.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import ssl
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from .batches import FakeBatches
from .calls import (
    BLOAT_BYTES,
    CHARS_PER_TOKEN,
    DEFAULT_NUM_CTX,
    KEEP_TOKENS,
    OPENAI_OPTIONS,
    ChatCall,
    Fault,
    HttpError,
    Ticket,
    prompt_tokens,
)
from .faults import FaultScript
from .handler import HTTPServer
from .models import ModelMeta, go_time, normalize
from .replies import MODES, REFUSAL_TEXT, compose_reply, thinking_text
from .verdicts import JUDGE_BEHAVIOURS, is_judge_prompt, judge_reply

ReplyFn = Callable[[str, dict[str, Any]], str]

FIXTURE_DOC = """A running :class:`~pytest_robustexplain.testing.FakeOllamaServer` for this test.

The server listens on ``127.0.0.1`` on a free port; point a client at ``fake_ollama.url`` (for example
``ollama.Client(host=fake_ollama.url)``, ``OLLAMA_HOST=fake_ollama.url`` or the OpenAI base URL
``fake_ollama.url + "/v1"``). It serves the model ``fake-model:latest`` with stable, deterministic
replies. Change its behaviour in the test: ``fake_ollama.mode = "fragile"`` (``"borderline"``,
``"history-blind"``),
``fake_ollama.latency = 0.05``, ``fake_ollama.capacity = 2``; script failures of the next chat
requests with ``fail_next(n, status=503)``, ``hang_next(n, seconds=...)``, ``drop_next(n)``,
``empty_next(n)``, ``refuse_next(n)``, ``bloat_next(n)`` or ``script(["fail", "ok", "drop"])``; and
inspect what your code sent with ``calls``, ``chat_calls``, ``requests``, ``in_flight``, ``peak_in_flight``
and ``peak_processing``. For other
models or thinking behaviour, build your own server with
``pytest_robustexplain.testing.fake_ollama_server(models=..., think_capable=True)``. The server is
stopped (and any hung request released) when the test ends.
"""


def _seconds(value: object, name: str) -> float:
    """A server setting in seconds: a number >= 0 (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"FakeOllamaServer {name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


class FakeOllamaServer(FaultScript):
    """A real HTTP server on 127.0.0.1 that behaves like Ollama, with scriptable faults and stats.

    Use it as a context manager (``with FakeOllamaServer() as server: ...``) or call :meth:`start` and
    :meth:`stop`. ``mode``, ``latency``, ``capacity`` and ``reply`` may be changed while it runs. ``port``
    0 (the default) takes a free port; ``robustexplain fake-server`` passes a fixed one.
    """

    def __init__(self, *, models: Iterable[str] = ("fake-model:latest",), mode: str = "stable",
                 latency: float = 0.0, capacity: int | None = None, think_capable: bool = False,
                 leak_thinking: bool = False, thinks_only: bool = False, version: str = "0.12.6",
                 reply: ReplyFn | None = None, port: int = 0, context_length: int = 8192,
                 openai_context: int | None = None, hidden_context: int | None = None,
                 judge: str | Mapping[str, str] = "strict",
                 tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None) -> None:
        given = (models,) if isinstance(models, str) else tuple(models)
        names = [normalize(m) for m in given if isinstance(m, str)]
        if not names or len(names) != len(given) or not all(n.split(":")[0] for n in names):
            raise ValueError(f"FakeOllamaServer models must be non-empty model names, got {list(given)!r}")
        if reply is not None and not callable(reply):
            raise ValueError(f"FakeOllamaServer reply must be a callable (prompt, options) -> str, "
                             f"got {reply!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"FakeOllamaServer port must be an integer 0-65535 (0: a free port), "
                             f"got {port!r}")
        self._port = port
        self._metas = {n: ModelMeta.of(n) for n in dict.fromkeys(names)}
        self._cond = threading.Condition()
        self._mode = "stable"
        self._latency = 0.0
        self._trickle = 0.0
        self._limit_seconds = 0  # rate_limit(): armed, opens at the next chat request
        self._limit_after = 0
        self._limit_steady = 0  # rate_limit(steady=True): the seconds of the window each request let in opens
        self._limit_until = 0.0
        self._most_at_once: int | None = None  # limit_concurrency(): chat requests let in at once
        self._busy_retry_after: int | None = None  # ... and the Retry-After of its 429
        self._capacity: int | None = None
        self.mode = mode
        # How judge prompts are answered (verdicts.py), whatever the mode: one behaviour, or one per model
        # name (judges that disagree: {"judge-a": "strict", "judge-b": "lenient"}; others strict).
        behaviours = judge.values() if isinstance(judge, Mapping) else [judge]
        if not all(b in JUDGE_BEHAVIOURS for b in behaviours):
            raise ValueError(f"FakeOllamaServer judge must be one of {', '.join(JUDGE_BEHAVIOURS)} (or a "
                             f"mapping model -> one), got {judge!r}")
        self.judge = judge
        self.latency = latency
        self.capacity = capacity
        self.think_capable = bool(think_capable)
        self.leak_thinking = bool(leak_thinking)
        self.thinks_only = bool(thinks_only)
        self.version = version
        self.reply = reply
        # Contexts in fake tokens (four characters each). ``context_length``: the model's trained context
        # (/api/show), which caps a request's num_ctx; a longer native prompt is truncated as Ollama does it,
        # silently, keeping its first KEEP_TOKENS and its tail. ``openai_context``: a llama.cpp-like slot
        # context on /v1 (listed in /v1/models meta.n_ctx), a longer prompt refused with llama.cpp's 400.
        self.context_length = context_length
        self.openai_context = openai_context
        # ``hidden_context``: a gateway or endpoint that truncates at a context it never states (num_ctx
        # dropped on the way, /v1 without meta): a longer prompt, on either API, truncated as Ollama does it.
        if hidden_context is not None and not (type(hidden_context) is int and hidden_context > KEEP_TOKENS):
            raise ValueError(f"FakeOllamaServer hidden_context must be an integer above {KEEP_TOKENS} tokens "
                             f"(None: none), got {hidden_context!r}")
        self.hidden_context = hidden_context
        # ``tls``: (certificate file, key file) — serve https with them (a client must trust the certificate,
        # e.g. through SSL_CERT_FILE); None serves plain http.
        self._tls = self._tls_context(tls)
        # The model chat replies name (their ``model``): None names the model asked, as Ollama does; a name
        # plays a gateway answering with another model (settable while the server runs).
        self.answer_as: str | None = None
        # A gateway's key taken in the path (``http://127.0.0.1:port/<path_key>/v1``): "" serves at the root;
        # a key serves only under it, and anything else is answered 401.
        self.path_key = ""
        self.batches = FakeBatches(self)  # provider batches (/v1/files, /v1/batches): their delays, failures
        self._faults: deque[Fault] = deque()
        self._loaded: dict[str, float] = {}
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._errors: list[str] = []
        self._stopping = threading.Event()
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._active = 0
        self._reset_counters()

    # ---- settings -------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """Reply model: one of :data:`MODES` (``stable``, ``borderline``, ``fragile``, ``history-blind``,
        ``gullible``, ``robust``)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"FakeOllamaServer mode must be one of {', '.join(MODES)}, got {value!r}")
        self._mode = value

    @property
    def latency(self) -> float:
        """Seconds each chat request spends being processed (while holding a capacity slot)."""
        return self._latency

    @latency.setter
    def latency(self, value: float) -> None:
        self._latency = _seconds(value, "latency")

    @property
    def trickle(self) -> float:
        """Seconds between 16-byte pieces of every non-streamed JSON reply (chat, the model list, a model's
        details…): a server that is slow as a whole while each read is quick. 0 (default): sent at once."""
        return self._trickle

    @trickle.setter
    def trickle(self, value: float) -> None:
        self._trickle = _seconds(value, "trickle")

    @property
    def capacity(self) -> int | None:
        """How many chat requests are processed at once (``None``: unlimited); the rest wait."""
        return self._capacity

    @capacity.setter
    def capacity(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"FakeOllamaServer capacity must be None or an integer >= 1, got {value!r}")
        with self._cond:
            self._capacity = value
            self._cond.notify_all()

    @property
    def models(self) -> tuple[str, ...]:
        """The served model names (normalised to ``name:tag``)."""
        return tuple(self._metas)

    def repull(self, name: str) -> str:
        """Serve a new version of model ``name`` under the same name (as after ``ollama pull`` of an
        updated tag): its digest changes; returns the new one."""
        meta = self._metas.get(normalize(name))
        if meta is None:
            raise ValueError(f"FakeOllamaServer does not serve {name!r} (it serves {list(self._metas)!r})")
        digest = hashlib.sha256(f"{meta.digest}:repulled".encode()).hexdigest()
        with self._cond:
            self._metas[meta.name] = replace(meta, digest=digest)
        return self._answering(self._metas[meta.name]).digest  # as served

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FakeOllamaServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError("FakeOllamaServer is already running")
        self._stopping = threading.Event()
        httpd = HTTPServer(self, self._port, self._tls)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                  name=f"fake-ollama-{httpd.server_address[1]}", daemon=True)
        self._httpd, self._thread = httpd, thread
        thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, release hung and queued requests, close connections; waits at most ``timeout``."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        deadline = time.monotonic() + timeout
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        httpd.shutdown()
        httpd.server_close()
        with self._cond:
            connections = dict(self._connections)
        for conn in connections:
            # Unblocks handler threads waiting on idle keep-alive connections.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for worker in [thread, *connections.values()]:
            worker.join(max(deadline - time.monotonic(), 0.0))
        self._httpd = self._thread = None

    def __enter__(self) -> FakeOllamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The port the server listens on (only while running)."""
        if self._httpd is None:
            raise RuntimeError("FakeOllamaServer is not running: call start() or use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls``) — the Ollama host; the OpenAI-compatible
        base URL is ``url + "/v1"``."""
        return f"{'https' if self._tls is not None else 'http'}://127.0.0.1:{self.port}"

    @staticmethod
    def _tls_context(tls: Any) -> ssl.SSLContext | None:
        if tls is None:
            return None
        if not isinstance(tls, (tuple, list)) or len(tls) != 2:
            raise ValueError(f"FakeOllamaServer tls must be (certificate file, key file), got {tls!r}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.fspath(tls[0]), os.fspath(tls[1]))
        return context

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"FakeOllamaServer({where}, mode={self.mode!r}, models={list(self._metas)!r})"

    # ---- stats ----------------------------------------------------------------------------------
    def _reset_counters(self) -> None:
        self._calls: Counter[str] = Counter()
        self._chat_calls = 0
        self._judge_calls = 0
        self._truncated = 0
        self._rate_limited = 0
        self._embedded_texts = 0
        self._requests: list[dict[str, Any]] = []
        self._in_flight = 0
        self._peak = 0
        self._peak_processing = 0
        self._connections_opened = 0

    def reset_stats(self) -> None:
        """Zero the counters and forget recorded requests (requests in flight stay counted)."""
        with self._cond:
            in_flight = self._in_flight
            self._reset_counters()
            self._in_flight = self._peak = in_flight
            self._peak_processing = self._active

    @property
    def calls(self) -> Counter[str]:
        """Requests received, by path (a copy)."""
        with self._cond:
            return Counter(self._calls)

    @property
    def chat_calls(self) -> int:
        """Chat requests received on ``/api/chat`` and ``/v1/chat/completions``."""
        with self._cond:
            return self._chat_calls

    @property
    def judge_calls(self) -> int:
        """Chat requests that were judge prompts (``verdicts.py``), counted in :attr:`chat_calls` too."""
        with self._cond:
            return self._judge_calls

    @property
    def embedded_texts(self) -> int:
        """Texts embedded on ``/api/embed`` and ``/v1/embeddings`` (requests by path are in :attr:`calls`)."""
        with self._cond:
            return self._embedded_texts

    @property
    def in_flight(self) -> int:
        """Chat requests received but not answered yet (queued for a slot or being processed)."""
        with self._cond:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The largest :attr:`in_flight` seen since start or :meth:`reset_stats`."""
        with self._cond:
            return self._peak

    @property
    def peak_processing(self) -> int:
        """The most chat requests processed at once (holding a capacity slot); never above ``capacity``."""
        with self._cond:
            return self._peak_processing

    @property
    def connections_opened(self) -> int:
        """TCP connections accepted; a client that keeps connections alive opens few."""
        with self._cond:
            return self._connections_opened

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request received: path, model, think, options, prompt, stream, messages, fault and
        the Authorization header it carried (None without)."""
        with self._cond:
            return [dict(r) for r in self._requests]

    @property
    def errors(self) -> list[str]:
        """Unexpected errors inside the server (tracebacks), e.g. a failing ``reply`` callable."""
        with self._cond:
            return list(self._errors)

    # ---- used by the handler --------------------------------------------------------------------
    def _count_call(self, path: str) -> None:
        with self._cond:
            self._calls[path] += 1

    def _count_embedding(self, texts: int) -> None:
        with self._cond:
            self._embedded_texts += texts

    def _record_error(self, text: str) -> None:
        with self._cond:
            self._errors.append(text)

    def _register_connection(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections[conn] = threading.current_thread()
            self._connections_opened += 1

    def _unregister_connection(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.pop(conn, None)
            self._cond.notify_all()

    def close_idle_connections(self, timeout: float = 10.0) -> None:
        """Close every client connection from the server's side, as a server's keep-alive idle timeout
        does, and return once their handlers have ended (a ``TimeoutError`` after ``timeout`` seconds)."""
        with self._cond:
            open_now = list(self._connections)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        with self._cond:
            if not self._cond.wait_for(lambda: not any(c in self._connections for c in open_now), timeout):
                raise TimeoutError("FakeOllamaServer.close_idle_connections: a handler did not end")

    def _model_metas(self) -> list[ModelMeta]:
        return [self._answering(meta) for meta in self._metas.values()]

    def _find_model(self, name: str) -> ModelMeta | None:
        meta = self._metas.get(normalize(name)) if name.strip() else None
        return self._answering(meta) if meta is not None else None

    def _answering(self, meta: ModelMeta) -> ModelMeta:
        """``meta`` with a digest that changes with whatever changes the answers — the reply mode, a reply
        callable, the thinking switches — as a real digest changes with the weights: ``fragile`` after
        ``stable`` under one name is another model, never a cache hit. The defaults keep the name's digest."""
        reply = self.reply
        replier = "" if reply is None else \
            f"{getattr(reply, '__module__', '')}.{getattr(reply, '__qualname__', '')}"
        answers = "|".join(part for part in (
            "" if self.mode == "stable" else f"mode={self.mode}", f"reply={replier}" if replier else "",
            "leak" if self.leak_thinking else "", "thinks-only" if self.thinks_only else "") if part)
        if not answers:
            return meta
        return replace(meta, digest=hashlib.sha256(f"{meta.digest}|{answers}".encode()).hexdigest())

    def _load(self, name: str) -> int:
        """Mark a model loaded (for /api/ps); the first use reports a longer load_duration."""
        with self._cond:
            first = name not in self._loaded
            self._loaded[name] = time.time()
        return 250_000_000 if first else 150_000

    def _loaded_entries(self) -> list[dict[str, Any]]:
        with self._cond:
            loaded = dict(self._loaded)
        out = []
        for name, used in loaded.items():
            meta = self._metas[name]
            entry = meta.tag_entry()
            del entry["modified_at"]
            # Ollama keeps a model loaded for 5 minutes after its last use.
            entry.update(expires_at=go_time(int((used + 300) * 1e9)), size_vram=meta.size,
                         context_length=4096)
            out.append(entry)
        return out

    def _begin_chat(self, path: str, body: dict[str, Any], api: str, authorization: str | None = None
                    ) -> Ticket:
        options = body.get("options") if api == "ollama" else {
            native: body[key] for key, native in OPENAI_OPTIONS.items() if body.get(key) is not None}
        messages = body.get("messages")
        prompt = ""
        if isinstance(messages, list):
            users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            prompt = users[-1] if users and isinstance(users[-1], str) else ""
        think = body.get("think") if api == "ollama" else body.get("reasoning_effort")
        with self._cond:
            fault = self._limited() or (self._faults.popleft() if self._faults else None)
            fault = None if fault is not None and fault.kind == "ok" else fault
            self._chat_calls += 1
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            self._requests.append({
                "path": path, "model": body.get("model"), "think": think,
                "options": dict(options) if isinstance(options, dict) else options, "prompt": prompt,
                "stream": body.get("stream"), "messages": messages, "fault": fault.kind if fault else None,
                "authorization": authorization,
            })
        return Ticket(fault)

    def _limited(self) -> Fault | None:
        """The rate limit's 429 for a request arriving now, or None (called holding the lock)."""
        if self._most_at_once is not None and self._in_flight >= self._most_at_once:
            self._rate_limited += 1
            return Fault("fail", status=429, retry_after=self._busy_retry_after)
        now = time.monotonic()
        if self._limit_seconds and self._limit_after:  # armed, not yet
            self._limit_after -= 1
        elif self._limit_seconds:  # armed: this request opens the window
            self._limit_until, self._limit_seconds = now + self._limit_seconds, 0
        # 50 ms of slack: a client's sleep may end a clock tick early; the window is what it was told.
        if now >= self._limit_until - 0.05:
            if self._limit_steady and not self._limit_after:  # a steady limit: this request opens the next
                self._limit_until = now + self._limit_steady
            return None
        self._rate_limited += 1
        return Fault("fail", status=429, retry_after=max(1, math.ceil(self._limit_until - now)))

    def _answered(self, ticket: Ticket) -> None:
        with self._cond:
            if not ticket.answered:
                ticket.answered = True
                self._in_flight -= 1

    def _acquire_slot(self) -> bool:
        with self._cond:
            while not self._stopping.is_set():
                if self._capacity is None or self._active < self._capacity:
                    self._active += 1
                    self._peak_processing = max(self._peak_processing, self._active)
                    return True
                self._cond.wait(0.1)
            return False

    def _release_slot(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def _fit_context(self, call: ChatCall) -> tuple[ChatCall, int]:
        """The call as the model sees it within its context, and the prompt tokens it read: Ollama's
        native API truncates a longer prompt silently (prompt_eval_count = the context); on /v1 with an
        ``openai_context`` a longer prompt is refused as llama.cpp refuses it; a ``hidden_context`` truncates
        on either API, silently, whatever was sent."""
        total = sum(prompt_tokens(m["content"]) for m in call.messages)
        hidden = self.hidden_context if self.hidden_context is not None else total
        if call.api == "openai":
            limit = self.openai_context
            if limit is not None and total > limit:
                message = (f"request ({total} tokens) exceeds the available context size ({limit} tokens), "
                           "try increasing it")
                raise HttpError(400, message, body={"error": {
                    "code": 400, "message": message, "type": "exceed_context_size_error",
                    "n_prompt_tokens": total, "n_ctx": limit}})
            return (call, total) if total <= hidden else self._truncate(call, total, hidden)
        requested = call.options.get("num_ctx")
        sent = int(requested) if isinstance(requested, (int, float)) and requested > 0 else DEFAULT_NUM_CTX
        limit = min(sent, self.context_length, hidden)
        return (call, total) if total <= limit else self._truncate(call, total, limit)

    def _truncate(self, call: ChatCall, total: int, limit: int) -> tuple[ChatCall, int]:
        """Ollama's silent truncation: the prompt's first KEEP_TOKENS and its tail, ``limit`` tokens read."""
        with self._cond:
            self._truncated += 1
        messages = [dict(m) for m in call.messages]
        last = messages[-1]
        others = total - prompt_tokens(last["content"])
        keep_tail = max(0, limit - KEEP_TOKENS - others) * CHARS_PER_TOKEN
        text = last["content"]
        last["content"] = text[:KEEP_TOKENS * CHARS_PER_TOKEN] + (text[-keep_tail:] if keep_tail else "")
        return replace(call, messages=messages), limit

    def named(self, asked: str) -> str:
        """The model a chat reply names for a request that asked for ``asked`` (:attr:`answer_as`)."""
        return self.answer_as if self.answer_as is not None else asked

    @property
    def truncated_prompts(self) -> int:
        """Chat requests whose prompt was longer than the context and was truncated (native, or either API
        under a ``hidden_context``)."""
        with self._cond:
            return self._truncated

    def _judge_for(self, model: str) -> str:
        if not isinstance(self.judge, Mapping):
            return self.judge
        return self.judge.get(model, self.judge.get(normalize(model), "strict"))

    def _reply_for(self, call: ChatCall, fault: Fault | None) -> tuple[str, str]:
        """(content, thinking) for a chat request, after faults, custom reply and thinking rules."""
        prompt = call.prompt
        if fault is not None and fault.kind == "empty":
            content = ""
        elif fault is not None and fault.kind == "refuse":
            content = REFUSAL_TEXT
        elif fault is not None and fault.kind == "bloat":
            content = "lol " * (BLOAT_BYTES // 4)
        elif is_judge_prompt(prompt):
            with self._cond:
                self._judge_calls += 1
            content = judge_reply(prompt, self._judge_for(call.model))
        elif self.reply is not None:
            content = self._custom_reply(prompt, call.options)
        else:
            content = compose_reply(prompt, call.options, mode=self.mode)
        thinks = self.think_capable and call.think is not False
        thinking = thinking_text(prompt) if thinks or self.leak_thinking else ""
        if self.leak_thinking:
            content = f"<think>\n{thinking}\n</think>\n\n{content}"
        if self.thinks_only:  # think=False ignored, the token limit spent before any answer
            return "", thinking_text(prompt)
        return content, thinking if thinks else ""

    def _custom_reply(self, prompt: str, options: dict[str, Any]) -> str:
        assert self.reply is not None
        try:
            text = self.reply(prompt, dict(options))
        except Exception as exc:
            self._record_error("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            raise HttpError(500, f"reply callable failed: {exc!r}") from None
        if not isinstance(text, str):
            self._record_error(f"reply callable returned {type(text).__name__}, not str")
            raise HttpError(500, f"reply callable returned {type(text).__name__}, not str")
        return text


@contextlib.contextmanager
def fake_ollama_server(**kwargs: Any) -> Iterator[FakeOllamaServer]:
    """A started :class:`FakeOllamaServer` (keyword arguments as its constructor), stopped on exit."""
    with FakeOllamaServer(**kwargs) as server:
        yield server
