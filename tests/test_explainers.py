"""Explainers: prompt rendering, reply classification, retry policy, template and callable explainers,
and the Ollama / OpenAI-compatible backends against the fake Ollama server (real HTTP, real clients)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from pytest_robustexplain.data import Interaction, Item, UserHistory
from pytest_robustexplain.errors import BackendError, ConfigError, RobustExplainWarning
from pytest_robustexplain.explainers import make_explainer
from pytest_robustexplain.explainers.base import Explainer, ModelInfo
from pytest_robustexplain.explainers.callable import CallableExplainer, wrap_explainer
from pytest_robustexplain.explainers.ollama import OllamaExplainer, resolve_host
from pytest_robustexplain.explainers.openai_compat import OpenAICompatExplainer
from pytest_robustexplain.explainers.prompt import (
    DEFAULT_TEMPLATE,
    PromptTemplate,
    format_features,
    format_history,
)
from pytest_robustexplain.explainers.reply import finish_reply, refusal_reason, strip_think
from pytest_robustexplain.explainers.retry import RetryExhaustedError, RetryPolicy, is_retryable
from pytest_robustexplain.explainers.template import TemplateExplainer, compose_explanation
from pytest_robustexplain.testing import REFUSAL_TEXT, FakeOllamaServer, parse_prompt

T = TypeVar("T")

DAY = 86_400
T0 = 1_709_251_200  # 2024-03-01 00:00:00 UTC


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


def fast_retry(max_attempts: int = 4) -> RetryPolicy:
    return RetryPolicy(max_attempts=max_attempts, sleep=no_sleep)


def make_history(n: int = 6, user: str = "u1") -> UserHistory:
    cats = ["Electronics", "Electronics", "Books", "Electronics", "Home", "Books"]
    return UserHistory(user, tuple(
        Interaction(f"E{i:03d}", cats[i % len(cats)], T0 + i * DAY, 3.0 + (i % 3) * 0.5, f"Title {i}")
        for i in range(n)
    ))


ITEM = Item("E900", "Smart Watch", "Electronics",
            {"price": 199.0, "brand": "Acme", "colors": ["black", "red"]})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------------- prompt
def test_default_prompt_layout_and_missing_values() -> None:
    history = UserHistory("u1", (
        Interaction("E012", "Electronics", T0, 4.5, "Wireless Earbuds Pro"),
        Interaction("E077"),
    ))
    text = PromptTemplate().render(history, ITEM)
    assert text == (
        "Given the user's interaction history:\n"
        "1. Wireless Earbuds Pro (id E012) — category: Electronics; rating: 4.5; date: 2024-03-01\n"
        "2. unknown (id E077) — category: unknown; rating: unknown; date: unknown\n"
        'explain why the item "Smart Watch" with features category: Electronics; brand: Acme; '
        "colors: black, red; price: 199 is recommended. Focus on connecting the user's demonstrated "
        "preferences to the item's characteristics."
    )
    # The fake server reads the same layout back.
    parsed = parse_prompt(text)
    assert parsed.item == "Smart Watch"
    assert [e.title for e in parsed.history] == ["Wireless Earbuds Pro", None]
    assert parsed.history[0].category == "Electronics"


def test_item_without_title_or_category() -> None:
    item = Item("X1")
    assert format_features(item) == "category: unknown"
    assert '"X1"' in PromptTemplate().render(make_history(1), item)
    assert format_history(UserHistory("u", ())) == "(no interactions)"


def test_custom_placeholders_render() -> None:
    template = PromptTemplate("{user_id}/{n_interactions}/{item_id}/{item_category}\n{history}")
    text = template.render(make_history(2), ITEM)
    assert text.startswith("u1/2/E900/Electronics\n1. Title 0 (id E000)")


def test_unknown_placeholder_names_it_the_source_and_allowed_names() -> None:
    with pytest.raises(ConfigError) as info:
        PromptTemplate("{history} and {hstory}")
    message = str(info.value)
    assert "{hstory}" in message and "template string" in message
    assert "{history}" in message and "{n_interactions}" in message


def test_template_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "prompt.txt"
    bad.write_text("{history}\nWhy {item.title}?", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prompt\.txt.*\{item\.title\}"):
        PromptTemplate.from_file(bad)
    good = tmp_path / "good.txt"
    good.write_text("{history}\n{item}", encoding="utf-8")
    assert PromptTemplate.from_file(good).render(make_history(1), ITEM).endswith("Smart Watch")
    with pytest.raises(ConfigError, match=r"missing\.txt"):
        PromptTemplate.from_file(tmp_path / "missing.txt")


@pytest.mark.parametrize("template, fragment", [
    ("Explain {item}", "no {history}"),
    ("{history} {", "malformed"),
    ("{history} {}", "positional"),
    ("{history} {n_interactions:q}", "cannot be rendered"),
    # A hostile or mistaken padding would build a 300-million-character prompt per call: refused up front.
    ("{history:>300000000}", "width or precision of 300,000,000 characters"),
    ("{history} {item:.5000}", "width or precision of 5,000"),
])
def test_invalid_templates(template: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
        PromptTemplate(template)


def test_default_template_is_the_papers() -> None:
    assert PromptTemplate().is_default
    assert "Focus on connecting the user's demonstrated preferences" in DEFAULT_TEMPLATE


# ------------------------------------------------------------------------------------------ reply
@pytest.mark.parametrize("raw, expected", [
    ("<think>plan</think>\n\nAnswer.", "Answer."),
    ("<THINK>a\nb</THINK>Answer <think>x</think>here", "Answer here"),
    ("<think>ran out of tokens while thinking", ""),
    ("reasoning leaked</think>The answer", "The answer"),
    ("No think block", "No think block"),
])
def test_strip_think(raw: str, expected: str) -> None:
    assert strip_think(raw) == expected


def test_refusal_detection() -> None:
    assert refusal_reason(REFUSAL_TEXT)
    assert refusal_reason("I cannot help with requests like this.")
    assert refusal_reason("As an AI language model, I cannot recommend products.")
    assert refusal_reason("The watch fits your love of gadgets.") is None
    # A long answer that merely opens apologetically is an answer, not a refusal.
    long_answer = "As an AI, I don't have preferences, but " + "this item matches your history. " * 20
    assert refusal_reason(long_answer) is None
    refused = finish_reply(REFUSAL_TEXT, model="m", latency_s=0.1)
    assert refused.failure == "refusal" and refused.text == "" and "sorry" in refused.detail
    empty = finish_reply("<think>only thoughts</think>  ", model="m", latency_s=0.1)
    assert empty.failure == "empty" and "think" in empty.detail


# ------------------------------------------------------------------------------------------ retry
def _status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://x/api/chat")
    return httpx.HTTPStatusError("boom", request=request, response=httpx.Response(status, request=request))


def test_retry_classification() -> None:
    for status in (429, 500, 502, 503, 504):
        assert is_retryable(_status_error(status))
    for status in (400, 401, 404):
        assert not is_retryable(_status_error(status))
    request = httpx.Request("GET", "http://x")
    assert is_retryable(httpx.ReadTimeout("slow", request=request))
    assert is_retryable(httpx.RemoteProtocolError("dropped", request=request))
    assert not is_retryable(httpx.ConnectError("refused", request=request))
    assert not is_retryable(ConnectionError("ollama's wrapper for refused connections"))
    assert is_retryable(ConnectionResetError("reset by peer"))
    assert not is_retryable(ValueError("bug"))


def test_retry_policy_backoff_and_exhaustion() -> None:
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)

    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise _status_error(503)
        return "ok"

    policy = RetryPolicy(max_attempts=4, base_delay=0.5, max_delay=8.0, seed=7, sleep=record)
    assert run(policy.run(flaky)) == "ok"
    assert calls == 3 and len(delays) == 2
    assert 0 <= delays[0] <= 0.5 and 0 <= delays[1] <= 1.0
    # Seeded jitter: the same seed gives the same delays.
    again = RetryPolicy(seed=7)
    assert [again.backoff(1), again.backoff(2)] == delays

    async def always_503() -> str:
        raise _status_error(503)

    with pytest.raises(RetryExhaustedError, match=r"4 attempts failed.*503"):
        run(RetryPolicy(max_attempts=4, sleep=record).run(always_503))

    count_404 = 0

    async def not_found() -> str:
        nonlocal count_404
        count_404 += 1
        raise _status_error(404)

    with pytest.raises(httpx.HTTPStatusError):
        run(RetryPolicy(sleep=record).run(not_found))
    assert count_404 == 1
    assert max(RetryPolicy(base_delay=1.0, max_delay=2.0).backoff(10) for _ in range(50)) <= 2.0


# --------------------------------------------------------------------------------------- template
def test_template_explainer_is_deterministic_and_not_an_llm() -> None:
    explainer = TemplateExplainer()
    history = make_history(6)
    first = run(explainer.explain(history, ITEM, seed=1, repeat=0))
    second = run(explainer.explain(history, ITEM, seed=99, repeat=3))
    assert first.ok and first.text == second.text
    assert "Electronics" in first.text and "Smart Watch" in first.text
    info = run(explainer.preflight())
    assert info.is_llm is False and "not a language model" in info.label()
    assert isinstance(explainer, Explainer)


def test_template_explainer_reacts_to_perturbations() -> None:
    history = make_history(6)
    base = compose_explanation(history, ITEM)
    shuffled = UserHistory("u1", history.interactions[::-1])
    assert compose_explanation(shuffled, ITEM) != base  # the "most recent" sentence changes
    drifted = UserHistory("u1", tuple(
        Interaction(i.item_id, "Toys", i.timestamp, i.rating, i.title) for i in history))
    assert "Toys" in compose_explanation(drifted, ITEM) and "broadens" in compose_explanation(drifted, ITEM)
    no_ratings = UserHistory("u1", tuple(Interaction(i.item_id, i.category) for i in history))
    assert "None of your interactions carry a rating" in compose_explanation(no_ratings, ITEM)
    assert "no recorded interactions" in compose_explanation(UserHistory("u1", ()), ITEM)
    # Small changes leave most of the text in place (realistic, not all-or-nothing).
    noisy = UserHistory("u1", (*history.interactions, Interaction("Z1", "Electronics", T0, 2.0, "Cable")))
    shared = set(base.split()) & set(compose_explanation(noisy, ITEM).split())
    assert len(shared) > 0.6 * len(set(base.split()))


# --------------------------------------------------------------------------------------- callable
def plain_explainer(history: UserHistory, item: Item) -> str:
    return f"{item.title} for {history.user_id} on {threading.current_thread().name}"


async def async_explainer(history: UserHistory, item: Item) -> str:
    await asyncio.sleep(0)
    return f"async {item.title}"


def test_callable_sync_runs_in_a_thread_and_async_is_awaited() -> None:
    sync = CallableExplainer(plain_explainer)
    result = run(sync.explain(make_history(2), ITEM, seed=0, repeat=0))
    assert result.ok and result.model == "plain_explainer"
    assert threading.current_thread().name not in result.text
    asynchronous = wrap_explainer(async_explainer)
    assert run(asynchronous.explain(make_history(2), ITEM, seed=0, repeat=0)).text == "async Smart Watch"
    assert asynchronous.model == "async_explainer"
    assert CallableExplainer(plain_explainer, model="mine").model == "mine"


def test_callable_errors_become_failures() -> None:
    def broken(history: UserHistory, item: Item) -> str:
        raise RuntimeError("model exploded")

    def wrong_type(history: UserHistory, item: Item) -> Any:
        return 42

    failed = run(CallableExplainer(broken).explain(make_history(1), ITEM, seed=0, repeat=0))
    assert failed.failure == "error" and "RuntimeError: model exploded" in failed.detail
    wrong = run(CallableExplainer(wrong_type).explain(make_history(1), ITEM, seed=0, repeat=0))
    assert wrong.failure == "error" and "returned int" in wrong.detail
    empty = run(CallableExplainer(lambda h, i: "  ").explain(make_history(1), ITEM, seed=0, repeat=0))
    assert empty.failure == "empty"


def test_callable_concurrency_is_bounded() -> None:
    lock = threading.Lock()
    active = peak = 0

    def slow(history: UserHistory, item: Item) -> str:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1
        return "done"

    explainer = CallableExplainer(slow, concurrency=3)

    async def many() -> list[Any]:
        return await asyncio.gather(*(explainer.explain(make_history(1), ITEM, seed=0, repeat=r)
                                      for r in range(12)))

    assert all(e.ok for e in run(many()))
    assert peak == 3


def test_wrap_explainer() -> None:
    template = TemplateExplainer()
    assert wrap_explainer(template) is template
    with pytest.raises(ConfigError, match="Explainer protocol"):
        wrap_explainer(42)


# ----------------------------------------------------------------------------------------- ollama
def test_resolve_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert resolve_host(None) == "http://127.0.0.1:11434"
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:9999")
    assert resolve_host(None) == "http://127.0.0.1:9999"
    assert resolve_host("https://gpu.example") == "https://gpu.example:443"
    assert resolve_host("localhost") == "http://localhost:11434"


async def _warm(explainer: OllamaExplainer | OpenAICompatExplainer, server: FakeOllamaServer) -> None:
    """Preflight and warm up, then forget the server's counters so a test sees only its own calls."""
    await explainer.explain(make_history(1, "warm"), ITEM, seed=0, repeat=0)
    server.reset_stats()


