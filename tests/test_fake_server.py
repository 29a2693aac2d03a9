"""The fake Ollama server, exercised through the real ``ollama`` client (sync and async) and httpx."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from pytest_robustexplain.testing import (
    FAULTS,
    FIXTURE_DOC,
    REFUSAL_TEXT,
    FakeOllamaServer,
    compose_reply,
    fake_ollama_server,
    parse_prompt,
)

T0 = {"temperature": 0}
# One TLS context for every client: httpx otherwise loads the CA bundle for each new client (~50 ms),
# although every request here is plain HTTP on loopback.
TLS = ssl.create_default_context()


def render(history: list[tuple[str, str, str, str]], item: str = "Bluetooth Speaker",
           features: str = "category: Electronics; brand: Acme; price: 49.99") -> str:
    """A prompt in the layout of the prompt contract (title, item id, category, rating)."""
    lines = [f"{i}. {title} (id {iid}) — category: {cat}; rating: {rating}; date: 2024-03-{i:02d}"
             for i, (title, iid, cat, rating) in enumerate(history, start=1)]
    return ("Given the user's interaction history:\n" + "\n".join(lines) + "\n"
            f'explain why the item "{item}" with features {features} is recommended. '
            "Focus on connecting the user's demonstrated preferences to the item's characteristics.")


HISTORY = [
    ("Wireless Earbuds Pro", "E012", "Electronics", "4.5"),
    ("Smart Watch X", "E013", "Electronics", "5"),
    ("Yoga Mat", "S001", "Sports", "3"),
    ("Noise Cancelling Headphones", "E020", "Electronics", "4"),
    ("Portable Charger", "E031", "Electronics", "3.5"),
    ("Running Shoes", "S007", "Sports", "4"),
    ("USB-C Hub", "E044", "Electronics", "4"),
    ("Desk Lamp", "H002", "Home", "3"),
]
PROMPT = render(HISTORY)


def perturbed_histories() -> dict[str, list[tuple[str, str, str, str]]]:
    """Small edits of HISTORY, one per perturbation kind of the paper."""
    return {
        "noise": [*HISTORY[:3], ("Garden Hose", "H090", "Home", "2"), *HISTORY[3:]],
        "shuffle": [HISTORY[1], HISTORY[0], *HISTORY[2:6], HISTORY[7], HISTORY[6]],
        "dilution": [*HISTORY, ("Lip Balm", "B001", "Beauty", "3"), ("Board Game", "T004", "Toys", "3.5")],
        "drift": [*HISTORY[:5], ("Novel", "K001", "Books", "5"), ("Cookbook", "K002", "Books", "4.5"),
                  ("Atlas", "K003", "Books", "4")],
        "missing": [HISTORY[0], ("unknown", "E013", "unknown", "unknown"), *HISTORY[2:]],
    }


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def overlap(a: str, b: str) -> float:
    """Rough similarity: mean of word-set Jaccard and bigram-set Jaccard (independent of metrics.py)."""
    wa, wb = words(a), words(b)
    ba, bb = set(itertools.pairwise(wa)), set(itertools.pairwise(wb))
    return (len(set(wa) & set(wb)) / len(set(wa) | set(wb)) + len(ba & bb) / len(ba | bb)) / 2


def user(prompt: str = PROMPT) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def oclient(server: FakeOllamaServer, **kwargs: object) -> ollama.Client:
    return ollama.Client(host=server.url, verify=TLS, **kwargs)


def aclient(server: FakeOllamaServer, **kwargs: object) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=server.url, verify=TLS, **kwargs)


def hclient(**kwargs: object) -> httpx.Client:
    return httpx.Client(verify=TLS, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with hclient(timeout=5) as c:
        yield c


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with fake_ollama_server() as srv:
        yield srv


@pytest.fixture
def client(server: FakeOllamaServer) -> Iterator[ollama.Client]:
    with oclient(server, timeout=5) as c:
        yield c


# ---------------------------------------------------------------------------------------- endpoints


def test_root_and_version(http: httpx.Client, server: FakeOllamaServer) -> None:
    assert http.get(server.url + "/").text == "Ollama is running"
    for path in ("/", "/api/version", "/api/tags", "/nowhere"):
        head = http.head(server.url + path)
        assert head.content == b"" and int(head.headers["content-length"]) > 0
    assert http.get(server.url + "/").text == "Ollama is running"  # keep-alive intact after HEADs
    assert server.connections_opened == 1
    assert http.get(server.url + "/api/version").json() == {"version": "0.12.6"}
    with fake_ollama_server(version="0.9.0") as other:
        assert http.get(other.url + "/api/version").json() == {"version": "0.9.0"}
    assert server.url == f"http://127.0.0.1:{server.port}"


def test_tags_raw_shape_and_client(http: httpx.Client, server: FakeOllamaServer,
                                   client: ollama.Client) -> None:
    (entry,) = http.get(server.url + "/api/tags").json()["models"]
    assert set(entry) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert set(entry["details"]) == {"format", "family", "families", "parameter_size", "quantization_level",
                                      "parent_model"}
    assert entry["name"] == entry["model"] == "fake-model:latest"
    assert re.fullmatch(r"[0-9a-f]{64}", entry["digest"])
    listed = client.list().models[0]
    assert listed.model == "fake-model:latest"
    assert isinstance(listed.modified_at, datetime)
    assert listed.details is not None and listed.details.quantization_level == "Q4_K_M"


def test_several_models_and_name_resolution() -> None:
    with fake_ollama_server(models=("llama3.1:8b", "qwen2.5:14b", "plain")) as srv, \
            oclient(srv) as c:
        names = [m.model for m in c.list().models]
        assert names == ["llama3.1:8b", "qwen2.5:14b", "plain:latest"]
        details = c.show("qwen2.5:14b").details
        assert details is not None and (details.parameter_size, details.family) == ("14.0B", "qwen2")
        # A name without a tag means :latest, and the reply echoes the name as requested.
        assert c.chat(model="plain", messages=user()).model == "plain"
        with pytest.raises(ollama.ResponseError) as info:
            c.chat(model="llama3.1", messages=user())  # llama3.1:latest is not served
        assert info.value.status_code == 404


def test_show_and_capabilities(client: ollama.Client) -> None:
    shown = client.show("fake-model")
    assert shown.capabilities == ["completion"]
    assert shown.modelinfo is not None and shown.modelinfo["general.architecture"] == "llama"
    assert shown.template and shown.modelfile and shown.parameters is not None
    with fake_ollama_server(think_capable=True) as srv, oclient(srv) as c:
        assert c.show("fake-model:latest").capabilities == ["completion", "thinking"]


def test_ps_lists_models_after_use(client: ollama.Client) -> None:
    assert client.ps().models == []
    client.chat(model="fake-model", messages=user(), options=T0)
    (loaded,) = client.ps().models
    assert loaded.model == "fake-model:latest" and loaded.expires_at is not None


def test_chat_response_shape(http: httpx.Client, server: FakeOllamaServer, client: ollama.Client) -> None:
    raw = http.post(server.url + "/api/chat", json={"model": "fake-model", "messages": user(),
                                                     "stream": False, "options": T0}).json()
    assert set(raw) == {"model", "created_at", "message", "done", "done_reason", "total_duration",
                        "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                        "eval_duration"}
    assert raw["message"]["role"] == "assistant" and raw["done"] is True and raw["done_reason"] == "stop"
    assert all(isinstance(raw[k], int) and raw[k] > 0 for k in ("total_duration", "eval_duration"))
    response = client.chat(model="fake-model", messages=user(), options=T0)
    assert response.message.content == raw["message"]["content"]
    assert response.eval_count == len((response.message.content or "").split())
    assert response.prompt_eval_count == -(-len(PROMPT) // 4)  # four characters a fake token
    assert response.message.thinking is None


def test_chat_stream_concatenates_to_the_full_reply(client: ollama.Client) -> None:
    full = client.chat(model="fake-model", messages=user(), options=T0).message.content
    parts = list(client.chat(model="fake-model", messages=user(), options=T0, stream=True))
    assert len(parts) > 10
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == "stop"
    assert "".join(p.message.content or "" for p in parts) == full
    assert parts[-1].eval_count == len(full.split())


def test_streaming_is_chunked_ndjson(http: httpx.Client, server: FakeOllamaServer) -> None:
    body = {"model": "fake-model", "messages": user()}  # no "stream": Ollama streams by default
    with http.stream("POST", server.url + "/api/chat", json=body) as response:
        assert response.headers["content-type"] == "application/x-ndjson"
        assert response.headers["transfer-encoding"] == "chunked"
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert lines[-1]["done"] is True


def test_async_client_endpoints(server: FakeOllamaServer) -> None:
    async def run() -> None:
        async with aclient(server, timeout=5) as c:
            assert (await c.list()).models[0].model == "fake-model:latest"
            assert (await c.show("fake-model")).capabilities == ["completion"]
            reply = await c.chat(model="fake-model", messages=user(), options=T0)
            stream = await c.chat(model="fake-model", messages=user(), options=T0, stream=True)
            text = "".join([part.message.content or "" async for part in stream])
            assert text == reply.message.content
            with pytest.raises(ollama.ResponseError) as info:
                await c.chat(model="missing", messages=user())
            assert info.value.status_code == 404
            assert len((await c.ps()).models) == 1

    asyncio.run(run())


def test_missing_model_is_404_like_ollama(http: httpx.Client, server: FakeOllamaServer,
                                          client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="nope:7b", messages=user())
    assert info.value.status_code == 404
    assert info.value.error == 'model "nope:7b" not found, try pulling it first'
    with pytest.raises(ollama.ResponseError) as shown:
        client.show("nope")
    assert shown.value.status_code == 404 and "not found" in shown.value.error
    with pytest.raises(ollama.ResponseError) as streamed:
        list(client.chat(model="nope", messages=user(), stream=True))
    assert streamed.value.status_code == 404
    response = http.post(server.url + "/v1/chat/completions", json={"model": "nope", "messages": user()})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == 'model "nope" not found, try pulling it first'


def test_bad_requests(http: httpx.Client, server: FakeOllamaServer) -> None:
    bad_json = http.post(server.url + "/api/chat", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and "invalid JSON" in bad_json.json()["error"]
    no_model = http.post(server.url + "/api/chat", json={"messages": user(), "stream": False})
    assert no_model.status_code == 400 and no_model.json() == {"error": "model is required"}
    bad_option = http.post(server.url + "/api/chat", json={"model": "fake-model", "messages": user(),
                                                            "options": {"temperature": "hot"}})
    assert bad_option.status_code == 400 and "temperature" in bad_option.json()["error"]
    unknown = http.get(server.url + "/api/nothing")
    assert unknown.status_code == 404 and unknown.text == "404 page not found"
    assert server.errors == []


def test_empty_conversation_loads_the_model(client: ollama.Client) -> None:
    response = client.chat(model="fake-model", messages=[])
    assert response.done_reason == "load" and response.message.content == ""


# ---------------------------------------------------------------------------------- OpenAI-compatible


def test_openai_models(server: FakeOllamaServer) -> None:
    with hclient(base_url=server.url + "/v1") as http:
        listing = http.get("/models").json()
        assert listing == {"object": "list", "data": [
            {"id": "fake-model:latest", "object": "model", "created": listing["data"][0]["created"],
             "owned_by": "robustexplain-fake-server"}]}  # says what it is
        assert http.get("/models/fake-model:latest").json()["id"] == "fake-model:latest"
        assert http.get("/models/other").status_code == 404


def test_openai_chat_completion_and_stream(server: FakeOllamaServer, client: ollama.Client) -> None:
    native = client.chat(model="fake-model", messages=user(), options={"temperature": 0.5, "seed": 3})
    body = {"model": "fake-model", "messages": user(), "temperature": 0.5, "seed": 3}
    with hclient(base_url=server.url + "/v1") as http:
        data = http.post("/chat/completions", json=body).json()
        assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
        (choice,) = data["choices"]
        assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
        assert choice["message"]["content"] == native.message.content  # same model behind both APIs
        usage = data["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        with http.stream("POST", "/chat/completions", json=stream_body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = [line.removeprefix("data: ") for line in response.iter_lines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == choice["message"]["content"]
    assert chunks[-1]["usage"] == usage
    assert server.requests[-1]["options"] == {"temperature": 0.5, "seed": 3}


def test_openai_reasoning_and_errors() -> None:
    with fake_ollama_server(think_capable=True) as srv, hclient(base_url=srv.url + "/v1") as http:
        message = http.post("/chat/completions", json={"model": "fake-model", "messages": user()}).json()[
            "choices"][0]["message"]
        assert message["reasoning"] and message["content"]
        off = http.post("/chat/completions", json={"model": "fake-model", "messages": user(),
                                                   "reasoning_effort": "none"}).json()
        assert off["choices"][0]["message"]["content"]
        assert "reasoning" not in off["choices"][0]["message"]
        srv.fail_next(1, status=500)
        failed = http.post("/chat/completions", json={"model": "fake-model", "messages": user()})
        assert failed.status_code == 500 and failed.json()["error"]["type"] == "api_error"


# -------------------------------------------------------------------------------------------- thinking


def test_thinking_on_by_default_for_think_capable_models() -> None:
    with fake_ollama_server(think_capable=True) as srv, oclient(srv) as c:
        default = c.chat(model="fake-model", messages=user(), options=T0)
        assert default.message.thinking and "Electronics" in default.message.thinking
        off = c.chat(model="fake-model", messages=user(), options=T0, think=False)
        assert off.message.thinking is None and off.message.content == default.message.content
        streamed = list(c.chat(model="fake-model", messages=user(), options=T0, think=True, stream=True))
        assert "".join(p.message.thinking or "" for p in streamed) == default.message.thinking
        assert [r["think"] for r in srv.requests] == [None, False, True]


def test_think_on_a_model_without_thinking_is_400(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="fake-model", messages=user(), think=True)
    assert info.value.status_code == 400 and "does not support thinking" in info.value.error
    assert client.chat(model="fake-model", messages=user(), think=False).message.content


def test_leaked_thinking_is_prefixed_to_the_content() -> None:
    with fake_ollama_server(leak_thinking=True) as srv, oclient(srv) as c:
        content = c.chat(model="fake-model", messages=user(), options=T0).message.content
        assert content.startswith("<think>\n") and "</think>" in content
        assert content.split("</think>", 1)[1].strip() == compose_reply(PROMPT, T0)
        srv.empty_next(1)
        only_think = c.chat(model="fake-model", messages=user()).message.content
        assert only_think.startswith("<think>") and only_think.split("</think>", 1)[1].strip() == ""


# ---------------------------------------------------------------------------------------------- faults


def test_fail_then_success(server: FakeOllamaServer, client: ollama.Client) -> None:
    server.fail_next(1)
    server.fail_next(1, status=500)
    with pytest.raises(ollama.ResponseError) as busy:
        client.chat(model="fake-model", messages=user())
    assert busy.value.status_code == 503 and "server busy" in busy.value.error
    with pytest.raises(ollama.ResponseError) as crashed:
        client.chat(model="fake-model", messages=user())
    assert crashed.value.status_code == 500
    assert client.chat(model="fake-model", messages=user()).message.content
    assert [r["fault"] for r in server.requests] == ["fail", "fail", None]
    assert server.chat_calls == 3 and server.in_flight == 0


def test_hang_triggers_a_client_timeout(server: FakeOllamaServer) -> None:
    server.hang_next(1, seconds=5)
    with hclient(base_url=server.url, timeout=httpx.Timeout(5, read=0.3)) as http:
        with pytest.raises(httpx.ReadTimeout):  # the client gave up after 0.3 s; the hang lasts 5
            http.post("/api/chat", json={"model": "fake-model", "messages": user(), "stream": False})
        assert server.in_flight == 1  # still held by the server
        # The next request is answered; its own generous timeout, so a loaded machine cannot fail it.
        ok = http.post("/api/chat", json={"model": "fake-model", "messages": user(), "stream": False},
                       timeout=30)
        assert ok.status_code == 200
    with oclient(server, timeout=0.3) as c:
        server.hang_next(1, seconds=5)
        with pytest.raises(httpx.ReadTimeout):
            c.chat(model="fake-model", messages=user())


def test_hang_ends_by_closing_the_connection(server: FakeOllamaServer) -> None:
    server.hang_next(1, seconds=0.2)
    with hclient(base_url=server.url, timeout=5) as http, pytest.raises(httpx.RemoteProtocolError):
        http.post("/api/chat", json={"model": "fake-model", "messages": user(), "stream": False})
    assert server.in_flight == 0


def test_drop_gives_a_transport_error(server: FakeOllamaServer, client: ollama.Client) -> None:
    server.drop_next(1)
    with pytest.raises(httpx.TransportError):
        client.chat(model="fake-model", messages=user())
    assert client.chat(model="fake-model", messages=user()).message.content
    server.drop_next(1)
    with hclient(base_url=server.url + "/v1") as http, pytest.raises(httpx.RemoteProtocolError):
        http.post("/chat/completions", json={"model": "fake-model", "messages": user()})


def test_empty_and_refusal(server: FakeOllamaServer, client: ollama.Client) -> None:
    server.empty_next(1)
    server.refuse_next(1)
    empty = client.chat(model="fake-model", messages=user())
    assert empty.message.content == "" and empty.done_reason == "stop" and empty.eval_count == 0
    assert client.chat(model="fake-model", messages=user()).message.content == REFUSAL_TEXT
    server.empty_next(1)
    assert "".join(p.message.content or "" for p in client.chat(model="fake-model", messages=user(),
                                                          stream=True)) == ""


def test_script_applies_faults_in_order(server: FakeOllamaServer, client: ollama.Client) -> None:
    server.script(["ok", "fail", "empty", "refuse", "fail500", "drop"])
    assert server.pending_faults == ["ok", "fail", "empty", "refuse", "fail500", "drop"]
    outcomes: list[object] = []
    for _ in range(7):
        try:
            outcomes.append(client.chat(model="fake-model", messages=user(), options=T0).message.content)
        except ollama.ResponseError as exc:
            outcomes.append(exc.status_code)
        except httpx.TransportError:
            outcomes.append("transport")
    normal = compose_reply(PROMPT, T0)
    assert outcomes == [normal, 503, "", REFUSAL_TEXT, 500, "transport", normal]
    assert server.pending_faults == []


def test_fault_arguments_are_checked(server: FakeOllamaServer) -> None:
    with pytest.raises(ValueError, match="item 1 is 'boom'"):
        server.script(["ok", "boom"])
    with pytest.raises(ValueError, match="not a single string"):
        server.script("fail")
    with pytest.raises(ValueError, match="status"):
        server.fail_next(1, status=200)
    with pytest.raises(ValueError, match="n must be"):
        server.drop_next(-1)
    server.fail_next(2)
    server.clear_faults()
    assert server.pending_faults == [] and set(FAULTS) >= {"ok", "fail", "hang", "drop", "empty", "refuse"}


def test_faults_apply_to_streamed_requests(server: FakeOllamaServer, client: ollama.Client) -> None:
    server.fail_next(1)
    with pytest.raises(ollama.ResponseError) as info:
        list(client.chat(model="fake-model", messages=user(), stream=True))
    assert info.value.status_code == 503


# ------------------------------------------------------------------------------ capacity and latency


def test_capacity_and_latency_queue_requests(server: FakeOllamaServer) -> None:
    server.capacity, server.latency = 2, 0.1

    async def burst(n: int, limit: int | None = None) -> None:
        gate = asyncio.Semaphore(limit or n)
        async with aclient(server, timeout=5) as c:

            async def one() -> None:
                async with gate:
                    await c.chat(model="fake-model", messages=user())

            await asyncio.gather(*(one() for _ in range(n)))

    # The server's own counters, not the clock: 8 received at once, processed 2 at a time.
    asyncio.run(burst(8))
    assert server.peak_in_flight == 8 and server.peak_processing == 2 and server.in_flight == 0
    server.reset_stats()
    server.capacity = None
    asyncio.run(burst(8))
    assert server.peak_processing > 2  # unlimited: processed together
    server.reset_stats()
    asyncio.run(burst(8, limit=3))
    assert 2 <= server.peak_in_flight <= 3  # what the client had in flight, never more than its limit
    assert server.chat_calls == 8


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        FakeOllamaServer(mode="chaotic")
    with pytest.raises(ValueError, match="model names"):
        FakeOllamaServer(models=[])
    with pytest.raises(ValueError, match="model names"):
        FakeOllamaServer(models=(m for m in ["ok", ""]))
    with pytest.raises(ValueError, match="reply must be a callable"):
        FakeOllamaServer(reply="hello")  # type: ignore[arg-type]
    assert FakeOllamaServer(models="solo").models == ("solo:latest",)
    srv = FakeOllamaServer()
    for name, value in (("latency", -1), ("capacity", 0), ("capacity", 1.5), ("mode", "x")):
        with pytest.raises(ValueError, match=name):
            setattr(srv, name, value)
    with pytest.raises(RuntimeError, match="not running"):
        _ = srv.url


# ------------------------------------------------------------------------------------- stats, lifecycle


def test_requests_are_recorded(server: FakeOllamaServer, client: ollama.Client) -> None:
    client.chat(model="fake-model", messages=[{"role": "system", "content": "Be brief."}, *user()],
                options={"temperature": 0.2, "seed": 7}, think=False)
    (record,) = server.requests
    assert record["path"] == "/api/chat" and record["model"] == "fake-model"
    assert record["think"] is False and record["options"] == {"temperature": 0.2, "seed": 7}
    assert record["prompt"] == PROMPT and record["stream"] is False
    client.list()
    assert server.calls == Counter({"/api/chat": 1, "/api/tags": 1})
    server.reset_stats()
    assert server.requests == [] and server.chat_calls == 0 and server.calls == Counter()


def test_keep_alive_reuses_one_connection(server: FakeOllamaServer, client: ollama.Client) -> None:
    for _ in range(5):
        client.chat(model="fake-model", messages=user())
    client.list()
    assert server.connections_opened == 1


def test_stop_is_prompt_with_pending_hangs_and_idle_connections(http: httpx.Client) -> None:
    srv = FakeOllamaServer().start()
    srv.hang_next(3)  # the default hang is far longer than this test
    errors: list[BaseException] = []

    def call() -> None:
        try:
            http.post(srv.url + "/api/chat", json={"model": "fake-model", "messages": user()}, timeout=20)
        except httpx.TransportError as exc:
            errors.append(exc)

    idle = hclient(base_url=srv.url)
    idle.get("/api/version")  # leaves an idle keep-alive connection open on the server
    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2
    while srv.in_flight < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.in_flight == 3
    srv.stop()  # does not wait for the three hanging handlers: their clients see the connection close
    for t in threads:
        t.join(30)
    assert len(errors) == 3 and not srv.running
    idle.close()
    with pytest.raises(httpx.ConnectError):
        http.get(f"http://127.0.0.1:{idle.base_url.port}/api/version")
    srv.stop()  # stopping twice is harmless


def test_restart_and_double_start(http: httpx.Client) -> None:
    srv = FakeOllamaServer()
    with srv, pytest.raises(RuntimeError, match="already running"):
        srv.start()
    with srv:
        assert http.get(srv.url + "/api/version").status_code == 200


def test_fixture_doc_and_cheap_import() -> None:
    assert "fake_ollama" in FIXTURE_DOC and "fail_next" in FIXTURE_DOC
    heavy = "{'httpx', 'ollama', 'numpy', 'scipy', 'nltk', 'textblob', 'sacrebleu', 'pydantic'}"
    code = f"import sys, pytest_robustexplain.testing; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- serving from the command line
@pytest.mark.parametrize("argv", [["-m", "pytest_robustexplain.testing"],
                                  ["-m", "pytest_robustexplain", "fake-server"]],
                         ids=["python-m", "robustexplain"])
def test_fake_server_command_serves_until_ctrl_c(argv: list[str], http: httpx.Client) -> None:
    """Started as a user's pipeline would: port 0, the address read from the first line (no sleep)."""
    proc = subprocess.Popen([sys.executable, *argv, "--port", "0", "--mode", "fragile", "--model", "mine:7b"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"fake Ollama listening on (http://127\.0\.0\.1:\d+) "
                         r"\(mode fragile, models mine:7b\)", first)
        assert match, (first, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = match.group(1)
        assert http.get(url + "/api/version").json()["version"]
        reply = http.post(url + "/api/chat", json={"model": "mine:7b", "stream": False, "messages": [
            {"role": "user", "content": render(HISTORY)}], "options": T0}).json()
        assert reply["message"]["content"] == compose_reply(render(HISTORY), T0, mode="fragile")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "fake Ollama stopped" in out and "Traceback" not in err


def test_fake_server_command_on_a_taken_port_is_one_error(server: FakeOllamaServer,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain import cli

    assert cli.main(["fake-server", "--port", str(server.port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fake-server: error:") and len(err.strip().splitlines()) == 1
    assert f"port {server.port} on 127.0.0.1 is already in use" in err and "--port 0 for a free one" in err


# --------------------------------------------------------------------------------------- reply model


def test_parse_prompt_reads_the_contract_layout() -> None:
    parsed = parse_prompt(render([*HISTORY[:2], ("unknown", "E077", "unknown", "unknown")]))
    assert [e.title for e in parsed.history] == ["Wireless Earbuds Pro", "Smart Watch X", None]
    assert [e.category for e in parsed.history] == ["Electronics", "Electronics", None]
    assert [e.rating for e in parsed.history] == [4.5, 5.0, None]
    assert parsed.item == "Bluetooth Speaker"
    assert parsed.feature_pairs() == [("category", "Electronics"), ("brand", "Acme"), ("price", "49.99")]


@pytest.mark.parametrize("prompt", ["", "hello", "1. \n2.", 'the item "" with features  is recommended',
                                    "\x00\ufffd" * 50])
@pytest.mark.parametrize("mode", ["stable", "borderline", "fragile"])
def test_every_prompt_gets_a_reply(prompt: str, mode: str) -> None:
    assert len(compose_reply(prompt, None, mode=mode).split()) >= 10


def test_replies_are_deterministic_and_seeded_only_above_temperature_zero() -> None:
    with fake_ollama_server() as a, fake_ollama_server() as b, \
            oclient(a) as ca, oclient(b) as cb:
        for opts in ({"temperature": 0, "seed": 1}, {"temperature": 0.8, "seed": 5}, {}):
            assert ca.chat(model="fake-model", messages=user(), options=opts).message.content == \
                cb.chat(model="fake-model", messages=user(), options=opts).message.content
    assert compose_reply(PROMPT, {"temperature": 0, "seed": 1}) == compose_reply(PROMPT, {"temperature": 0,
                                                                                           "seed": 2})
    warm = [compose_reply(PROMPT, {"temperature": 0.8, "seed": s}) for s in range(5)]
    assert len(set(warm)) > 1  # the seed changes the wording...
    assert min(overlap(warm[0], w) for w in warm[1:]) > 0.75  # ...but only slightly
    cold = compose_reply(PROMPT, T0)
    assert 0.75 < overlap(cold, warm[0]) < 1


def test_reply_lengths() -> None:
    prompts = [PROMPT, *(render(h) for h in perturbed_histories().values())]
    for prompt in prompts:
        assert 60 <= len(compose_reply(prompt, T0, mode="stable").split()) <= 100
        assert 40 <= len(compose_reply(prompt, T0, mode="fragile").split()) <= 125


def test_stable_borderline_fragile_order_of_robustness() -> None:
    means = {}
    for mode in ("stable", "borderline", "fragile"):
        original = compose_reply(PROMPT, T0, mode=mode)
        scores = [overlap(original, compose_reply(render(h), T0, mode=mode))
                  for h in perturbed_histories().values()]
        assert all(s < 1 for s in scores)  # every perturbation is seen by every mode
        means[mode] = sum(scores) / len(scores)
    assert means["stable"] > 0.75
    assert 0.25 < means["borderline"] < 0.6
    assert means["fragile"] < 0.2
    assert means["stable"] > means["borderline"] + 0.2 > means["fragile"] + 0.3


def test_stable_reply_follows_the_history() -> None:
    text = compose_reply(PROMPT, T0)
    assert '"Bluetooth Speaker"' in text and "Electronics" in text and "Acme" in text
    assert "Smart Watch X" in text  # best-rated Electronics item
    assert "Desk Lamp" in text  # most recent
    drifted = compose_reply(render(perturbed_histories()["drift"]), T0)
    assert "Atlas" in drifted and "Desk Lamp" not in drifted


def test_mode_can_change_at_runtime(server: FakeOllamaServer, client: ollama.Client) -> None:
    stable = client.chat(model="fake-model", messages=user(), options=T0).message.content
    server.mode = "fragile"
    fragile = client.chat(model="fake-model", messages=user(), options=T0).message.content
    assert stable == compose_reply(PROMPT, T0) and fragile == compose_reply(PROMPT, T0, mode="fragile")
    assert fragile != stable


def test_reply_callable_overrides_and_failures_are_loud(server: FakeOllamaServer,
                                                        client: ollama.Client) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def reply(prompt: str, options: dict[str, Any]) -> str:
        seen.append((prompt, options))
        return f"custom {len(prompt)}"

    server.reply = reply
    answer = client.chat(model="fake-model", messages=user(), options={"seed": 3})
    assert answer.message.content == f"custom {len(PROMPT)}" and seen == [(PROMPT, {"seed": 3})]
    server.refuse_next(1)
    assert client.chat(model="fake-model", messages=user()).message.content == REFUSAL_TEXT

    def broken(prompt: str, options: dict[str, Any]) -> str:
        raise RuntimeError("no reply today")

    server.reply = broken
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="fake-model", messages=user())
    assert info.value.status_code == 500 and "no reply today" in info.value.error
    assert len(server.errors) == 1 and "no reply today" in server.errors[0]


def test_num_predict_truncates(client: ollama.Client) -> None:
    response = client.chat(model="fake-model", messages=user(), options={"num_predict": 5, "temperature": 0})
    assert response.message.content == " ".join(compose_reply(PROMPT, T0).split()[:5])
    assert response.done_reason == "length"


def test_the_digest_changes_with_what_changes_the_answers(tmp_path: Path) -> None:
    """``fragile`` after ``stable`` under one name is another model: the digest says so, so the response
    cache never replays the stable model's answers as the fragile one's (issue 27 point 10)."""
    from pytest_robustexplain import cli

    def digest(server: FakeOllamaServer) -> str:
        [entry] = httpx.get(f"{server.url}/api/tags").json()["models"]
        return str(entry["digest"])

    def own_reply(prompt: str, options: dict[str, Any]) -> str:
        return "My own reply."

    with FakeOllamaServer() as server:
        stable = digest(server)
        seen = {stable}
        for change in ({"mode": "fragile"}, {"mode": "borderline"}, {"reply": own_reply},
                       {"leak_thinking": True}, {"thinks_only": True}):
            server.mode, server.reply, server.leak_thinking, server.thinks_only = "stable", None, False, False
            for name, value in change.items():
                setattr(server, name, value)
            seen.add(digest(server))
        assert len(seen) == 6
        server.mode, server.reply, server.leak_thinking, server.thinks_only = "stable", None, False, False
        assert digest(server) == stable  # the defaults keep the name's own digest

        argv = ["run", "--model", "fake-model:latest", "--host", server.url, "--users", "3",
                "--perturbations", "noise", "--severities", "1", "--guard", "off", "--progress", "off",
                "--inconclusive", "warn", "-q", "--cache-dir", str(tmp_path / "cache"),
                "--json", str(tmp_path / "r.json")]
        assert cli.main(argv) == cli.EXIT_OK
        server.mode = "fragile"
        server.reset_stats()
        cli.main(argv)
        doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert doc["calls"]["cached"] == 0 and server.chat_calls > 0  # nothing replayed from the stable run
