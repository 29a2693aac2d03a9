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
from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.explainers.retry import RetryPolicy, retry_after_of
from pytest_robustexplain.testing import FakeOllamaServer

pytestmark = pytest.mark.usefixtures("isolated")


class Told(Exception):
    """A retryable error carrying a Retry-After, as the Ollama client's ResponseError does."""

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


def _told(headers: list[str | None]) -> Any:
    """An attempt that raises a Told with each header in turn (None: no Retry-After), then answers."""
    async def attempt() -> str:
        if headers:
            raise Told(headers.pop(0))
        return "ok"
    return attempt


def test_the_retry_policy_waits_at_least_what_the_server_asked_for_and_no_longer_than_its_cap() -> None:
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    policy = RetryPolicy(max_attempts=4, sleep=sleep, max_retry_after=60.0)
    assert asyncio.run(policy.run(_told(["3", "999", None]))) == "ok"
    # As told (at most a jitter of base_delay more), cut to the cap; then a backoff of the first retry.
    assert 3.0 <= waited[0] <= 3.0 + policy.base_delay and 60.0 <= waited[1] <= 60.0 + policy.base_delay
    assert waited[2] <= policy.base_delay


def test_a_wait_the_server_asked_for_does_not_use_up_the_calls_attempts() -> None:
    """A rate limit paces the run: 12 told waits and a call with 2 attempts still gets through; the
    attempts count what failed without saying when to come back, and the told waits have a bound."""
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    policy = RetryPolicy(max_attempts=2, sleep=sleep)
    assert asyncio.run(policy.run(_told(["1"] * 12 + [None]))) == "ok"
    assert all(w >= 1.0 for w in waited[:12])  # twelve as told; then a backoff, and the second attempt
    from pytest_robustexplain.explainers.retry import RetryExhaustedError

    with pytest.raises(RetryExhaustedError):
        asyncio.run(RetryPolicy(max_attempts=2, sleep=sleep).run(_told([None, None, "1"])))
    bounded = RetryPolicy(max_attempts=2, sleep=sleep, max_told_wait=3)
    with pytest.raises(RetryExhaustedError) as ended:  # a server that never lets the call in: the bound
        asyncio.run(bounded.run(_told(["1"] * 10)))
    # ... which the call states: 3 s of told waits, then two attempts (the told waits past the bound).
    assert "waited 3 s in all as the server asked (Retry-After), the most a call waits so (3 s)" in str(
        ended.value)
    patient = RetryPolicy(max_attempts=2, sleep=sleep)  # Retry-After: 1 a hundred times: well inside 600 s
    assert asyncio.run(patient.run(_told(["1"] * 100 + [None]))) == "ok"
    with pytest.raises(RetryExhaustedError):  # "come back now" for ever is a second a wait: it ends too
        asyncio.run(RetryPolicy(max_attempts=2, sleep=sleep, max_told_wait=5).run(_told(["0"] * 50)))


def test_every_call_of_the_policy_waits_until_the_server_said_to_come_back() -> None:
    """A second call starting while the first waits out a Retry-After of 5 s waits as long before its
    request, instead of meeting the limit and spending its own attempts on it."""
    events: list[tuple[str, float]] = []

    async def main() -> None:
        gate = asyncio.Event()

        async def sleep(seconds: float) -> None:
            events.append(("sleep", round(seconds)))
            gate.set()

        policy = RetryPolicy(max_attempts=2, sleep=sleep, base_delay=0.0)

        async def second() -> str:
            await gate.wait()  # starts once the first call has been told to wait
            events.append(("second asks", 0))
            return "ok"

        first = asyncio.ensure_future(policy.run(_told(["5"])))
        await gate.wait()
        assert await policy.run(second) == "ok"
        await first

    asyncio.run(main())
    assert events[0] == ("sleep", 5) and events[1] == ("sleep", 5) and events[2] == ("second asks", 0)


