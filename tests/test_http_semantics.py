"""HTTP as servers and gateways speak it (issue 26 item 9): a rate limit's Retry-After is honoured, so a
rate-limited server slows the run instead of failing it."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.explainers.retry import RetryPolicy, retry_after_of
from pytest_robustexplain.testing import FakeOllamaServer

pytestmark = pytest.mark.usefixtures("isolated")


class Told(Exception):
    """A retryable error carrying a Retry-After, as the lean client's ResponseError does."""

    def __init__(self, retry_after: str | None) -> None:
        super().__init__("HTTP 429: rate limit exceeded")
        self.status_code = 429
        self.retry_after = retry_after


@pytest.mark.parametrize(("header", "seconds"), [
    ("3", 3.0), (" 12 ", 12.0), ("0", 0.0), ("soon", None), ("", None), (None, None), ("-1", None)])
def test_retry_after_is_read_as_seconds(header: str | None, seconds: float | None) -> None:
    assert retry_after_of(Told(header)) == seconds


def test_retry_after_as_an_http_date_is_the_seconds_until_then() -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (retry_after_of(Told(later)) or 0) <= 31
    assert retry_after_of(Told(email.utils.formatdate(time.time() - 60, usegmt=True))) == 0.0


def test_the_retry_policy_waits_at_least_what_the_server_asked_for_and_no_longer_than_its_cap() -> None:
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    def failing(headers: list[str | None]) -> Any:
        async def attempt() -> str:
            if headers:
                raise Told(headers.pop(0))
            return "ok"
        return attempt

    policy = RetryPolicy(max_attempts=4, sleep=sleep, max_retry_after=60.0)
    assert asyncio.run(policy.run(failing(["3", "999", None]))) == "ok"
    assert waited[0] == 3.0 and waited[1] == 60.0 and waited[2] <= policy.base_delay * 4


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_rate_limited_server_slows_the_run_and_every_call_is_made(backend: str, tmp_path: Path) -> None:
    with FakeOllamaServer() as server:
        host = server.url + ("/v1" if backend == "openai" else "")
        # After the warm-up, the first call opens a window of 1 s: it and those inside it get 429.
        server.rate_limit(1, after=1)
        code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host,
                         "--users", "3", "--perturbations", "noise", "--severities", "1,5", "--retries", "1",
                         "--cache", "off", "--progress", "off", "-q", "--json", str(tmp_path / "r.json")])
        limited = server.rate_limited
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    # One retry each, at no less than the Retry-After: the calls inside the window get through on it.
    assert limited >= 2 and code in (cli.EXIT_OK, cli.EXIT_GATE_FAILED)  # four calls in flight at once
    assert doc["calls"]["failed"] == 0 and all(p["failure"] is None for p in doc["pairs"])
    assert doc["calls"]["retried"] == limited and doc["calls"]["made"] == 3 + len(doc["pairs"])


@pytest.mark.parametrize(("payload", "said"), [
    (b"not json at all", "is not JSON"),
    (b"[1, 2, 3]", "is a JSON list, not an object"),
    (b'{"message": "hello", "done": true}', "is not one Ollama sends"),
])
def test_a_malformed_chat_reply_is_one_sentence_not_the_parsers_text(payload: bytes, said: str) -> None:
    from pytest_robustexplain.explainers.lean_http import parse_chat_reply
    from pytest_robustexplain.explainers.reply import MalformedReply

    with pytest.raises(MalformedReply, match=said) as caught:
        parse_chat_reply(200, payload)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("reply", "said"), [
    (b"HELLO THERE\r\n\r\n", "did not answer in HTTP"),
    (b"HTTP/1.1 abc OK\r\n\r\n", "did not answer in HTTP"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n{}", "broken Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "broken chunk size"),
])
def test_a_reply_that_is_not_http_is_one_sentence_naming_the_host(reply: bytes, said: str) -> None:
    import socket
    import threading

    from pytest_robustexplain.explainers.lean_http import LeanOllamaHttp
    from pytest_robustexplain.explainers.reply import MalformedReply

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(reply)
            conn.recv(1)  # hold the connection until the client gives up on it

    threading.Thread(target=answer, daemon=True).start()

    async def ask() -> None:
        client = LeanOllamaHttp(f"http://127.0.0.1:{port}", connect_timeout=2.0, read_timeout=5.0)
        try:
            await client.post("/api/chat", b"{}")
        finally:
            await client.aclose()

    try:
        with pytest.raises(MalformedReply, match=said) as caught:
            asyncio.run(ask())
    finally:
        listener.close()
    assert f"127.0.0.1:{port}" in str(caught.value)
