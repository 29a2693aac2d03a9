"""The OpenAI-compatible backend: llama.cpp's ``llama-server``, vLLM, LM Studio, Ollama's ``/v1``...

Each prompt is one ``POST {base_url}/chat/completions`` with a single user message, ``temperature``,
``seed`` (the per-request seed) and ``max_tokens``, through ``httpx.AsyncClient``; retries, bounded
concurrency and failure handling are those of every backend (:mod:`.remote`).

Preflight asks ``GET {base_url}/models``. Servers differ in what that list means: llama.cpp serves one
model whatever name a request carries, so a non-empty list that lacks the requested name is a warning,
not an error (the listed model is what will answer, and it is recorded). An empty list or a listed
name is unambiguous. These servers report no content digest, so the model's identity for cache keys is
a hash of the server-reported model entry (its id and metadata), minus fields that change on restart.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

from ..backends import DEFAULT_HOSTS, GENERATION_DEFAULTS, GenerationOptions
from ..errors import BackendError, RobustExplainWarning, warn
from .base import FAKE_SERVER_KIND, ModelInfo, served_by_fake
from .context import ContextWindow, window_from_openai_entry
from .prompt import PromptTemplate
from .remote import RemoteExplainer, Reply, http_options
from .reply import MalformedReply, token_count
from .retry import RetryPolicy, connect_cause, describe_error, is_connect_failure, status_of

DEFAULT_BASE_URL = DEFAULT_HOSTS["openai"]
# Fields of a /models entry that change without the model changing (llama.cpp sets "created" to the
# server's start time).
_VOLATILE_FIELDS = frozenset({"created", "object"})


def model_fingerprint(entry: dict[str, Any]) -> str:
    """A stable stand-in digest from what the server says about the model."""
    stable = {k: v for k, v in entry.items() if k not in _VOLATILE_FIELDS}
    blob = json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
    return "entry-sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


class OpenAICompatExplainer(RemoteExplainer):
    """Explanations from any server speaking the OpenAI chat-completions API."""

    backend = "openai"

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None,
                 options: GenerationOptions | None = None, prompt: PromptTemplate | None = None,
                 retry: RetryPolicy | None = None, **overrides: Any) -> None:
        """``api_key`` defaults to ``$OPENAI_API_KEY`` (sent as a Bearer token when set). ``options``
        (default: the option table's) with ``overrides`` by field name; ``max_tokens`` is the API's name
        of ``num_predict`` and is taken as it. ``num_ctx`` is the server's own setting (not sent)."""
        if "max_tokens" in overrides:
            overrides["num_predict"] = overrides.pop("max_tokens")
        url = base_url.strip().rstrip("/")
        if "://" not in url:
            url = "http://" + url
        options = (options or GENERATION_DEFAULTS).with_overrides(overrides, who="OpenAICompatExplainer")
        super().__init__(model, host=url, options=options, prompt=prompt, retry=retry)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        # The model list is read again at the end of a run (current_digest): what it says is said once.
        self._said_unlisted = False

    def __repr__(self) -> str:
        return f"OpenAICompatExplainer({self.model!r}, base_url={self.host!r})"

    @property
    def max_tokens(self) -> int:
        return self.num_predict

    # ------------------------------------------------------------------ hooks
    def _make_client(self) -> Any:
        import httpx  # lazy: loads httpx

        return httpx.AsyncClient(base_url=self.url + "/", headers=self._headers(),
                                 timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
                                 **http_options(self.url))

    async def _close_client(self, client: Any) -> None:
        await client.aclose()

    def _headers(self) -> dict[str, str]:
        """The API key as a Bearer token; else the URL's ``user:password@`` as Basic credentials."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else self._basic_auth()

    def identity_options(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.num_predict}

    def client(self) -> Any:
        """A client of the server as the calls have one (its limits, TLS, redirects refused): for batches."""
        return self._make_client()

    def chat_body(self, prompt: str, *, seed: int, num_predict: int) -> dict[str, Any]:
        """The request of one call (sent as it is, or as a line of a batch: ``explainers/batch.py``)."""
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": self.temperature, "seed": seed, "max_tokens": num_predict, "stream": False}

    async def _request(self, client: Any, prompt: str, *, seed: int, num_predict: int) -> Reply:
        response = await client.post("chat/completions",
                                     json=self.chat_body(prompt, seed=seed, num_predict=num_predict))
        response.raise_for_status()
        return self._parse_completion(response)

    @staticmethod
    def _parse_completion(response: Any) -> Reply:
        try:
            data = response.json()
        except ValueError as exc:
            raise ValueError(f"malformed chat completion ({type(exc).__name__}: {exc}): "
                             f"{response.text[:200]!r}") from None
        return parse_completion(data, response.text)

    async def _inspect(self, client: Any) -> ModelInfo:
        response = await client.get("models")
        response.raise_for_status()
        try:
            entries = [e for e in response.json().get("data", []) if isinstance(e, dict)]
        except (ValueError, AttributeError):
            raise BackendError(f"{self.host}/models did not return a model list: "
                               f"{response.text[:200]!r}") from None
        entry = next((e for e in entries if e.get("id") == self.model), None)
        if entry is None and entries:
            if not self._said_unlisted:
                self._said_unlisted = True
                served = ", ".join(str(e.get("id")) for e in entries)
                warn(RobustExplainWarning(
                    f"model {self.model!r} is not listed by {self.host}/models (served: {served}); servers "
                    "such as llama.cpp answer every request with the model they loaded, so the results "
                    "belong to that model."))
            entry = entries[0] if len(entries) == 1 else None
        known: dict[str, Any] = entry or {}
        meta = known["meta"] if isinstance(known.get("meta"), dict) else {}
        fake = served_by_fake(owned_by=known.get("owned_by"))
        return ModelInfo(
            name=self.model, backend=self.backend,
            digest=model_fingerprint(entry) if entry is not None else None,
            parameter_size=_param_size(meta.get("n_params")), quantization=None,
            server_version=response.headers.get("server"), host=self.host, is_llm=not fake,
            extra={"served_as": known.get("id"), "owned_by": known.get("owned_by"), "meta": meta,
                   "entry": {k: known[k] for k in ("max_model_len", "context_length", "max_context_length")
                             if k in known}, **({"kind": FAKE_SERVER_KIND} if fake else {})},
        )

    async def _count_tokens(self, texts: Sequence[str]) -> list[int] | None:
        """llama.cpp's ``POST /tokenize`` (``{"content"}`` → ``{"tokens"}``), else vLLM's (``{"model",
        "prompt"}`` → ``{"count"}``), at the server's root; None when neither answers (LM Studio, a cloud
        API): counting is a courtesy, never a reason to fail a run."""
        import httpx  # lazy: loads httpx

        root = self.url.removesuffix("/v1")
        counts: list[int] = []
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
                                     headers=self._headers(), **http_options(self.url)) as client:
            for text in texts:
                count = await _tokenize(client, root + "/tokenize", text, self.model)
                if count is None:
                    return None
                counts.append(count)
        return counts

    def _context_window(self, info: ModelInfo) -> ContextWindow | None:
        entry = info.extra.get("entry")
        return window_from_openai_entry({**(entry if isinstance(entry, dict) else {}),
                                         "meta": info.extra.get("meta")})

    def _fatal_for(self, exc: BaseException) -> BackendError | None:
        if is_connect_failure(exc):
            return self._unreachable(connect_cause(exc))
        if status_of(exc) == 404:
            return BackendError(
                f"{self.host} answered 404 ({describe_error(exc)}) for model {self.model!r}: check that the "
                "base URL ends in /v1 (e.g. http://127.0.0.1:8080/v1) and that the server serves this model."
            )
        return self._status_fatal(exc)

    def _unreachable(self, cause: str = "connection refused") -> BackendError:
        return BackendError(
            f"cannot reach the OpenAI-compatible server at {self.host} ({cause}). Start it "
            "(e.g. `llama-server -m model.gguf --port 8080`) or set --robustexplain-host."
        )


def parse_completion(data: Any, text: str) -> Reply:
    """A chat completion's reply (``text``: the body as received, for the messages), live or from a batch."""
    try:
        if isinstance(data, dict) and data.get("choices") is None and data.get("error") is not None:
            raise MalformedReply(f"the server answered with an error: {_error_text(data['error'])}")
        choice = data["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        if isinstance(exc, MalformedReply):
            raise
        raise ValueError(f"malformed chat completion ({type(exc).__name__}: {exc}): {text[:200]!r}") from None
    if not isinstance(choice, dict) or not isinstance(message, dict):
        raise MalformedReply(f"the chat completion's choice or message is not a JSON object: {text[:200]!r}")
    usage = data.get("usage")
    # A usage that is no object leaves both counts to the one check of every reply, which says so.
    prompt, completion = ((usage.get("prompt_tokens"), usage.get("completion_tokens"))
                          if isinstance(usage, dict) else (usage, usage))
    return Reply(text=message.get("content"), prompt_tokens=prompt, completion_tokens=completion,
                 stop_reason=choice.get("finish_reason"),
                 # Ollama's /v1 says "reasoning", llama.cpp's server "reasoning_content".
                 thought=bool(message.get("reasoning") or message.get("reasoning_content")),
                 reused_tokens=reused_tokens(usage, data.get("timings")), model=data.get("model"))


def _param_size(n_params: Any) -> str | None:
    # llama.cpp reports the raw parameter count; show it the way Ollama does ("8.0B").
    if not isinstance(n_params, (int, float)) or n_params <= 0:
        return None
    return f"{n_params / 1e9:.1f}B" if n_params >= 1e9 else f"{n_params / 1e6:.0f}M"


async def _tokenize(client: Any, url: str, text: str, model: str) -> int | None:
    """One text's token count from a ``/tokenize`` endpoint in llama.cpp's or vLLM's shape, or None."""
    for body in ({"content": text}, {"model": model, "prompt": text}):
        try:
            response = await client.post(url, json=body)
            data = response.json() if response.status_code == 200 else None
        except Exception:  # nothing there, not JSON, a timeout: no count
            return None
        if isinstance(data, dict):
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
            if isinstance(data.get("count"), int):
                return int(data["count"])
    return None


def reused_tokens(usage: Any, timings: Any) -> int | None:
    """How many prompt tokens a completion says came from the server's prompt cache (OpenAI's
    ``usage.prompt_tokens_details.cached_tokens``, llama.cpp's ``timings.cache_n``); its ``prompt_tokens``
    is then the whole prompt's. None when it says neither (Ollama's /v1 before 0.30, which counted only what
    it evaluated)."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    return next((n for holder, key in ((details, "cached_tokens"), (timings, "cache_n"))
                 if isinstance(holder, dict) and (n := token_count(holder.get(key))) is not None), None)


def _error_text(error: Any) -> str:
    """An OpenAI-style error object's message (``{"message": …}``), or the value itself, cut to 300."""
    message = error.get("message") if isinstance(error, dict) else None
    return str(message if message is not None else error)[:300]