def test_ollama_preflight_and_options() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, num_predict=100, retry=fast_retry())

        async def go() -> Any:
            info = await explainer.preflight()
            result = await explainer.explain(make_history(4), ITEM, seed=1234, repeat=0)
            await explainer.aclose()
            return info, result

        info, result = run(go())
        assert info.name == "fake-model:latest" and info.digest and info.digest.startswith("sha256:")
        assert info.server_version == "0.12.6" and info.parameter_size and info.quantization
        assert result.ok and result.prompt_tokens and result.completion_tokens and result.latency_s > 0
        warmup, real = server.requests
        assert explainer.stats.warmup_calls == 1 and explainer.stats.requests == 1
        assert real["options"] == {"temperature": 0.0, "seed": 1234, "num_predict": 100, "num_ctx": 4096}
        assert warmup["options"]["num_ctx"] == 4096  # same context size: no model reload
        assert real["think"] is None  # not a thinking model: the field is not sent
        assert real["prompt"] == explainer.prompt.render(make_history(4), ITEM)


def test_ollama_concurrency_never_exceeds_the_limit() -> None:
    with FakeOllamaServer(latency=0.05, capacity=None) as server:
        explainer = OllamaExplainer("fake-model", host=server.url, concurrency=4, retry=fast_retry())

        async def go() -> list[Any]:
            await _warm(explainer, server)
            results = await asyncio.gather(*(
                explainer.explain(make_history(3, f"u{i}"), ITEM, seed=i, repeat=0) for i in range(20)))
            await explainer.aclose()
            return results

        results = run(go())
        assert all(r.ok for r in results)
        assert server.chat_calls == 20
        assert 2 <= server.peak_in_flight <= 4


