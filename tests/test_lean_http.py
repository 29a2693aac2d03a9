"""The lean generation path to plain-http Ollama servers says and does what the official client does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
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
                response.done_reason, bool(response.message.thinking), response.model)

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


def test_counts_and_content_are_handed_on_as_they_came_for_the_one_check() -> None:
    """Where the lean path departs from the official model on purpose: it hands the content and the token
    counts on raw, for the check every backend's replies pass (tests/test_reply_fields.py) — a string count
    that pydantic would coerce is no count there, and a count pydantic refuses does not cost the text."""
    from pytest_robustexplain.explainers.reply import token_count

    content, prompt, completion, _, _, _ = parse_chat_reply(200, _payload(eval_count="7"))
    assert (content, prompt, completion) == ("A fine watch.", 12, "7") and token_count(completion) is None
    content, _, completion, _, _, _ = parse_chat_reply(200, _payload(eval_count=1.5))  # pydantic: refused
    assert (content, completion) == ("A fine watch.", 1.5)


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


# ----------------------------------------------------------------- a reply belongs to the request that asked
def _ask_in_turn(server: FakeOllamaServer, prompts: list[str]) -> tuple[list[str | None], int]:
    """Each prompt in turn through one lean client (so its connections are reused): the replies' texts
    and how many unasked replies it saw."""
    from pytest_robustexplain.explainers.lean_http import chat_body

    async def go() -> tuple[list[str | None], int]:
        client = LeanOllamaHttp(server.url, connect_timeout=2.0, read_timeout=5.0)
        try:
            texts = []
            for prompt in prompts:
                status, body, retry = await client.post_reply("/api/chat", chat_body("fake-model", prompt, {},
                                                                                     None))
                texts.append(parse_chat_reply(status, body, retry)[0])
            return texts, client.unsolicited
        finally:
            await client.aclose()

    return run(go())


def test_a_reply_nobody_asked_for_is_never_taken_for_the_next_requests() -> None:
    """Issue 41: a server that sends one reply twice made 29 of 60 replies answer other prompts, silently.
    Every reply must be its own prompt's; the connection that carried the extra one is closed, and from
    then on no connection is reused (HTTP/1.1 cannot tell whose the next bytes are)."""
    prompts = [f"prompt number {n}" for n in range(30)]
    with FakeOllamaServer(reply=lambda prompt, _options: f"answer to {prompt}") as server:
        server.script(["ok", "extra"] * 3)
        texts, unsolicited = _ask_in_turn(server, prompts)
        opened = server.connections_opened
    assert texts == [f"answer to {p}" for p in prompts]
    assert unsolicited == 3  # each extra reply seen, with the connection it came on
    assert opened == 30 - 1  # requests 1-2 shared one connection; every later one had its own


def test_a_clean_server_keeps_one_connection() -> None:
    prompts = [f"prompt number {n}" for n in range(10)]
    with FakeOllamaServer(reply=lambda prompt, _options: f"answer to {prompt}") as server:
        texts, unsolicited = _ask_in_turn(server, prompts)
        assert server.connections_opened == 1
    assert texts == [f"answer to {p}" for p in prompts] and unsolicited == 0


def test_chunked_trailers_are_read_to_their_end() -> None:
    """A chunked reply with a trailer section: the trailers were left on the connection and the next
    request failed ("did not answer in HTTP … 'Checksum: abc123'": 17 of 36 calls)."""
    prompts = [f"prompt number {n}" for n in range(12)]
    with FakeOllamaServer(reply=lambda prompt, _options: f"answer to {prompt}") as server:
        server.script(["trailers", "ok"] * 6)
        texts, unsolicited = _ask_in_turn(server, prompts)
        assert server.connections_opened == 1  # the connection stays good after each trailer section
    assert texts == [f"answer to {p}" for p in prompts] and unsolicited == 0


def test_an_idle_connection_the_server_closed_is_replaced_not_distrusted() -> None:
    """A server may close an idle keep-alive connection (its idle timeout): the next request opens a new
    one, and pooling goes on."""
    prompts = [f"prompt number {n}" for n in range(4)]
    with FakeOllamaServer(reply=lambda prompt, _options: f"answer to {prompt}") as server:
        from pytest_robustexplain.explainers.lean_http import chat_body

        async def go() -> int:
            client = LeanOllamaHttp(server.url, connect_timeout=2.0, read_timeout=5.0)
            try:
                for n, prompt in enumerate(prompts):
                    status, body, retry = await client.post_reply(
                        "/api/chat", chat_body("fake-model", prompt, {}, None))
                    assert parse_chat_reply(status, body, retry)[0] == f"answer to {prompt}"
                    if n == 1:
                        server.close_idle_connections()  # returns once the server's side is gone
                return client.unsolicited
            finally:
                await client.aclose()

        assert run(go()) == 0
        assert server.connections_opened == 2


TLS = Path(__file__).parent / "fixtures" / "tls"


@pytest.mark.parametrize(("backend", "scheme"),
                         [("openai", "http"), ("openai", "https"), ("ollama", "https")])
def test_httpx_clients_never_take_an_unasked_reply_either(backend: str, scheme: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Through httpx (the OpenAI-compatible backend; the official Ollama client, which serves https) the
    same server had 17 of 20 replies answer other prompts: httpx keeps the extra bytes in its parser, out
    of sight — over https as over http. Every server now gets a connection per request."""
    from pytest_robustexplain.explainers.ollama import OllamaExplainer
    from pytest_robustexplain.explainers.openai_compat import OpenAICompatExplainer

    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "cert.pem"))  # the test certificate, trusted
    tls = (TLS / "cert.pem", TLS / "key.pem") if scheme == "https" else None

    def history(user: str) -> UserHistory:
        return UserHistory(user, tuple(Interaction(f"I{k}", "Books", 1_700_000_000 + k, 4.0,
                                                   f"Book {k} {user}") for k in range(4)))

    def echo(prompt: str, _options: object) -> str:
        import hashlib

        return f"answer to {hashlib.sha256(prompt.encode()).hexdigest()[:16]}"

    with FakeOllamaServer(reply=echo, tls=tls) as server:
        assert server.url.startswith(f"{scheme}://")

        async def texts(extra: bool) -> list[str]:
            explainer = (OpenAICompatExplainer("fake-model:latest", base_url=server.url + "/v1")
                         if backend == "openai" else OllamaExplainer("fake-model", host=server.url))
            if extra:
                server.script(["ok", "extra"] * 6)
            out = [(await explainer.explain(history(f"u{n}"), ITEM, seed=1, repeat=0)).text
                   for n in range(12)]
            await explainer.aclose()
            return out

        clean = run(texts(False))
        assert run(texts(True)) == clean and len(set(clean)) == 12
