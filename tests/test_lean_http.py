"""The lean generation path to plain-http Ollama servers says and does what the official client does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

import ollama
import pydantic
import pytest

from pytest_robustexplain.data import Interaction, Item, UserHistory
from pytest_robustexplain.explainers.lean_http import LeanOllamaHttp, parse_chat_reply
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
        return response.message.content, response.prompt_eval_count, response.eval_count

    outcomes = []
    for parse in (official, lambda: parse_chat_reply(200, payload)):
        try:
            outcomes.append(parse())
        except (pydantic.ValidationError, TypeError) as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]