def test_ollama_503_bursts_are_retried_and_no_pair_is_lost() -> None:
    with FakeOllamaServer() as server:
        # Faults go to requests in the order they reach the server, and a request retrying at once can
        # reach it again before its three siblings do (seen under load: one request took 4 of the 6
        # faults and ran out of 4 attempts). With more attempts than scripted faults, no ordering of
        # arrivals can lose a pair, which is what this test is about.
        explainer = OllamaExplainer("fake-model", host=server.url, concurrency=4, retry=fast_retry(7))

        async def go() -> list[Any]:
            await _warm(explainer, server)
            server.fail_next(3, status=503)
            server.fail_next(2, status=500)
            server.drop_next(1)
            results = await asyncio.gather(*(
                explainer.explain(make_history(3, f"u{i}"), ITEM, seed=i, repeat=0) for i in range(10)))
            await explainer.aclose()
            return results

        results = run(go())
        assert all(r.ok for r in results), [r.detail for r in results if not r.ok]
        assert explainer.stats.retries == 6 and server.chat_calls == 16


def test_ollama_read_timeout_is_retried() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, read_timeout=0.3, retry=fast_retry())

        async def go() -> Any:
            await _warm(explainer, server)
            server.hang_next(1, seconds=1.0)
            result = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return result

        assert run(go()).ok
        assert explainer.stats.retries == 1


