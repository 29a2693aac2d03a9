"""The Ollama chat request and reply as JSON: what the official ``ollama`` client sends (the same body and
headers, keys in its order) and reading its reply field by field.

The request goes through the one HTTP stack (httpx, :mod:`.transport`: bounded, decoded as it streams); the
reply is read here rather than by the official client's response model, so that a field a server got wrong
is that field's problem — a count that is no count is unknown (said once), content that is no text fails
the call saying what came, an error sent with status 200 keeps the server's words — where the model's
validation failed the whole reply in one many-line error.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from importlib import metadata
from typing import Any

from .reply import MalformedReply


@functools.lru_cache(maxsize=1)
def _user_agent() -> str:
    return (f"ollama-python/{metadata.version('ollama')} ({platform.machine()} {platform.system().lower()}) "
            f"Python/{platform.python_version()}")


def official_headers() -> dict[str, str]:
    """The headers the official client sends with every request (``ollama._client.BaseClient``)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json",
               "User-Agent": _user_agent()}
    api_key = os.getenv("OLLAMA_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def chat_body(model: str, prompt: str, options: dict[str, Any], think: bool | None) -> bytes:
    """The JSON the official client's ``chat`` sends for one user message (keys in its order)."""
    body: dict[str, Any] = {"model": model, "stream": False, "options": options,
                            "messages": [{"role": "user", "content": prompt}], "tools": []}
    if think is not None:
        body["think"] = think
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# The fields of a chat reply and their plain JSON types: a reply made only of these is read directly.
_REPLY_FIELDS: dict[str, type] = {"model": str, "created_at": str, "done": bool, "done_reason": str,
                                  "total_duration": int, "load_duration": int, "prompt_eval_count": int,
                                  "prompt_eval_duration": int, "eval_count": int, "eval_duration": int}
_MESSAGE_FIELDS: dict[str, type] = {"role": str, "content": str, "thinking": str}
_COUNT_FIELDS = ("prompt_eval_count", "eval_count")


def _plain(obj: Any, fields: dict[str, type]) -> bool:
    """Every key known and of its exact type (or null): what pydantic would accept unchanged."""
    return isinstance(obj, dict) and all(
        key in fields and (value is None or type(value) is fields[key]) for key, value in obj.items())


def parse_chat_reply(status: int, payload: bytes, retry_after: str | None = None
                     ) -> tuple[Any, Any, Any, str | None, bool, Any]:
    """(content, prompt tokens, completion tokens, done reason, whether it holds reasoning, the model the
    reply names) of a chat reply, or the official client's
    error (carrying the reply's ``Retry-After`` as ``retry_after``, for the retry policy).

    The common shape is read directly; anything else goes through ``ollama.ChatResponse``, so a hostile
    or unusual reply fails (or passes) exactly as it does through the official client — except the content
    and the two token counts, which are handed on as they came, for the one check every backend's replies
    pass (``RemoteExplainer.checked``): a count that is no count is unknown, not the end of the reply.
    """
    if not 200 <= status < 300:
        import ollama  # lazy: loads httpx, ollama

        error = ollama.ResponseError(payload.decode("utf-8", errors="replace"), status)
        error.retry_after = retry_after  # type: ignore[attr-defined]
        raise error
    try:
        data = json.loads(payload)
    except ValueError:
        raise MalformedReply(f"the server's chat reply is not JSON ({payload[:60]!r})") from None
    if isinstance(data, dict):
        if data.get("message") is None and data.get("error") is not None:  # an error sent with status 200
            raise MalformedReply(f"the server answered with an error: {str(data['error'])[:300]}")
        counts = {key: data.pop(key) for key in _COUNT_FIELDS if key in data}
        message = data.get("message")
        content = message.pop("content", None) if isinstance(message, dict) else None
        rest = {k: v for k, v in data.items() if k != "message"}
        found = (content, counts.get("prompt_eval_count"), counts.get("eval_count"))
        if (isinstance(message, dict) and _plain(rest, _REPLY_FIELDS) and _plain(message, _MESSAGE_FIELDS)
                and isinstance(message.get("role"), str)):
            return (*found, data.get("done_reason"), bool(message.get("thinking")), data.get("model"))
    import ollama  # lazy: loads httpx, ollama

    if not isinstance(data, dict):
        raise MalformedReply(f"the server's chat reply is a JSON {type(data).__name__}, not an object")
    try:
        response = ollama.ChatResponse(**data)
    except Exception as exc:  # pydantic's ValidationError: many lines about the fields
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MalformedReply(f"the server's chat reply is not one Ollama sends ({first})") from None
    return (*found, response.done_reason, bool(response.message.thinking), response.model)
