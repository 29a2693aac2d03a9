"""Chat requests in one native shape, scripted faults and error answers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Names accepted by FakeOllamaServer.script(); "ok" answers normally.
FAULTS: tuple[str, ...] = ("ok", "fail", "fail500", "hang", "drop", "empty", "refuse", "bloat", "extra",
                           "trailers", "bomb")
BLOAT_BYTES = 20_000_000  # what a "bloat" reply's content holds: a server that ignores every limit
DEFAULT_HANG_SECONDS = 600.0  # longer than any sane client read timeout; stop() releases it


class HttpError(Exception):
    """An error answer: status and message (shaped per API by the handler)."""

    def __init__(self, status: int, message: str, *, body: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body  # the exact error body, where a server's own shape matters (llama.cpp's context)
        self.headers = headers or {}  # e.g. Retry-After


# The fake tokenizer: four characters a token, as English runs under BPE tokenisers (prompt counts, contexts).
CHARS_PER_TOKEN = 4
DEFAULT_NUM_CTX = 4096  # what Ollama gives a request that sends no num_ctx
KEEP_TOKENS = 4  # the start Ollama keeps of a prompt it truncates (numKeep), dropping what follows


def prompt_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULTS
    status: int = 503
    seconds: float = DEFAULT_HANG_SECONDS
    retry_after: int | None = None  # the Retry-After header of a failure, in seconds
    location: str = ""  # where a redirect points (the request's path is appended)
    fields: tuple[tuple[str, Any], ...] = ()  # a "reshape" reply's overrides: (dotted path, JSON value)
    encoding: str = ""  # a "compress" reply's Content-Encoding (gzip, deflate; any other name: sent as is)
    inflated: int = 0  # what a "bomb" reply inflates to, in bytes (0: BLOAT_BYTES)


FAIL_MESSAGES = {
    503: "server busy, please try again.  maximum pending requests exceeded",
    500: "llama runner process has terminated: exit status 2",
    429: "rate limit exceeded, retry later",
}


@dataclass
class ChatCall:
    """A chat request in the native shape, whichever endpoint it came through."""

    api: str  # "ollama" or "openai"
    model: str
    messages: list[dict[str, Any]]
    options: dict[str, Any]
    think: Any
    stream: bool
    include_usage: bool = False

    @property
    def prompt(self) -> str:
        """The last user message: what the reply model answers."""
        return next((m["content"] for m in reversed(self.messages) if m.get("role") == "user"), "")


@dataclass
class Ticket:
    """One chat request in flight; ``answered`` makes the in-flight decrement happen exactly once."""

    fault: Fault | None
    answered: bool = False


@dataclass
class Answer:
    content: str
    thinking: str
    done_reason: str
    prompt_tokens: int
    completion_tokens: int
    started_ns: int
    load_ns: int


def _text_of(content: Any, where: str) -> str:
    """Message content as text: a string, or (OpenAI) a list of parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(parts)
    raise HttpError(400, f"invalid message content in {where}: expected a string")


def _messages(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise HttpError(400, "messages must be a list")
    out = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise HttpError(400, f"messages[{i}] must be an object")
        out.append({"role": str(message.get("role", "")), "content": _text_of(message.get("content"),
                                                                                f"messages[{i}]")})
    return out


def _check_options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise HttpError(400, "options must be an object")
    for key in ("temperature", "top_p", "seed", "num_predict", "top_k"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise HttpError(400, f"option {key!r} must be a number, got {json.dumps(value)}")
    return dict(options)


_THINK_LEVELS = ("high", "medium", "low")


def _check_think(think: Any) -> Any:
    if think is None or isinstance(think, bool) or think in _THINK_LEVELS:
        return think
    raise HttpError(400, f"invalid think value: {json.dumps(think)} "
                          '(must be "high", "medium", "low", true, or false)')


def native_call(body: dict[str, Any]) -> ChatCall:
    return ChatCall(
        api="ollama", model=str(body.get("model") or ""),
        messages=_messages(body.get("messages")), options=_check_options(body.get("options")),
        think=_check_think(body.get("think")),
        stream=body.get("stream") is not False,  # Ollama streams unless told not to
    )


OPENAI_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed",
                   "max_tokens": "num_predict", "max_completion_tokens": "num_predict",
                   "frequency_penalty": "frequency_penalty",
                   "presence_penalty": "presence_penalty", "stop": "stop"}


def openai_call(body: dict[str, Any]) -> ChatCall:
    options = {native: body[key] for key, native in OPENAI_OPTIONS.items() if body.get(key) is not None}
    effort = body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        effort = reasoning["effort"]
    think = None if effort is None else (False if effort == "none" else _check_think(effort))
    stream_options = body.get("stream_options")
    return ChatCall(
        api="openai", model=str(body.get("model") or ""),
        messages=_messages(body.get("messages")), options=_check_options(options), think=think,
        stream=body.get("stream") is True,
        include_usage=isinstance(stream_options, dict) and stream_options.get("include_usage") is True,
    )


def openai_error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def words(text: str) -> int:
    return len(text.split())