def test_ollama_exhausted_retries_become_an_error_failure() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, retry=fast_retry(max_attempts=3))

        async def go() -> Any:
            await _warm(explainer, server)
            server.fail_next(3, status=503)
            result = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            after = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return result, after

        failed, after = run(go())
        assert failed.failure == "error" and failed.text == ""
        assert "3 attempts failed" in failed.detail and "503" in failed.detail
        assert after.ok  # one failed pair does not poison the explainer


def test_ollama_failed_warm_up_does_not_decide_the_run() -> None:
    with FakeOllamaServer() as server:
        server.fail_next(3, status=500)  # a crashed runner during the warm-up only
        explainer = OllamaExplainer("fake-model", host=server.url, retry=fast_retry(max_attempts=3))

        async def go() -> Any:
            result = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return result

        assert run(go()).ok
        assert explainer.stats.warmup_calls == 3
        assert explainer.warmup_error is not None and "500" in explainer.warmup_error


def test_ollama_missing_model_gives_the_pull_hint_once() -> None:
    with FakeOllamaServer(models=("other:latest",)) as server:
        explainer = OllamaExplainer("llama3.1:8b", host=server.url, retry=fast_retry())

        async def go() -> list[Any]:
            with pytest.raises(BackendError) as first:
                await explainer.preflight()
            assert str(first.value) == (
                f"model llama3.1:8b not found on {server.url}; run `ollama pull llama3.1:8b`")
            outcomes = await asyncio.gather(
                *(explainer.explain(make_history(2), ITEM, seed=0, repeat=r) for r in range(5)),
                return_exceptions=True)
            await explainer.aclose()
            return [first.value, *outcomes]

        errors = run(go())
        assert all(e is errors[0] for e in errors)  # the same error, raised once and remembered
        assert server.calls["/api/tags"] == 1 and server.chat_calls == 0