def test_a_steady_rate_limit_slows_a_run_and_fails_no_call(tmp_path: Path) -> None:
    """One chat request a second, 429 with Retry-After for the rest, four calls in flight and one retry
    a call: before, the calls that met the limit twice failed; now every call is made, each as told."""
    with FakeOllamaServer() as server:
        server.rate_limit(1, steady=True)
        with pytest.warns(RobustExplainWarning, match="refuses requests for its rate"):  # and backs off
            code = cli.main(["run", "--model", "fake-model:latest", "--host", server.url, "--users", "2",
                             "--perturbations", "noise", "--severities", "1", "--guard", "off", "--retries",
                             "1", "--cache", "off", "--progress", "off", "-q", "--json",
                             str(tmp_path / "r.json")])
        limited = server.rate_limited
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert code in (cli.EXIT_OK, cli.EXIT_GATE_FAILED) and limited >= 1
    assert doc["calls"]["failed"] == 0 and all(p["failure"] is None for p in doc["pairs"])


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_rate_limited_server_slows_the_run_and_every_call_is_made(backend: str, tmp_path: Path) -> None:
    with FakeOllamaServer() as server:
        host = server.url + ("/v1" if backend == "openai" else "")
        # After the warm-up, the first call opens a window of 1 s: it and those inside it get 429.
        server.rate_limit(1, after=1)
        with pytest.warns(RobustExplainWarning, match="refuses requests for its rate"):  # and backs off
            code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host,
                             "--users", "3", "--perturbations", "noise", "--severities", "1,5", "--retries",
                             "1", "--cache", "off", "--progress", "off", "-q", "--json",
                             str(tmp_path / "r.json")])
        limited = server.rate_limited
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    # The calls inside the window wait as told and get through: how many met it depends on how many were
    # in flight when the first was told (the others wait before asking), never on a spent retry.
    assert limited >= 1 and code in (cli.EXIT_OK, cli.EXIT_GATE_FAILED)
    assert doc["calls"]["failed"] == 0 and all(p["failure"] is None for p in doc["pairs"])
    assert doc["calls"]["retried"] == limited and doc["calls"]["made"] == 3 + len(doc["pairs"])


def _answering(reply: bytes) -> tuple[Any, int]:
    """A one-connection server that answers whatever it is asked with ``reply``: (its socket, its port)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(reply)
            conn.recv(1)  # hold the connection until the client gives up on it

    threading.Thread(target=answer, daemon=True).start()
    return listener, listener.getsockname()[1]


def _ask(port: int) -> None:
    from pytest_robustexplain.explainers.ollama import OllamaExplainer

    async def ask() -> None:
        explainer = OllamaExplainer("m", host=f"http://127.0.0.1:{port}")
        client = explainer._make_client()
        try:
            await explainer._request(client, "Explain.", seed=1, num_predict=10)
        finally:
            await client.close()

    asyncio.run(ask())


@pytest.mark.parametrize(("payload", "said"), [
    (b"not json at all", "is not JSON"),
    (b"[1, 2, 3]", "is a JSON list, not an object"),
    (b'{"message": "hello", "done": true}', "is not one Ollama sends"),
])
def test_a_malformed_chat_reply_is_one_sentence_not_the_parsers_text(payload: bytes, said: str) -> None:
    from pytest_robustexplain.explainers.reply import MalformedReply

    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    listener, port = _answering(head.encode() + payload)
    try:
        with pytest.raises(MalformedReply, match=said) as caught:
            _ask(port)
    finally:
        listener.close()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("reply", [
    b"HELLO THERE\r\n\r\n",
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_a_reply_that_is_not_http_is_a_transport_error_the_policy_retries(reply: bytes) -> None:
    import httpx

    from pytest_robustexplain.explainers.retry import is_retryable

    listener, port = _answering(reply)
    try:
        with pytest.raises(httpx.TransportError) as caught:
            _ask(port)
    finally:
        listener.close()
    assert is_retryable(caught.value)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("path", ["plain", "official", "openai"])
def test_a_redirected_model_call_stops_the_run_naming_both_addresses(
        status: int, path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A moved server or a proxy: never followed (a 301 would turn the POST into a GET and the user would
    be told to pull a model they have; a 307 would let another server answer while the report names the
    first). The other server gets no call; the message names both and the host to set."""
    with FakeOllamaServer() as server, FakeOllamaServer() as other:
        suffix = "/v1" if path == "openai" else ""
        host = server.url + suffix
        if path == "official":  # credentials in the URL: the official client (basic auth) sends the calls
            host = host.replace("http://", "http://user:secret@")
        server.redirect_next(50, to=other.url, status=status)
        code = cli.main(["run", "--backend", "openai" if path == "openai" else "ollama",
                         "--model", "fake-model:latest", "--host", host, "--users", "2",
                         "--perturbations", "noise", "--severities", "1", "--retries", "2", "--cache", "off",
                         "--progress", "off", "-q", "--json", str(tmp_path / "r.json")])
        answered_elsewhere, made, target = other.chat_calls, server.chat_calls, other.url
    err = capsys.readouterr().err
    assert code == cli.EXIT_BACKEND and answered_elsewhere == 0
    assert made == 1, "a redirect is not retried: one call, then the run stops"
    api = "/chat/completions" if path == "openai" else "/api/chat"
    assert f"redirected POST {api} (HTTP {status}) to {target}{suffix}{api}" in err
    assert f"set --host to {target}{suffix}" in err
    assert "not found" not in err and "pull" not in err and "secret" not in err
    assert "Traceback" not in err


