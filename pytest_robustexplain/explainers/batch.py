"""Provider batches (``batch``): the calls the response cache cannot answer, sent as one batch through the
OpenAI-compatible ``/v1/files`` + ``/v1/batches`` flow and read back into the run as calls made.

A batch line is the request a live call sends (``OpenAICompatExplainer.chat_body``) under the call's cache key
(``custom_id``); its answer is read as a live reply is (``parse_completion``, ``checked``, ``explanation_of``:
empty, refused, cut and truncated replies alike) and kept for the run (``CachedExplainer.fresh``, so the sweep
counts it as a call made, priced at the batch price) and in the response cache. The batch in flight is kept
beside the cache (``batch-<model>-<batch>.json``): a run that stops at its deadline — or a CI job cancelled —
picks it up when it runs again instead of paying for the calls twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import BackendError, ConfigError
from ..sanitize import redact_url, visible
from .base import FAILURE_ERROR, Explanation
from .cache import CachedExplainer, cache_key
from .openai_compat import OpenAICompatExplainer, parse_completion
from .reply import MalformedReply
from .retry import describe_error

ENDED = ("completed", "failed", "expired", "cancelled")
POLL_FIRST_S, POLL_MOST_S = 0.2, 30.0  # the first look soon (a small batch may be done), then ever rarer
SAY_EVERY_S = 30.0  # progress said at most this often (and when the batch ends)


class BatchNotDone(BackendError):
    """The batch did not answer every call this run needs: still pending at the deadline, expired, failed or
    cancelled, or some of its lines failed. Said in one line; a rerun picks up where it stopped."""


@dataclass(frozen=True)
class _Call:
    identity: dict[str, Any]
    prompt: str
    seed: int


async def answer_by_batch(explainer: CachedExplainer, calls: Iterable[tuple[Any, Any, int, int]], *,
                          deadline: float | None, say: Callable[[str], None]) -> int:
    """Answer ``calls`` (``(history, item, seed, repeat)``, as the sweep makes them) that neither this run
    nor the response cache has answered, by batches; the calls answered. ``deadline``: ``time.monotonic()``
    past which a pending batch is left for the next run (:class:`BatchNotDone`)."""
    inner = explainer.inner
    if not isinstance(inner, OpenAICompatExplainer):
        raise ConfigError(f"batch: model {explainer.model!r} is not served by one OpenAI-compatible host "
                          "(batches are sent to one server's /v1/batches)")
    wanted: dict[str, _Call] = {}
    for history, item, seed, repeat in calls:
        identity = inner.request_identity(history, item, seed=seed, repeat=repeat)
        key = cache_key(identity)
        if key not in wanted and key not in explainer.fresh and not explainer.cache.has(key):
            wanted[key] = _Call(identity, inner.prompt.render(history, item), seed)
    # One record a batch in flight, named by the model and the batch: xdist workers' batches keep their own.
    prefix = f"batch-{hashlib.sha256(inner.model.encode()).hexdigest()[:12]}-"
    answered = 0
    async with inner.client() as client:
        while True:
            wanted = {key: call for key, call in wanted.items() if key not in explainer.fresh}
            if not wanted:
                return answered
            directory = explainer.cache.directory
            batch, sent, record = (await _resumed(client, directory, prefix, wanted, say)
                                   or await _submitted(client, inner, directory / prefix, wanted, say))
            batch = await _waited(client, batch, deadline, say)
            answered += await _read(client, batch, explainer, wanted)
            record.unlink(missing_ok=True)
            mine = sent & set(wanted)
            left = [key for key in mine if key not in explainer.fresh]
            if left:  # (a resumed batch's calls read, those it never held are sent next)
                raise BatchNotDone(await _unanswered(client, batch, len(left), len(mine)))


async def _resumed(client: Any, directory: Path, prefix: str, wanted: dict[str, _Call],
                   say: Callable[[str], None]) -> tuple[dict[str, Any], set[str], Path] | None:
    """A batch a previous run left pending for calls this run needs, looked at again, with its calls and its
    record; None without one."""
    for record in sorted(directory.glob(f"{prefix}*.json")):
        kept: Any = None
        with contextlib.suppress(OSError, ValueError):
            kept = json.loads(record.read_text(encoding="utf-8"))
        keys = set(kept.get("keys", ())) if isinstance(kept, dict) else set()
        if keys & set(wanted):
            batch = await _json(client.get(_path("batches", kept["id"])), "look at the pending batch")
            say(f"batch {_id(batch)}: picked up where the last run left it ({_counts(batch)})")
            return batch, keys, record
    return None


async def _submitted(client: Any, inner: OpenAICompatExplainer, prefix: Path, wanted: dict[str, _Call],
                     say: Callable[[str], None]) -> tuple[dict[str, Any], set[str], Path]:
    lines = "".join(json.dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions",
                                "body": inner.chat_body(call.prompt, seed=call.seed,
                                                        num_predict=inner.num_predict)}) + "\n"
                    for key, call in wanted.items())
    upload = {"file": ("robustexplain.jsonl", lines.encode(), "application/jsonl")}
    file = await _json(client.post("files", data={"purpose": "batch"}, files=upload), "upload the batch")
    asked = {"input_file_id": file.get("id"), "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = await _json(client.post("batches", json=asked), "create the batch")
    named = hashlib.sha256(str(batch.get("id")).encode()).hexdigest()[:12]  # (an id is the provider's text)
    record = prefix.with_name(f"{prefix.name}{named}.json")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"id": batch.get("id"), "model": inner.model, "keys": list(wanted)}),
                      encoding="utf-8")
    say(f"batch {_id(batch)}: {len(wanted)} calls to {inner.model} submitted to {redact_url(inner.host)}; "
        "waiting for it (a rerun picks it up if this run stops first)")
    return batch, set(wanted), record


async def _waited(client: Any, batch: dict[str, Any], deadline: float | None,
                  say: Callable[[str], None]) -> dict[str, Any]:
    """Look at the batch until it ends, saying its progress; past ``deadline``, :class:`BatchNotDone`."""
    delay, said = POLL_FIRST_S, time.monotonic()
    while batch.get("status") not in ENDED:
        if deadline is not None and time.monotonic() + delay > deadline:
            raise BatchNotDone(f"batch {_id(batch)} is still {_id(batch, 'status')} ({_counts(batch)}) "
                               "when the run's max-minutes runs out: run the same command again to pick it "
                               "up (nothing is sent twice)")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, POLL_MOST_S)
        batch = await _json(client.get(_path("batches", batch.get("id"))), "look at the batch")
        if time.monotonic() - said >= SAY_EVERY_S:
            said = time.monotonic()
            say(f"batch {_id(batch)}: {_id(batch, 'status')} ({_counts(batch)})")
    return batch


async def _read(client: Any, batch: dict[str, Any], explainer: CachedExplainer, wanted: dict[str, _Call]
                ) -> int:
    """Every answered line of an ended batch, read as a live reply and kept; the lines read."""
    inner = explainer.inner
    assert isinstance(inner, OpenAICompatExplainer)
    if not batch.get("output_file_id"):
        return 0
    try:
        response = await client.get(_path("files", batch["output_file_id"], "content"))
    except Exception as exc:
        raise BackendError(f"batch: could not read the batch's answers: {describe_error(exc)}") from None
    _raise(response, "read the batch's answers")
    read = 0
    for text in response.text.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            line = json.loads(text)
            call = wanted.get(line["custom_id"])
            answer = line.get("response") or {}
            if call is None:
                continue
            try:
                if answer.get("status_code") != 200:
                    said = json.dumps(answer.get("body"))[:200]
                    raise ValueError(f"HTTP {answer.get('status_code')} {said}")
                reply = inner.checked(parse_completion(answer["body"], json.dumps(answer["body"])))
                explanation = inner.explanation_of(call.prompt, reply, 0.0)
            except (MalformedReply, ValueError) as exc:  # the provider's answer to this line: a failed call,
                explanation = Explanation(text="", model=inner.model, failure=FAILURE_ERROR,  # as live
                                          detail=f"batch: {exc}")
            explainer.fresh[line["custom_id"]] = explanation
            if explanation.ok:
                await asyncio.to_thread(explainer.cache.put, line["custom_id"], call.identity, explanation)
            read += 1
    return read


async def _unanswered(client: Any, batch: dict[str, Any], left: int, total: int) -> str:
    """The one line an ended batch with unanswered calls is said in: why, how many, what to do."""
    why = {"expired": "expired (the provider's completion window ran out)", "failed": "failed",
           "cancelled": "was cancelled"}.get(str(batch.get("status")), "ended")
    return (f"batch {_id(batch)} {why} with {left} of its {total} calls unanswered"
            f"{await _first_error(client, batch)}; the {total - left} answered are kept in the response "
            f"cache: run the same command again to send the {left} in a new batch")


async def _first_error(client: Any, batch: dict[str, Any]) -> str:
    """The first failed line's (or the batch's own) error, as `` (first: …)``; "" when none is said."""
    errors = batch.get("errors")
    said = errors.get("data") if isinstance(errors, dict) else None
    if isinstance(said, list) and said and isinstance(said[0], dict):
        return f" (first: {visible(str(said[0].get('message')))[:200]})"
    with contextlib.suppress(Exception):  # the error file is a courtesy: the count above is the fact
        if batch.get("error_file_id"):
            response = await client.get(_path("files", batch["error_file_id"], "content"))
            error = json.loads(response.text.splitlines()[0]).get("error") or {}
            return f" (first: {visible(str(error.get('message')))[:200]})"
    return ""


def _path(*parts: Any) -> str:
    """A path below the API's base from the provider's ids (quoted: an id is its text, never a path)."""
    return "/".join(quote(str(part), safe="") for part in parts)


def _id(batch: dict[str, Any], field: str = "id") -> str:
    """A batch's id (or another of its fields) as a message may show it: the provider's text, made visible."""
    return visible(str(batch.get(field)))[:80]


def _counts(batch: dict[str, Any]) -> str:
    counts = batch.get("request_counts")
    counts = counts if isinstance(counts, dict) else {}
    return (f"{counts.get('completed', 0)} of {counts.get('total', '?')} answered, "
            f"{counts.get('failed', 0)} failed")


async def _json(request: Any, what: str) -> dict[str, Any]:
    try:
        response = await request
    except Exception as exc:
        raise BackendError(f"batch: could not {what}: {describe_error(exc)}") from None
    _raise(response, what)
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise BackendError(f"batch: could not {what}: the server answered {response.text[:200]!r}")
    return data


def _raise(response: Any, what: str) -> None:
    if response.status_code >= 400:
        raise BackendError(f"batch: could not {what}: HTTP {response.status_code} {response.text[:200]!r} — "
                           "does this server offer the batch API (/v1/files, /v1/batches)?")