def test_ollama_404_during_explain_is_fatal_not_a_failure() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("ghost", host=server.url, retry=fast_retry())
        # Model facts recorded earlier (e.g. from a cache) for a model the server no longer has.
        explainer.use_model_info(ModelInfo(name="ghost:latest", backend="ollama", digest="sha256:" + "0" * 8))

        async def go() -> list[Any]:
            outcomes = await asyncio.gather(
                *(explainer.explain(make_history(2), ITEM, seed=0, repeat=r) for r in range(6)),
                return_exceptions=True)
            await explainer.aclose()
            return outcomes

        outcomes = run(go())
        assert all(isinstance(o, BackendError) and "ollama pull ghost" in str(o) for o in outcomes)
        assert server.chat_calls == 1  # the warm-up found it; nobody else asked


def test_ollama_dead_server_fails_fast_with_one_clear_error() -> None:
    host = f"http://127.0.0.1:{free_port()}"
    explainer = OllamaExplainer("fake-model", host=host, concurrency=4)

    async def go() -> list[Any]:
        outcomes = await asyncio.gather(
            *(explainer.explain(make_history(2), ITEM, seed=0, repeat=r) for r in range(8)),
            return_exceptions=True)
        await explainer.aclose()
        return outcomes

    outcomes = run(go())
    # Fast because nothing is retried: a refused connection means nobody listens (no backoff to wait out).
    assert explainer.stats.retries == 0
    assert all(o is outcomes[0] for o in outcomes)
    assert isinstance(outcomes[0], BackendError)
    assert str(outcomes[0]) == (
        f"cannot reach Ollama at {host} (connection refused). Start it with `ollama serve` or set "
        "--robustexplain-host / OLLAMA_HOST.")