def _redirecting_server(target: str) -> Any:
    """A server that answers every request with a 307 to ``target`` + the path (preflight included)."""
    import http.server
    import threading

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(307)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_redirected_preflight_is_the_same_one_sentence(backend: str) -> None:
    from pytest_robustexplain.errors import BackendError
    from pytest_robustexplain.explainers import make_explainer

    with FakeOllamaServer() as other:
        redirecting = _redirecting_server(other.url)
        host = f"http://127.0.0.1:{redirecting.server_address[1]}" + ("/v1" if backend == "openai" else "")
        try:
            with pytest.raises(BackendError) as caught:
                explainer = make_explainer(backend, "fake-model:latest", host=host, max_attempts=3)
                asyncio.run(explainer.preflight())
        finally:
            redirecting.shutdown()
            redirecting.server_close()
        reached, target = sum(other.calls.values()), other.url
    said = str(caught.value)
    assert reached == 0 and f"{host} redirected GET /" in said and "(HTTP 307)" in said
    assert f"set --robustexplain-host to {target}" in said and "\n" not in said


def test_a_redirect_to_a_dead_address_names_both_and_is_not_followed() -> None:
    """A reachable host that redirects to a dead port: the redirect is the error (never followed), naming
    both addresses, not a refusal blamed on the host."""
    import socket

    from pytest_robustexplain.errors import BackendError
    from pytest_robustexplain.explainers import make_explainer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    redirecting = _redirecting_server(f"http://127.0.0.1:{dead}")
    host = f"http://127.0.0.1:{redirecting.server_address[1]}"
    try:
        with pytest.raises(BackendError) as caught:
            asyncio.run(make_explainer("ollama", "m", host=host, max_attempts=1).preflight())
    finally:
        redirecting.shutdown()
        redirecting.server_close()
    said = str(caught.value)
    assert f"{host} redirected GET /api/" in said and f"(HTTP 307) to http://127.0.0.1:{dead}/api/" in said
    assert f"set --robustexplain-host to http://127.0.0.1:{dead}" in said and "refused" not in said


def test_a_redirected_embedding_call_is_the_same_one_sentence() -> None:
    from pytest_robustexplain.errors import BackendError
    from pytest_robustexplain.explainers.embedding import EmbeddingClient

    redirecting = _redirecting_server("http://127.0.0.1:9")
    host = f"http://127.0.0.1:{redirecting.server_address[1]}"
    try:
        with pytest.raises(BackendError) as caught:
            asyncio.run(EmbeddingClient("nomic-embed-text", host=host).embed(["a text"]))
    finally:
        redirecting.shutdown()
        redirecting.server_close()
    said = str(caught.value)
    assert said.startswith(f"embeddings: {host} redirected POST /api/embed (HTTP 307) to http://127.0.0.1:9")
    assert "set --robustexplain-host to http://127.0.0.1:9" in said


def test_the_fake_server_refuses_a_redirect_that_is_not_one() -> None:
    server = FakeOllamaServer()
    with pytest.raises(ValueError, match="status must be a redirect"):
        server.redirect_next(1, to="http://x", status=200)
    with pytest.raises(ValueError, match="must be a URL"):
        server.redirect_next(1, to="elsewhere")


def test_an_embedding_server_trickling_its_reply_cannot_hold_a_call_past_the_deadline() -> None:
    """Embeddings run under the same deadline as generation (timeout + connect-timeout): a reply trickled
    16 bytes at a time is cut there and retried, then one BackendError naming the deadline. The timeouts
    leave a loaded machine room: a connect timeout of 0.1 s met a loopback connect that took longer under
    load (ConnectTimeout instead of the deadline, 2 of 9 runs beside a CPU-bound process)."""
    from pytest_robustexplain.errors import BackendError
    from pytest_robustexplain.explainers.embedding import EmbeddingClient

    with FakeOllamaServer(models=("fake-model:latest", "nomic-embed-text:latest")) as server:
        client = EmbeddingClient("nomic-embed-text", host=server.url, timeout=1.0, connect_timeout=1.0,
                                 max_attempts=2)
        server.trickle = 0.2  # a vector of hundreds of bytes takes many seconds; each read waits 0.2 s
        late = r"2 attempts failed; last error: .*no complete reply within 2 s"
        with pytest.raises(BackendError, match=late):
            asyncio.run(client.embed(["one text"]))
        server.trickle = 0.0
        asyncio.run(client.embed(["one text"]))  # the same client is fine once the server answers
