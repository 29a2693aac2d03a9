"""A fake Ollama server for tests: a real HTTP server on loopback that answers like Ollama does.

:class:`FakeOllamaServer` listens on ``127.0.0.1`` on a free port and implements the parts of the Ollama
API an explainer uses — ``GET /`` and ``/api/version``, ``/api/tags``, ``/api/ps``, ``POST /api/show``,
``POST /api/chat`` (plain JSON or streamed NDJSON), ``POST /api/embed`` — and the OpenAI-compatible
``GET /v1/models``, ``GET /v1/models/{model}``, ``POST /v1/chat/completions`` (plain JSON or server-sent
events) and ``POST /v1/embeddings``. Embeddings are hashed bags of words (:mod:`.embeddings`): similar
texts get similar vectors, every served model embeds, and ``embedded_texts`` counts them. The
official ``ollama`` client and any httpx-based OpenAI client talk to it exactly as to a real server:
same response shapes, same error bodies and status codes (404 ``model "X" not found, try pulling it
first``), HTTP/1.1 keep-alive, chunked streaming. Only the standard library is used.

Besides answering, the server lets a test script what happens to the next chat requests (both chat
endpoints, streamed or not), one fault per request in arrival order: ``fail_next`` (HTTP 503 "server
busy" or 500 "llama runner process has terminated", with Ollama's error bodies), ``hang_next`` (hold the
request without answering — 600 s by default, longer than any client timeout — then close the connection;
:meth:`~FakeOllamaServer.stop` releases it at once), ``drop_next`` (close the connection without a
response), ``empty_next`` (empty content), ``refuse_next`` (:data:`REFUSAL_TEXT`), ``bloat_next`` (20 MB
of content, past ``num_predict``: a server that ignores every limit) or ``script([...])`` for a mix;
``fail_next(n, status=429, retry_after=2)`` adds a ``Retry-After`` header, ``rate_limit(seconds)``
answers 429 with the seconds left to every chat request inside a window, and ``limit_concurrency(n)``
answers 429 to a chat request that arrives while ``n`` are in flight. Faults are taken before the model
is looked up, so a scripted fault also hits a request for a missing model. ``capacity`` bounds how many
chat requests are processed at once (like ``OLLAMA_NUM_PARALLEL``; the others queue) and ``latency`` is
the processing time of each, spent while holding a slot; hangs and failures do not take a slot.

The server measures what the client did: ``calls`` (requests by path), ``chat_calls``, ``requests``
(what each chat request asked for), ``in_flight`` and ``peak_in_flight`` (chat requests received and
not yet answered — a request counts as answered just before its last byte is written, so a client
that keeps at most N requests in flight is never seen with more), ``peak_processing`` (never above
``capacity``), ``connections_opened`` (keep-alive at work) and ``errors`` (unexpected server-side
errors, e.g. a failing ``reply`` callable).

Error bodies follow Ollama: chat on a missing model is 404 ``model "X" not found, try pulling it
first``; ``/api/show`` on a missing model is 404 ``model 'X' not found`` (Ollama words it so);
``think=true`` on a model without the thinking capability is 400 ``"X" does not support thinking``;
``/v1`` errors are OpenAI-shaped (``{"error": {"message", "type", ...}}``); unknown paths get gin's
``404 page not found``.

The reply model is described in :mod:`pytest_robustexplain.testing.replies`.
"""

from __future__ import annotations

from .calls import DEFAULT_HANG_SECONDS, FAULTS
from .prompts import HistoryEntry, ParsedPrompt, parse_prompt
from .replies import MODES, REFUSAL_TEXT, compose_reply
from .server import FIXTURE_DOC, FakeOllamaServer, fake_ollama_server

__all__ = [
    "DEFAULT_HANG_SECONDS",
    "FAULTS",
    "FIXTURE_DOC",
    "MODES",
    "REFUSAL_TEXT",
    "FakeOllamaServer",
    "HistoryEntry",
    "ParsedPrompt",
    "compose_reply",
    "fake_ollama_server",
    "parse_prompt",
]