def test_ollama_thinking_models_get_think_false_and_leaks_are_stripped() -> None:
    with FakeOllamaServer(think_capable=True, leak_thinking=True) as server:
        explainer = OllamaExplainer("fake-model", host=server.url, retry=fast_retry())

        async def go() -> Any:
            info = await explainer.preflight()
            result = await explainer.explain(make_history(3), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return info, result

        info, result = run(go())
        assert "thinking" in info.extra["capabilities"]
        assert all(r["think"] is False for r in server.requests)
        assert result.ok and "<think>" not in result.text and "</think>" not in result.text
        assert result.text.startswith("We recommend")


def test_ollama_empty_and_refused_replies_are_failures() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, retry=fast_retry())

        async def go() -> Any:
            await _warm(explainer, server)
            server.empty_next(1)
            empty = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            server.refuse_next(1)
            refused = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return empty, refused

        empty, refused = run(go())
        assert empty.failure == "empty" and empty.text == ""
        assert refused.failure == "refusal" and refused.text == "" and REFUSAL_TEXT in refused.detail


@pytest.mark.parametrize("fault", ["extra_next", "trailers_next"])
def test_a_second_reply_on_the_connection_or_chunked_trailers_leave_the_answer_whole(fault: str) -> None:
    """The fake server's documented faults for HTTP a proxy may add (a second, unasked reply left on the
    connection; a chunked body with trailers): the answer is read whole, and the next call is not the
    left-over reply (a connection per request)."""
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, retry=fast_retry())

        async def go() -> Any:
            await _warm(explainer, server)
            getattr(server, fault)(1)
            first = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            second = await explainer.explain(make_history(3), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return first, second

        first, second = run(go())
        assert first.ok and first.text.startswith("We recommend") and second.ok
        assert first.text != second.text  # each call its own reply: two and three interactions
        assert [r["fault"] for r in server.requests][-2:] == [fault.removesuffix("_next"), None]


def test_ollama_client_per_event_loop() -> None:
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, retry=fast_retry())
        run(explainer.preflight())  # one loop (e.g. the plugin's start-up) ...

        async def sweep() -> Any:  # ... and another (e.g. the sweep's background thread)
            result = await explainer.explain(make_history(2), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return result

        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(asyncio.run(sweep())))
        worker.start()
        worker.join(10)
        assert outcome and outcome[0].ok
        assert server.calls["/api/tags"] == 1


def test_request_identity_is_host_independent_and_complete() -> None:
    with FakeOllamaServer() as one, FakeOllamaServer() as two:
        a = OllamaExplainer("fake-model", host=one.url)
        b = OllamaExplainer("fake-model", host=two.url)

        async def go() -> None:
            await a.preflight()
            await b.preflight()
            await a.aclose()
            await b.aclose()

        run(go())
        identity = a.request_identity(make_history(2), ITEM, seed=5, repeat=1)
        assert identity == b.request_identity(make_history(2), ITEM, seed=5, repeat=1)
        assert identity["digest"] and identity["seed"] == 5 and identity["repeat"] == 1
        assert identity["options"] == {"temperature": 0.0, "num_predict": 256, "num_ctx": 4096}
        assert identity["model"] == "fake-model:latest" and "Smart Watch" in identity["prompt"]


# ---------------------------------------------------------------------------------- openai-compat
def test_openai_compatible_backend_against_the_fake_v1_endpoints() -> None:
    with FakeOllamaServer() as server:
        explainer = OpenAICompatExplainer("fake-model:latest", base_url=server.url + "/v1", max_tokens=80,
                                          api_key="secret", retry=fast_retry())

        async def go() -> Any:
            info = await explainer.preflight()
            await _warm(explainer, server)
            server.fail_next(2, status=503)
            result = await explainer.explain(make_history(3), ITEM, seed=9, repeat=0)
            await explainer.aclose()
            return info, result

        info, result = run(go())
        assert info.backend == "openai" and info.digest and info.extra["served_as"] == "fake-model:latest"
        assert result.ok and result.completion_tokens
        assert explainer.stats.retries == 2
        sent = server.requests[-1]
        assert sent["path"] == "/v1/chat/completions"
        assert sent["options"] == {"temperature": 0.0, "seed": 9, "num_predict": 80}


