"""The opt-in fifth metric's input: an embedding vector for every explanation text.

:class:`EmbeddingExplainer` wraps the run's explainer (behind its response cache): each successful
explanation comes back with ``embedding`` set to its vector, a failed one with ``()`` (nothing to embed;
it scores 0 like every metric). The sweep hands both vectors of a pair to the scorer, which adds the
cosine as the metric ``embedding``.

Vectors come from one embedding model on one host: Ollama's ``POST /api/embed`` (``{"model", "input":
[...]}`` → ``{"embeddings": [[...]]}``) or, with the openai backend, the OpenAI-compatible
``POST /v1/embeddings`` (→ ``{"data": [{"embedding": [...]}]}``). They are cached like replies: on disk
under ``<cache dir>/embeddings/``, keyed by the API, the model name, the model's digest and the text, with
the response cache's mode (``replay-only`` never calls the server), and in memory for the run, so an
original explanation shared by ~25 pairs is embedded once. The digest comes from the server's model list
at preflight (Ollama ``/api/tags``; an OpenAI-compatible ``/models`` entry's fingerprint), so pulling a
new version of the embedding model under the same name misses the cache instead of mixing two models'
vectors; it is recorded beside the vectors for ``replay-only`` runs, which reach no server.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..data import EvalCase, Item, UserHistory
from ..errors import BackendError, CacheMissError, RobustExplainWarning, warn
from ..sanitize import redact_path, split_credentials
from ..store import Store
from .base import Explainer, Explanation, ModelInfo, context_check, digest_now
from .cache import WRITING_MODES, cache_key, validate_mode
from .context import ContextWindow
from .ollama import name_matches, normalise_digest
from .openai_compat import model_fingerprint
from .remote import http_options
from .retry import (
    Redirected,
    RetryExhaustedError,
    RetryPolicy,
    describe_error,
    is_connect_failure,
    status_of,
    within_deadline,
)

EMBEDDING, EMBEDDING_MODEL = "embedding", "embedding-model"  # the store's kinds of entry
SAME_VECTOR_TEXTS = 5  # distinct texts with one vector between them: a model that does not embed

Vector = tuple[float, ...]
EMBED_APIS: tuple[str, ...] = ("ollama", "openai")
_PROBE = "robustexplain embedding check"


class EmbeddingClient:
    """Vectors from ``model`` on ``host``: ``api`` "ollama" (``/api/embed``) or "openai" (``/embeddings``
    under the OpenAI base URL, which ends in ``/v1``). One httpx client per event loop."""

    def __init__(self, model: str, *, host: str, api: str = "ollama", api_key: str | None = None,
                 timeout: float = 120.0, connect_timeout: float = 5.0, max_attempts: int = 5,
                 seed: int = 0) -> None:
        if api not in EMBED_APIS:
            raise BackendError(f"embeddings: unknown API {api!r} (one of {', '.join(EMBED_APIS)})")
        # Requests go to ``url``; ``host`` (a key in its path shown as ***) is what messages show.
        self.url, self._credentials = split_credentials(host.rstrip("/"))  # credentials sent, never shown
        self.model, self.host, self.api = model, redact_path(self.url), api
        self._api_key = api_key
        self._timeout, self._connect_timeout = timeout, connect_timeout
        self._retry = RetryPolicy(max_attempts=max_attempts, seed=seed)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    @property
    def path(self) -> str:
        return "/api/embed" if self.api == "ollama" else "/embeddings"

    async def preflight(self) -> str | None:
        """Embed one probe text: a missing model or an unreachable host is one clear error now. Returns
        the model's digest (None when the server lists no such model). A client of its own, closed at
        once: preflight may run in a short-lived event loop (the plugin's start-up)."""
        client = self._new_client()
        try:
            await self._embed([_PROBE], client)
            return await self._digest(client)
        finally:
            await client.aclose()

    async def _digest(self, client: Any) -> str | None:
        """The model's identity from the server's model list; None when it is not listed (a server
        that lists nothing, or serves the one model it loaded under any name)."""
        try:
            response = await client.get(self.url + ("/api/tags" if self.api == "ollama" else "/models"))
            response.raise_for_status()
            body = response.json()
            if self.api == "ollama":
                entry = next((m for m in body.get("models", []) if isinstance(m, dict)
                              and name_matches(self.model, str(m.get("model") or m.get("name")))), None)
                return normalise_digest(entry.get("digest")) if entry else None
            entry = next((m for m in body.get("data", [])
                          if isinstance(m, dict) and m.get("id") == self.model), None)
            return model_fingerprint(entry) if entry else None
        except Exception as exc:  # the probe was embedded: a model list is a nicety, not a condition
            if is_connect_failure(exc):
                raise self._fatal(exc) from None
            return None

    async def embed(self, texts: list[str]) -> list[Vector]:
        """One vector per text, in order; a BackendError names the host and model when it cannot."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._new_client()
        return await self._embed(texts, client)

    async def _embed(self, texts: list[str], client: Any) -> list[Vector]:
        try:
            # One attempt bounded as a whole, as for generation (timeout + connect-timeout).
            deadline = self._timeout + self._connect_timeout
            return await self._retry.run(lambda: within_deadline(self._request(texts, client), deadline))
        except RetryExhaustedError as exc:
            raise BackendError(f"embeddings from {self.model!r} at {self.host} failed: {exc}") from None
        except BackendError:
            raise
        except Exception as exc:
            raise self._fatal(exc) from None

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def _request(self, texts: list[str], client: Any) -> list[Vector]:
        response = await client.post(self.url + self.path, json={"model": self.model, "input": texts})
        response.raise_for_status()
        vectors = self._vectors(response.json())
        if len(vectors) != len(texts):
            raise BackendError(f"embeddings from {self.model!r} at {self.host}: {len(vectors)} vectors for "
                               f"{len(texts)} texts")
        return vectors

    def _vectors(self, body: Any) -> list[Vector]:
        try:
            rows = body["embeddings"] if self.api == "ollama" else [d["embedding"] for d in body["data"]]
            vectors = [tuple(float(x) for x in row) for row in rows]
        except (KeyError, TypeError, ValueError):
            raise BackendError(f"{self.host}{self.path} did not answer with embeddings for {self.model!r}: "
                               f"{json.dumps(body)[:200]}") from None
        for vector in vectors:
            check_vector(vector, self.model, self.host)
        return vectors

    def _new_client(self) -> Any:
        import httpx  # lazy: loads httpx

        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        auth = None if self._api_key or self._credentials is None else httpx.BasicAuth(*self._credentials)
        timeout = httpx.Timeout(self._timeout, connect=self._connect_timeout)
        return httpx.AsyncClient(headers=headers, auth=auth, timeout=timeout, **http_options(self.url))

    def _fatal(self, exc: BaseException) -> BackendError:
        if isinstance(exc, Redirected):
            return BackendError(f"embeddings: {exc.advice(self.host)}")
        if is_connect_failure(exc):
            return BackendError(f"cannot reach {self.host} for embeddings (connection refused); start the "
                                "server or check --robustexplain-host")
        if status_of(exc) == 404:
            pull = f"; run `ollama pull {self.model}`" if self.api == "ollama" else ""
            return BackendError(f"embedding model {self.model!r} not found on {self.host}{pull}")
        return BackendError(f"embeddings from {self.model!r} at {self.host} failed: {describe_error(exc)}")


class EmbeddingCache:
    """Vectors on disk, one entry per text, in the cache directory's database (:mod:`..store`)."""

    def __init__(self, directory: str | os.PathLike[str], mode: str = "read-write", *,
                 store: Store | None = None) -> None:
        self.directory = Path(directory)
        self.mode = validate_mode(mode)
        # A full disk only costs the next run a request (the store says so once).
        self.store = store if store is not None else Store(self.directory, writes=self.mode in WRITING_MODES)

    def key(self, api: str, model: str, digest: str | None, text: str) -> str:
        return cache_key({"api": api, "embed_model": model, "embed_digest": digest, "text": text})

    def put_digest(self, api: str, model: str, digest: str | None) -> None:
        """Record the digest preflight found, so a replay-only run rebuilds the same keys offline."""
        entry = {"format": 1, "api": api, "embed_model": model, "embed_digest": digest}
        self.store.put(EMBEDDING_MODEL, cache_key({"api": api, "embed_model": model}), json.dumps(entry))

    def recorded_digest(self, api: str, model: str) -> str | None:
        """The digest a preflight recorded for (api, model); CacheMissError when none was."""
        try:
            entry = json.loads(self.store.get(EMBEDDING_MODEL, cache_key({"api": api, "embed_model": model}))
                               or "null")
            if entry.get("embed_model") == model and entry.get("api") == api:
                digest = entry.get("embed_digest")
                return digest if isinstance(digest, str) else None
        except (ValueError, AttributeError):
            pass
        raise CacheMissError(f"replay-only: no recorded facts for embedding model {model!r} in "
                             f"{self.directory}; run once with the server (cache mode read-write) first")

    def get(self, key: str) -> Vector | None:
        if self.mode not in ("read", "read-write", "replay-only"):
            return None
        try:
            entry = json.loads(self.store.get(EMBEDDING, key) or "null")
            return tuple(float(x) for x in entry["vector"]) if entry.get("key") == key else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # missing or unreadable: fetched again (and rewritten)

    def put(self, key: str, model: str, vector: Vector) -> None:
        entry = {"format": 1, "key": key, "embed_model": model,
                 "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "vector": list(vector)}
        self.store.put(EMBEDDING, key, json.dumps(entry))


def check_vector(vector: Vector, model: str, host: str, length: int | None = None) -> None:
    """One vector as a cosine can read it: non-empty, every number finite, and as long as the model's
    others (``length``) — else one BackendError naming the model, not a NaN silently scored 0 or a traceback
    from the cosine."""
    if not vector:
        raise BackendError(f"embeddings from {model!r} at {host}: an empty vector")
    if not all(math.isfinite(x) for x in vector):
        raise BackendError(f"embeddings from {model!r} at {host}: a vector holds NaN or Infinity, which no "
                           "similarity can be read from")
    if length is not None and len(vector) != length:
        raise BackendError(f"embeddings from {model!r} at {host}: a vector of {len(vector)} numbers after "
                           f"vectors of {length} — two models' vectors, or a model changed mid-run, cannot "
                           "be compared")


class Embedder:
    """Texts → vectors through the memory memo, the disk cache and the client, in that order."""

    def __init__(self, client: EmbeddingClient, cache: EmbeddingCache | None = None) -> None:
        self.client = client
        self.cache = cache
        self._memo: dict[str, Vector] = {}
        self.requests = 0  # texts sent to the server (tests and reports read it)
        self.digest: str | None = None  # the embedding model's, from preflight (or its record)
        self.length: int | None = None  # every vector's length, from the first one (cached or asked)

    async def preflight(self) -> str | None:
        """The embedding model's digest: asked of the server, or read from the cache's record when
        ``replay-only`` (which reaches no server)."""
        if self.cache is not None and self.cache.mode == "replay-only":
            self.digest = self.cache.recorded_digest(self.client.api, self.client.model)
        else:
            self.digest = await self.client.preflight()
            if self.cache is not None:
                client = self.client
                await asyncio.to_thread(self.cache.put_digest, client.api, client.model, self.digest)
        return self.digest

    async def vector(self, text: str) -> Vector:
        vector = self._memo.get(text)
        if vector is None:
            vector = await self._load(text)
            check_vector(vector, self.client.model, self.client.host, self.length)
            self.length = len(vector)
            self._memo[text] = vector
            if len(self._memo) == SAME_VECTOR_TEXTS and len(set(self._memo.values())) == 1:
                warn(RobustExplainWarning(
                    f"embedding model {self.client.model!r} gave one vector for {SAME_VECTOR_TEXTS} "
                    "different explanations: its similarity is the same for any two texts and says "
                    "nothing about them (is it an embedding model?)"))
        return vector

    async def _load(self, text: str) -> Vector:
        key = self.cache.key(self.client.api, self.client.model, self.digest, text) if self.cache else ""
        cached = await asyncio.to_thread(self.cache.get, key) if self.cache else None
        if cached is not None:
            return cached
        if self.cache is not None and self.cache.mode == "replay-only":
            raise CacheMissError(f"replay-only: no cached embedding of an explanation (model "
                                 f"{self.client.model!r}, key {key[:12]}…) in {self.cache.directory}")
        self.requests += 1
        (vector,) = await self.client.embed([text])
        if self.cache is not None:
            await asyncio.to_thread(self.cache.put, key, self.client.model, vector)
        return vector


class EmbeddingExplainer:
    """An explainer whose explanations carry their embedding vector (``()`` for a failed one)."""

    def __init__(self, inner: Explainer, embedder: Embedder) -> None:
        self.inner = inner
        self.embedder = embedder
        self.backend = inner.backend
        self.model = inner.model

    def __repr__(self) -> str:
        return f"EmbeddingExplainer({self.inner!r}, embed_model={self.embedder.client.model!r})"

    async def preflight(self) -> ModelInfo:
        info = await self.inner.preflight()
        digest = await self.embedder.preflight()
        return replace(info, extra={**info.extra, "embed_model": self.embedder.client.model,
                                    "embed_digest": digest})

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        explanation = await self.inner.explain(history, item, seed=seed, repeat=repeat)
        vector = await self.embedder.vector(explanation.text) if explanation.ok else ()
        return replace(explanation, embedding=vector)

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        return self.inner.request_identity(history, item, seed=seed, repeat=repeat)

    async def aclose(self) -> None:
        await self.inner.aclose()
        await self.embedder.client.aclose()
        if self.embedder.cache is not None:
            self.embedder.cache.store.close()

    async def current_digest(self) -> str | None:
        return await digest_now(self.inner)

    async def oversized(self, cases: Sequence[EvalCase]) -> tuple[ContextWindow | None, list[tuple[str, int]],
                                                                  bool]:
        """The inner explainer's context check (none for explainers without a context)."""
        return await context_check(self.inner, cases)


def with_embeddings(explainer: Explainer, model: str, *, host: str, api: str, cache_dir: Path | None,
                    cache_mode: str, store: Store | None = None, **client_options: Any) -> EmbeddingExplainer:
    """``explainer`` whose explanations carry vectors from the embedding ``model`` (cached under
    ``cache_dir/embeddings`` unless ``cache_mode`` is "off"); ``client_options`` as EmbeddingClient's."""
    cache = None if cache_mode == "off" or cache_dir is None else EmbeddingCache(cache_dir, cache_mode,
                                                                                  store=store)
    client = EmbeddingClient(model, host=host, api=api, **client_options)
    return EmbeddingExplainer(explainer, Embedder(client, cache))
