"""The Ollama backend, through the official ``ollama`` Python client (``ollama.AsyncClient``).

Each prompt is one non-streaming ``/api/chat`` request with a single user message and the options
``temperature``, ``seed`` (the per-request seed), ``num_predict`` and ``num_ctx``. ``num_ctx`` never
changes between requests, because a different context size makes Ollama reload the model.

Thinking models (``"thinking"`` in the capabilities ``/api/show`` reports) get ``think=False``; any
``<think>`` block that leaks into the content anyway is stripped before scoring.

The chat request is the official client's (:mod:`.ollama_chat`: the same body and headers), sent through
httpx and read field by field; the preflight (the model list, its details) through the official client.
Every reply is read through the one transport (:mod:`.transport`): decoded as it streams, bounded.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import TYPE_CHECKING, Any

from ..backends import DEFAULT_HOSTS, GENERATION_DEFAULTS, GenerationOptions
from ..errors import BackendError
from ..sanitize import split_credentials
from .base import FAKE_SERVER_KIND, ModelInfo, served_by_fake
from .context import ContextWindow, trained_context, window_for_ollama
from .ollama_chat import chat_body, official_headers, parse_chat_reply
from .prompt import PromptTemplate
from .remote import RemoteExplainer, Reply, http_options
from .retry import RetryPolicy, connect_cause, is_connect_failure, status_of

if TYPE_CHECKING:
    import ollama

DEFAULT_HOST = DEFAULT_HOSTS["ollama"]
DEFAULT_PORT = 11434


def resolve_host(host: str | None = None) -> str:
    """The server URL: ``host``, else ``$OLLAMA_HOST``, else ``http://127.0.0.1:11434``.

    Accepts the forms Ollama itself accepts (``localhost``, ``0.0.0.0:11434``, ``https://h``); a bind-all
    address is turned into the loopback address a client can actually connect to.
    """
    raw = (host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST).strip()
    if "://" not in raw:
        raw = "http://" + raw
    raw, credentials = split_credentials(raw)
    parts = urllib.parse.urlsplit(raw)
    hostname = parts.hostname or "127.0.0.1"
    if hostname in ("0.0.0.0", "::"):
        hostname = "127.0.0.1"
    if ":" in hostname:  # IPv6 literal
        hostname = f"[{hostname}]"
    try:
        port = parts.port
    except ValueError:
        raise BackendError(f"invalid Ollama host {raw!r}: bad port") from None
    if port is None:
        port = 443 if parts.scheme == "https" else DEFAULT_PORT
    userinfo = ""
    if credentials is not None:  # kept for the explainer, which moves them to the Authorization header
        user, password = (urllib.parse.quote(c, safe="") for c in credentials)
        userinfo = f"{user}:{password}@" if password else f"{user}@"
    return f"{parts.scheme}://{userinfo}{hostname}:{port}{parts.path.rstrip('/')}"


def normalise_digest(digest: str | None) -> str | None:
    # /api/tags reports a bare sha256 hex digest; say which algorithm it is, as the reports do.
    if digest and ":" not in digest and len(digest) == 64:
        return f"sha256:{digest}"
    return digest or None


def name_matches(requested: str, listed: str) -> bool:
    return listed == requested or (":" not in requested and listed == f"{requested}:latest")


class OllamaExplainer(RemoteExplainer):
    """Explanations from a model served by Ollama."""

    backend = "ollama"

    def __init__(self, model: str, *, host: str | None = None, options: GenerationOptions | None = None,
                 prompt: PromptTemplate | None = None, retry: RetryPolicy | None = None,
                 **overrides: Any) -> None:
        """``options`` (default: :data:`~pytest_robustexplain.backends.GENERATION_DEFAULTS`, the option
        table's defaults) with ``overrides`` by field name (``num_predict=100``); ``options.seed`` seeds
        the warm-up request and the retry jitter, each explanation uses the seed passed to
        :meth:`explain`. ``retry`` overrides the default policy (tests inject a fast sleep)."""
        options = (options or GENERATION_DEFAULTS).with_overrides(overrides, who="OllamaExplainer")
        super().__init__(model, host=resolve_host(host), options=options, prompt=prompt, retry=retry)

    @property
    def num_ctx(self) -> int:
        return self.options.num_ctx

    def __repr__(self) -> str:
        return f"OllamaExplainer({self.model!r}, host={self.host!r})"

    # ------------------------------------------------------------------ hooks
    def _timeout(self) -> Any:
        import httpx  # lazy: loads httpx

        return httpx.Timeout(self.read_timeout, connect=self.connect_timeout)

    def _http(self) -> dict[str, Any]:
        return http_options(self.url)

    def _official_client(self) -> ollama.AsyncClient:
        import ollama  # lazy: loads httpx, ollama

        return ollama.AsyncClient(host=self.url, timeout=self._timeout(), headers=self._basic_auth(),
                                  **self._http())

    def _make_client(self) -> Any:
        return _Clients(self)

    async def _close_client(self, client: Any) -> None:
        await client.close()

    def identity_options(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "num_predict": self.num_predict, "num_ctx": self.num_ctx}

    @property
    def think(self) -> bool | None:
        """``False`` for thinking-capable models (turn reasoning off); None (not sent) otherwise."""
        capabilities = self.info.extra.get("capabilities", ()) if self.info is not None else ()
        return False if "thinking" in capabilities else None

    async def _request(self, client: Any, prompt: str, *, seed: int, num_predict: int) -> Reply:
        model = self.info.name if self.info is not None else self.model
        options = {"temperature": self.temperature, "seed": seed, "num_predict": num_predict,
                   "num_ctx": self.num_ctx}
        response = await client.http.post("/api/chat", content=chat_body(model, prompt, options, self.think))
        text, prompt_tokens, completion_tokens, stop, thought, named = parse_chat_reply(
            response.status_code, response.content, response.headers.get("retry-after"))
        return Reply(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     stop_reason=stop, thought=thought, model=named)

    async def _inspect(self, client: Any) -> ModelInfo:
        version = await _server_version(client.http)
        client = client.official
        try:
            listing = await client.list()
        except Exception as exc:
            if status_of(exc) == 404:
                # Something answers HTTP there, but not Ollama: a model hint would send people astray.
                raise BackendError(
                    f"{self.host} does not look like an Ollama server (GET /api/tags answered 404). Check "
                    "the host and port; for an OpenAI-compatible server use --robustexplain-backend=openai."
                ) from None
            raise
        entry = next((m for m in listing.models if m.model and name_matches(self.model, m.model)), None)
        if entry is None:
            raise self._not_found()
        name = entry.model or self.model
        try:
            shown = await client.show(name)
        except Exception as exc:
            if status_of(exc) == 404:
                raise self._not_found() from None
            raise
        details = shown.details or entry.details
        fake = served_by_fake(shown.modelinfo)
        return ModelInfo(
            name=name, backend=self.backend, digest=normalise_digest(entry.digest),
            parameter_size=details.parameter_size if details else None,
            quantization=details.quantization_level if details else None,
            server_version=version, host=self.host, is_llm=not fake,
            extra={"capabilities": list(shown.capabilities or []),
                   "family": details.family if details else None,
                   "size_bytes": int(entry.size) if entry.size is not None else None,
                   "context_length": trained_context(shown.modelinfo),
                   **({"kind": FAKE_SERVER_KIND} if fake else {})},
        )

    def _context_window(self, info: ModelInfo) -> ContextWindow:
        trained = info.extra.get("context_length")
        return window_for_ollama(self.num_ctx, trained if isinstance(trained, int) else None)

    def _fatal_for(self, exc: BaseException) -> BackendError | None:
        if is_connect_failure(exc):
            return self._unreachable(connect_cause(exc))
        if status_of(exc) == 404:
            return self._not_found()
        return self._status_fatal(exc)

    def _unreachable(self, cause: str = "connection refused") -> BackendError:
        return BackendError(
            f"cannot reach Ollama at {self.host} ({cause}). Start it with `ollama serve` or set "
            "--robustexplain-host / OLLAMA_HOST."
        )

    def _not_found(self) -> BackendError:
        return BackendError(f"model {self.model} not found on {self.host}; run `ollama pull {self.model}`")


async def _server_version(http: Any) -> str | None:
    """The server's version (the official client has no call for /api/version; the chat client asks)."""
    response = await http.get("/api/version")
    if response.status_code == 404:  # very old servers; not worth failing (or a misleading 404)
        return None
    response.raise_for_status()
    version = response.json().get("version")
    return str(version) if version is not None else None


class _Clients:
    """One event loop's clients of a server: httpx for the chat requests, the official client for the
    preflight (built when first needed)."""

    def __init__(self, explainer: OllamaExplainer) -> None:
        import httpx  # lazy: loads httpx

        self._explainer = explainer
        self.http = httpx.AsyncClient(base_url=explainer.url, timeout=explainer._timeout(),
                                      headers={**official_headers(), **explainer._basic_auth()},
                                      **explainer._http())
        self._official: ollama.AsyncClient | None = None

    @property
    def official(self) -> ollama.AsyncClient:
        if self._official is None:
            self._official = self._explainer._official_client()
        return self._official

    async def close(self) -> None:
        await self.http.aclose()
        if self._official is not None:
            await self._official.close()