def test_openai_unlisted_model_warns_and_dead_server_fails_fast() -> None:
    with FakeOllamaServer() as server:
        explainer = OpenAICompatExplainer("gpt-local", base_url=server.url + "/v1", retry=fast_retry())
        with pytest.warns(RobustExplainWarning, match="not listed"):
            info = run(explainer.preflight())
        # A single served model is what answers: it is recorded as the model's identity.
        assert info.extra["served_as"] == "fake-model:latest" and info.digest
        # The run's end reads the model list again (a model re-pulled mid-run): what it says was said once.
        explainer.stats.requests = 1  # as after a generation: the end-of-run check asks only then
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            assert run(explainer.current_digest()) == info.digest
        assert not [w for w in again if "not listed" in str(w.message)]
    dead = OpenAICompatExplainer("m", base_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(BackendError, match="cannot reach the OpenAI-compatible server"):
        run(dead.preflight())
    assert dead.stats.retries == 0  # refused: one clear error at once, no backoff


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_no_certificate_store_is_loaded_for_a_plain_http_host(scheme: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the certificate store costs ~30 ms per HTTP client: only https hosts pay it (every client a
    backend builds: generation, preflight, embeddings)."""
    import ssl

    import ollama  # its import builds a default client of its own (with certificates): not ours to count

    from pytest_robustexplain.explainers.embedding import EmbeddingClient

    assert ollama.AsyncClient
    loads: list[str] = []
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda self, *a, **k: loads.append("file"))
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", lambda self, *a, **k: loads.append("default"))
    host = f"{scheme}://127.0.0.1:9"

    async def build() -> None:
        openai = OpenAICompatExplainer("m", base_url=host + "/v1")
        await openai._close_client(openai._make_client())
        ollama = OllamaExplainer("m", host=host)
        await ollama._close_client(ollama._official_client())
        await EmbeddingClient("e", host=host)._new_client().aclose()

    run(build())
    assert (loads == []) == (scheme == "http"), loads


# ---------------------------------------------------------------------------------------- factory
def test_a_backend_built_by_hand_asks_as_one_built_from_the_default_settings() -> None:
    # Each default once (backends.GenerationOptions): before, a hand-built backend made 4 attempts and one
    # built from the settings 5.
    from pytest_robustexplain.backends import GENERATION_DEFAULTS
    from pytest_robustexplain.engine.setup import backend_options
    from pytest_robustexplain.settings import Settings

    for backend, cls in (("ollama", OllamaExplainer), ("openai", OpenAICompatExplainer)):
        defaults = replace(Settings.defaults(), backend=backend)
        from_settings = make_explainer(backend, "m", **backend_options(defaults))
        by_hand = cls("m")
        assert from_settings.options == by_hand.options == GENERATION_DEFAULTS  # type: ignore[attr-defined]
        assert from_settings.retry.max_attempts == by_hand.retry.max_attempts == 5  # type: ignore[attr-defined]
        assert from_settings.host == by_hand.host  # type: ignore[attr-defined]
    assert OllamaExplainer("m", num_predict=7, max_attempts=2).retry.max_attempts == 2
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*num_prdict"):
        OllamaExplainer("m", num_prdict=7)


def test_make_explainer() -> None:
    assert isinstance(make_explainer("template", "ignored"), TemplateExplainer)
    ollama = make_explainer("ollama", "m", host="http://127.0.0.1:1", concurrency=2)
    assert isinstance(ollama, OllamaExplainer) and ollama.concurrency == 2
    openai = make_explainer("openai-compatible", "m", host="http://h:8080/v1", num_predict=64)
    assert isinstance(openai, OpenAICompatExplainer) and openai.max_tokens == 64
    assert openai.host == "http://h:8080/v1"
    with pytest.raises(ConfigError, match=r"valid backends: ollama, openai \(openai-compatible\), template$"):
        make_explainer("vllm", "m")
    with pytest.raises(ConfigError, match="tempreature"):
        make_explainer("ollama", "m", tempreature=0.5)


def test_explainers_package_is_import_light() -> None:
    code = ("import sys, pytest_robustexplain.explainers as e; "
            "heavy = [m for m in ('ollama', 'httpx', 'numpy') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_server_trickling_its_reply_cannot_hold_a_call_past_the_deadline() -> None:
    """httpx's read timeout bounds each read; the deadline (timeout + connect-timeout) bounds the call. The
    timeouts leave a loaded machine room (a 0.1 s connect timeout on loopback failed its embedding twin)."""
    with FakeOllamaServer() as server:
        explainer = OllamaExplainer("fake-model", host=server.url, read_timeout=1.0, connect_timeout=1.0,
                                    retry=fast_retry(2))

        async def go() -> Any:
            await _warm(explainer, server)
            explainer.stats.requests = explainer.stats.retries = 0
            server.trickle = 0.2  # a reply of a few hundred bytes takes seconds, 16 bytes at a time
            result = await explainer.explain(make_history(3), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return result

        result = run(go())
        assert result.failure == "error" and "no complete reply within 2 s" in result.detail
        assert explainer.stats.requests == 2 and explainer.stats.retries == 1  # timed out, retried once
        server.trickle = 0.0


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_the_deadline_bounds_the_preflight_and_the_warm_up_too(backend: str) -> None:
    """A server trickling every reply: the preflight (the model list, its details) ends at the deadline
    with one BackendError; with the preflight answered, a trickled warm-up ends at it too (retried, then
    noted), and so does the call after it."""
    with FakeOllamaServer() as server:
        def make() -> OllamaExplainer | OpenAICompatExplainer:
            if backend == "ollama":
                return OllamaExplainer("fake-model", host=server.url, read_timeout=1.0, connect_timeout=1.0,
                                       retry=fast_retry(2))
            return OpenAICompatExplainer("fake-model:latest", base_url=server.url + "/v1", read_timeout=1.0,
                                         connect_timeout=1.0, retry=fast_retry(2))

        server.trickle = 0.4  # a model list of a few hundred bytes takes seconds, 16 bytes at a time
        explainer = make()
        late = r"preflight against .* failed: .*no complete reply within 2 s"
        with pytest.raises(BackendError, match=late):
            run(explainer.preflight())

        explainer = make()

        async def go() -> Any:
            server.trickle = 0.0
            await explainer.preflight()
            server.trickle = 0.4  # the warm-up and every call after it trickle
            result = await explainer.explain(make_history(3), ITEM, seed=0, repeat=0)
            await explainer.aclose()
            return result

        result = run(go())
        assert explainer.stats.warmup_calls == 2  # timed out, retried once, then left to the real calls
        assert "no complete reply within 2 s" in (explainer.warmup_error or "")
        assert result.failure == "error" and "no complete reply within 2 s" in result.detail
        server.trickle = 0.0


def test_a_host_name_that_does_not_resolve_is_not_called_a_refusal() -> None:
    from pytest_robustexplain.explainers.retry import connect_cause

    def chained(outer: BaseException, inner: BaseException) -> BaseException:
        outer.__cause__ = inner
        return outer

    dns = chained(ConnectionError("connect failed"), socket.gaierror(-2, "Name or service not known"))
    assert connect_cause(dns) == "host name not found"
    assert connect_cause(chained(ConnectionError("x"), ConnectionRefusedError(111, "Connection refused"))) \
        == "connection refused"
    assert connect_cause(ConnectionError("[Errno 101] Network is unreachable")) == "network unreachable"
    explainer = make_explainer("ollama", "m", host="http://box.invalid:11434")
    assert "(host name not found)" in str(explainer._fatal_for(dns))
