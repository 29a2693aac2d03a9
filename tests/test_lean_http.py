"""The lean generation path to plain-http Ollama servers says and does what the official client does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

import ollama
import pydantic
import pytest

from pytest_robustexplain.data import Interaction, Item, UserHistory
from pytest_robustexplain.errors import BackendError
from pytest_robustexplain.explainers.lean_http import (
    LeanOllamaHttp,
    NotPlain,
    parse_chat_reply,
    plain_show,
    plain_tags,
    plain_version,
)
from pytest_robustexplain.explainers.ollama import OllamaExplainer
from pytest_robustexplain.explainers.retry import RetryPolicy
from pytest_robustexplain.testing import FakeOllamaServer

T = TypeVar("T")
ITEM = Item("E1", "Smart Watch", "Electronics")
HISTORY = UserHistory("u1", tuple(Interaction(f"I{k}", "Books", 1_700_000_000 + k, 4.0, f"Book {k}")
                                  for k in range(4)))


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def no_sleep(_seconds: float) -> None:
    return None


async def explain_twice(explainer: OllamaExplainer) -> list[Any]:
    results = [await explainer.explain(HISTORY, ITEM, seed=s, repeat=0) for s in (1, 2)]
    await explainer.aclose()
    return results


def official_only(explainer: OllamaExplainer) -> OllamaExplainer:
    """The same explainer with the official client for every request (as for https hosts)."""
    explainer._make_client = explainer._official_client  # type: ignore[method-assign]
    return explainer


@pytest.mark.parametrize("think_capable", [False, True])
def test_the_server_sees_the_same_requests_from_both_paths(think_capable: bool) -> None:
    seen = []
    for lean in (True, False):
        with FakeOllamaServer(think_capable=think_capable) as server:
            explainer = OllamaExplainer("fake-model", host=server.url)
            results = run(explain_twice(explainer if lean else official_only(explainer)))
            seen.append(([r.text for r in results], server.requests))
    (lean_texts, lean_requests), (official_texts, official_requests) = seen
    assert lean_texts == official_texts and all(lean_texts)
    assert lean_requests == official_requests
    assert [r["think"] for r in lean_requests[1:]] == [False if think_capable else None] * 2


def test_connections_are_kept_alive_and_reused() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, concurrency=2)

        async def go() -> None:
            await asyncio.gather(*(explainer.explain(HISTORY, ITEM, seed=s, repeat=0) for s in range(12)))
            await explainer.aclose()

        run(go())
        assert server.chat_calls == 13  # the warm-up and 12 explanations
        # preflight's official client and the httpx client asking for the version: one each; the lean
        # pool: at most one per concurrent request.
        assert server.connections_opened <= 2 + 2


def test_a_refused_connection_is_the_official_clients_error() -> None:
    async def go() -> BaseException:
        with FakeOllamaServer() as server:
            url = server.url
        lean = LeanOllamaHttp(url, connect_timeout=1.0, read_timeout=1.0)
        with pytest.raises(ConnectionError) as caught:
            await lean.post("/api/chat", b"{}")
        return caught.value

    error = run(go())
    assert type(error) is ConnectionError and "Failed to connect to Ollama" in str(error)


@pytest.mark.parametrize("fault", ["fail503", "fail500", "drop", "empty", "refuse"])
def test_faults_end_alike_on_both_paths(fault: str) -> None:
    details = []
    for lean in (True, False):
        with FakeOllamaServer() as server:
            explainer = OllamaExplainer("fake-model", host=server.url,
                                        retry=RetryPolicy(max_attempts=2, sleep=no_sleep))
            explainer = explainer if lean else official_only(explainer)

            async def go(explainer: OllamaExplainer = explainer) -> Any:
                await explainer.explain(HISTORY, ITEM, seed=0, repeat=0)
                scripted = {"fail503": lambda: server.fail_next(2, status=503),
                            "fail500": lambda: server.fail_next(2, status=500),
                            "drop": lambda: server.drop_next(2), "empty": lambda: server.empty_next(1),
                            "refuse": lambda: server.refuse_next(1)}
                scripted[fault]()
                result = await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
                await explainer.aclose()
                return result

            result = run(go())
            details.append((result.failure, result.detail, explainer.stats.retries))
    assert details[0] == details[1] and details[0][0] is not None


def _payload(**fields: Any) -> bytes:
    base = {"model": "m", "created_at": "2024-01-01T00:00:00Z", "done": True, "done_reason": "stop",
            "message": {"role": "assistant", "content": "A fine watch."}, "prompt_eval_count": 12,
            "eval_count": 4}
    return json.dumps({**base, **fields}).encode()


@pytest.mark.parametrize("payload", [
    _payload(),
    _payload(message={"role": "assistant", "content": None}),
    _payload(message={"role": "assistant", "content": "x", "thinking": "hmm"}),
    _payload(eval_count="7"),  # pydantic coerces it
    _payload(eval_count=2.0),
    _payload(done="maybe"),  # pydantic refuses it
    _payload(message={"content": "no role"}),
    _payload(message="just text"),
    _payload(extra={"unknown": 1}),
    b"[1, 2]",
])
def test_replies_parse_exactly_as_the_official_response_model(payload: bytes) -> None:
    def official() -> Any:
        response = ollama.ChatResponse(**json.loads(payload))
        return (response.message.content, response.prompt_eval_count, response.eval_count,
                response.done_reason, bool(response.message.thinking))

    from pytest_robustexplain.explainers.reply import MalformedReply

    # The same replies pass, with the same values; the same replies are refused — the official model with
    # its own exception, the lean path with one sentence saying what was wrong.
    outcomes: list[Any] = []
    for parse in (official, lambda: parse_chat_reply(200, payload)):
        try:
            outcomes.append(parse())
        except (pydantic.ValidationError, TypeError, MalformedReply):
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1]


# ------------------------------------------------------------------------------------------ preflight
@pytest.mark.parametrize(("model", "think_capable"), [("fake-model", False), ("fake-model:latest", True)])
def test_preflight_gives_the_same_model_facts_on_both_paths(model: str, think_capable: bool) -> None:
    with FakeOllamaServer(think_capable=think_capable) as server:
        infos = [run(OllamaExplainer(model, host=server.url).preflight()),
                 run(official_only(OllamaExplainer(model, host=server.url)).preflight())]
    assert infos[0] == infos[1]
    assert infos[0].digest and infos[0].extra["capabilities"]
    assert ("thinking" in infos[0].extra["capabilities"]) is think_capable


PREFLIGHT_WITHOUT_THE_OFFICIAL_CLIENT = """
import asyncio, sys
from pytest_robustexplain.explainers.ollama import OllamaExplainer
explainer = OllamaExplainer("fake-model", host=sys.argv[1])
info = asyncio.run(explainer.preflight())
assert info.digest, info
heavy = [m for m in ("ollama", "httpx", "pydantic") if m in sys.modules]
assert not heavy, heavy
"""


def test_preflight_of_a_plain_http_server_needs_no_official_client() -> None:
    with FakeOllamaServer() as server:
        subprocess.run([sys.executable, "-c", PREFLIGHT_WITHOUT_THE_OFFICIAL_CLIENT, server.url], check=True)


def test_preflight_failures_are_the_official_paths_errors() -> None:
    messages = []
    with FakeOllamaServer() as server:
        for lean in (True, False):
            missing = OllamaExplainer("no-such-model", host=server.url)
            with pytest.raises(BackendError) as caught:
                run((missing if lean else official_only(missing)).preflight())
            messages.append(str(caught.value))
    assert messages[0] == messages[1] and "ollama pull no-such-model" in messages[0]


NOW = "2024-05-10T11:20:05.123456789-07:00"
DETAILS = {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
           "parameter_size": "8.0B", "quantization_level": "Q4_K_M"}
TAG = {"name": "m:latest", "model": "m:latest", "modified_at": NOW, "size": 4_700_000_000,
       "digest": "ab" * 32, "details": DETAILS}
SHOW = {"license": "", "modelfile": "FROM x", "parameters": "", "template": "{{ .Prompt }}",
        "details": DETAILS, "model_info": {"general.architecture": "llama"}, "capabilities": ["completion"],
        "modified_at": NOW}


def _tags(**fields: Any) -> bytes:
    return json.dumps({"models": [{**TAG, **fields}]}).encode()


def _show(**fields: Any) -> bytes:
    return json.dumps({key: value for key, value in {**SHOW, **fields}.items() if value != "DROP"}).encode()


@pytest.mark.parametrize("payload", [
    _tags(), _tags(size=None, digest=None, details=None), _tags(remote_host="x", expires_at="soon"),
    _tags(size="4GB"),  # pydantic reads a size with units
    _tags(size=-1), _tags(model=7), _tags(modified_at="yesterday"), _tags(modified_at="2024-02-30T00:00:00Z"),
    _tags(modified_at="2024-05-10T11:20:05.5+25:00"), _tags(details={**DETAILS, "families": "llama"}),
    _tags(details={**DETAILS, "parameter_size": 8}), _tags(details=[]),
    b'{"models": null}', b'{"models": [1]}', b"[]", b"not json",
])
def test_tags_are_read_plainly_or_left_to_the_official_model(payload: bytes) -> None:
    def official() -> Any:
        return [(m.model, m.digest, m.size, m.details.model_dump() if m.details else None)
                for m in ollama.ListResponse(**json.loads(payload)).models]

    def lean() -> Any:
        return [(e.get("model"), e.get("digest"), e.get("size"),
                 {**dict.fromkeys(DETAILS), **e["details"]} if e.get("details") is not None else None)
                for e in plain_tags(200, payload)]

    _agree_or_hand_over(official, lean)


@pytest.mark.parametrize("payload", [
    _show(), _show(details=None, capabilities=None), _show(tensors=[], system="be brief"),
    _show(model_info="DROP"),  # the official model requires it
    _show(model_info=None), _show(capabilities=["completion", 3]), _show(license=5),
    _show(modified_at="2024-13-01T00:00:00Z"), b"{}",
])
def test_show_is_read_plainly_or_left_to_the_official_model(payload: bytes) -> None:
    def official() -> Any:
        shown = ollama.ShowResponse(**json.loads(payload))
        return shown.details.model_dump() if shown.details else None, shown.capabilities

    def lean() -> Any:
        shown = plain_show(200, payload)
        details = shown.get("details")
        full = {**dict.fromkeys(DETAILS), **details} if details is not None else None
        return full, shown.get("capabilities")

    _agree_or_hand_over(official, lean)


def _agree_or_hand_over(official: Any, lean: Any) -> None:
    """The lean reading equals the official one, or it hands over (NotPlain) — never a different answer;
    what the official model refuses, the lean path never reads."""
    try:
        expected: Any = official()
    except (pydantic.ValidationError, TypeError, ValueError) as exc:
        expected = type(exc)
    with contextlib.suppress(NotPlain):
        assert lean() == expected


def test_version_and_error_statuses() -> None:
    assert plain_tags(200, _tags())[0]["model"] == "m:latest"  # what Ollama sends is read plainly
    assert plain_show(200, _show())["capabilities"] == ["completion"]
    assert plain_version(200, b'{"version": "0.5.7"}') == "0.5.7"
    assert plain_version(404, b"404 page not found") is None  # very old servers, as the official path
    for status, payload in ((500, b'{"error": "boom"}'), (200, b"[]"), (200, b"<html>")):
        with pytest.raises(NotPlain):
            plain_version(status, payload)
    with pytest.raises(NotPlain):
        plain_tags(503, _tags())
