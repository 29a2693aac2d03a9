"""Helpers for the real-model tests: find a llama.cpp server and put an Ollama face on it.

A real, small LLM is served by llama.cpp's ``llama-server`` (``../shared/tools/real-llm-server`` or
any OpenAI-compatible llama.cpp server), which speaks the OpenAI API, not Ollama's. To drive the
plugin's Ollama backend — the official ``ollama`` client — against real model text without installing
Ollama, :class:`OllamaAdapter` is a small loopback HTTP server that answers the Ollama endpoints the
backend uses by calling the llama.cpp server:

- ``GET /``, ``GET /api/version`` — "Ollama is running" and a version string;
- ``GET /api/tags`` — the served model under the Ollama-style name given to the adapter, with a digest
  derived from what llama.cpp reports about the model (so the response cache is keyed to that model);
- ``POST /api/show`` — details and capabilities (``completion``);
- ``POST /api/chat`` — mapped onto ``POST /v1/chat/completions`` (``temperature``, ``seed``,
  ``num_predict`` → ``max_tokens``); answered as Ollama answers, plain JSON or NDJSON stream. A prompt
  longer than the context is truncated silently as Ollama truncates it (its start kept, then its tail),
  where llama.cpp itself would refuse it; ``truncated`` counts them.

It also forwards ``/v1/...``, ``/health`` and llama.cpp's ``/tokenize`` unchanged, so the
OpenAI-compatible backend can be pointed at ``adapter.url + "/v1"`` and its calls counted the same way.
``chat_calls`` counts the chat requests that went on to the llama.cpp server by either route: a run served
from the response cache must leave it at zero. Only the standard library is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

ENV_VAR = "ROBUSTEXPLAIN_REAL_LLM_URL"
DEFAULT_URL = "http://127.0.0.1:8088"
# LLAMA_ARG_REPACK=0: llama.cpp built with -march=native uses AMX tiles on CPUs that advertise them, and
# this VM's kernel does not enable AMX state (SIGILL on the first matrix product); no repacking avoids
# the AMX kernels. LLAMA_ARG_THREADS=1 when other work shares the 2 cores: a 2-thread llama.cpp
# spin-waits and slows down 20-50x under contention. CTX: 4 slots x 4096 tokens fit the longest prompts.
START_HINT = ("LLAMA_ARG_REPACK=0 LLAMA_ARG_THREADS=2 CTX=16384 PORT=8088 "
              "../shared/tools/real-llm-server &  (llama.cpp serving SmolLM2-135M-Instruct)")
ADAPTER_VERSION = "0.0.0-llamacpp-adapter"


def real_llm_url() -> str:
    """The llama.cpp server's base URL (no trailing slash, no ``/v1``): ``$ROBUSTEXPLAIN_REAL_LLM_URL``."""
    url = (os.environ.get(ENV_VAR) or DEFAULT_URL).strip().rstrip("/")
    url = url.removesuffix("/v1")
    return url if "://" in url else "http://" + url


def health(url: str, timeout: float = 1.0) -> str | None:
    """None when ``url/health`` says the server is ready; otherwise why not (in words)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            body = response.read(2000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:  # llama.cpp answers 503 while it loads the model
        return f"{url}/health answered HTTP {exc.code} {exc.read(200).decode('utf-8', 'replace')!r}"
    except (OSError, ValueError) as exc:
        return f"nothing answers at {url} ({type(exc).__name__}: {exc})"
    return None if '"ok"' in body.replace(" ", "") else f"{url}/health answered {body[:200]!r}"


def wait_until_ready(url: str, timeout_s: float) -> str | None:
    """Poll ``/health`` until the model is loaded; None when ready, else the last reason."""
    deadline = time.monotonic() + timeout_s
    reason = health(url)
    while reason is not None and time.monotonic() < deadline:
        time.sleep(0.5)
        reason = health(url)
    return reason


class UpstreamError(Exception):
    """The llama.cpp server failed or answered with an error: status and message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class OllamaAdapter:
    """A loopback Ollama API in front of a llama.cpp (OpenAI-compatible) server; see the module doc."""

    def __init__(self, upstream: str, *, model: str = "smollm2:135m", timeout: float = 300.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.calls: Counter[str] = Counter()  # requests received, by path
        self.upstream_chat_calls = 0  # chat requests forwarded to llama.cpp (both routes)
        self.errors: list[str] = []
        self.truncated = 0  # native chat prompts truncated to the context, as Ollama truncates them
        self._upstream_model: str | None = None
        self._lock = threading.Lock()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, name="ollama-adapter",
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def chat_calls(self) -> int:
        """Chat requests that reached the llama.cpp server."""
        with self._lock:
            return self.upstream_chat_calls

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.upstream_chat_calls = 0
            self.truncated = 0
            self.errors.clear()

    def start(self) -> OllamaAdapter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> OllamaAdapter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ talking to llama.cpp
    def fetch(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, dict[str, str]]:
        """One request to the llama.cpp server: (status, body, headers); HTTP errors are returned too."""
        request = urllib.request.Request(self.upstream + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        if path.endswith("/chat/completions"):
            with self._lock:
                self.upstream_chat_calls += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers or {})
        except (OSError, ValueError) as exc:
            raise UpstreamError(502, f"llama.cpp server at {self.upstream} unreachable: {exc}") from None

    def upstream_json(self, method: str, path: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        status, raw, _ = self.fetch(method, path, body)
        if status != 200:
            raise UpstreamError(status, f"llama.cpp {path} answered {status}: {raw[:300]!r}")
        try:
            return json.loads(raw)
        except ValueError:
            raise UpstreamError(502, f"llama.cpp {path} sent invalid JSON: {raw[:300]!r}") from None

    def model_entry(self) -> dict[str, Any]:
        """What llama.cpp's ``/v1/models`` says about the (single) model it serves."""
        data = self.upstream_json("GET", "/v1/models").get("data") or []
        if not data or not isinstance(data[0], dict):
            raise UpstreamError(502, f"llama.cpp at {self.upstream} lists no model")
        return dict(data[0])

    def upstream_model(self) -> str:
        """The id llama.cpp lists for its model (looked up once)."""
        if self._upstream_model is None:
            self._upstream_model = str(self.model_entry().get("id") or self.model)
        return self._upstream_model

    def tag_entry(self) -> dict[str, Any]:
        entry = self.model_entry()
        meta: dict[str, Any] = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
        # The digest stands for the model file: the same id and metadata give the same digest, so the
        # response cache follows the model and not the adapter.
        stable = {k: v for k, v in entry.items() if k not in ("created", "object")}
        digest = hashlib.sha256(json.dumps(stable, sort_keys=True).encode("utf-8")).hexdigest()
        return {"name": self.model, "model": self.model, "modified_at": "2024-11-01T00:00:00Z",
                "size": int(meta.get("size") or 0), "digest": digest, "details": self.details(meta)}

    def details(self, meta: dict[str, Any]) -> dict[str, Any]:
        n_params = meta.get("n_params")
        size = ""
        if isinstance(n_params, (int, float)) and n_params > 0:  # shown the way Ollama shows it
            size = f"{n_params / 1e9:.1f}B" if n_params >= 1e9 else f"{n_params / 1e6:.0f}M"
        return {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                "parameter_size": size, "quantization_level": self.quantization()}

    def quantization(self) -> str:
        """The quantization named in the model file's name (``...Q4_1.gguf``), when llama.cpp tells it."""
        with contextlib.suppress(UpstreamError):
            path = str(self.upstream_json("GET", "/props").get("model_path", ""))
            match = re.search(r"[.-](I?Q\d\w*|F16|F32|BF16)\.gguf$", path, re.IGNORECASE)
            if match:
                return match.group(1).upper()
        return ""

    def fit_context(self, request: dict[str, Any], options: dict[str, Any]) -> None:
        """Truncate the last message as Ollama does a prompt longer than ``num_ctx`` — silently, keeping
        its first tokens and its tail — where llama.cpp would refuse it. The context is the smaller of the
        request's ``num_ctx`` (Ollama's default 4096) and llama.cpp's slot; room is kept for the reply
        and the chat template (measured with llama.cpp's own /tokenize)."""
        messages = request.get("messages") or []
        if not messages or not isinstance(messages[-1].get("content"), str):
            return
        slot = (self.model_entry().get("meta") or {}).get("n_ctx")
        num_ctx = options.get("num_ctx") if isinstance(options.get("num_ctx"), int) else 4096
        limit = min(num_ctx, slot) if isinstance(slot, int) else num_ctx
        room = limit - int(options.get("num_predict") or 128) - 64  # the reply, the chat template
        tokens = self.upstream_json("POST", "/tokenize", {"content": messages[-1]["content"]})["tokens"]
        if len(tokens) <= room:
            return
        kept = tokens[:4] + tokens[len(tokens) - (room - 4):]
        text = self.upstream_json("POST", "/detokenize", {"tokens": kept})["content"]
        messages[-1] = {**messages[-1], "content": text}
        with self._lock:
            self.truncated += 1

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """An Ollama ``/api/chat`` request answered through ``/v1/chat/completions``."""
        options: dict[str, Any] = body["options"] if isinstance(body.get("options"), dict) else {}
        # llama.cpp serves one model whatever the name; ask for it by the id it lists all the same.
        request: dict[str, Any] = {"model": self.upstream_model(), "messages": body.get("messages", []),
                                   "stream": False}
        for ollama_name, openai_name in (("temperature", "temperature"), ("seed", "seed"),
                                         ("num_predict", "max_tokens"), ("top_p", "top_p"),
                                         ("top_k", "top_k")):
            if options.get(ollama_name) is not None:
                request[openai_name] = options[ollama_name]
        started = time.monotonic_ns()
        self.fit_context(request, options)
        data = self.upstream_json("POST", "/v1/chat/completions", request)
        try:
            choice = data["choices"][0]
            content = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise UpstreamError(502, f"malformed completion from llama.cpp: {str(data)[:300]}") from None
        usage = data.get("usage") or {}
        total = max(time.monotonic_ns() - started, 1)
        return {"model": body.get("model"), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "message": {"role": "assistant", "content": content}, "done": True,
                "done_reason": "length" if choice.get("finish_reason") == "length" else "stop",
                "total_duration": total, "load_duration": 0,
                "prompt_eval_count": int(usage.get("prompt_tokens") or 0), "prompt_eval_duration": 0,
                "eval_count": int(usage.get("completion_tokens") or 0), "eval_duration": total}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, adapter: OllamaAdapter) -> None:
        self.adapter = adapter
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    upstream_server: str | None = None  # the llama.cpp Server header, passed on with forwarded answers

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def version_string(self) -> str:
        return self.upstream_server or super().version_string()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        adapter = self.server.adapter
        path = urlsplit(self.path).path
        with adapter._lock:
            adapter.calls[path] += 1
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            self._route(method, path, raw)
        except UpstreamError as exc:
            self._json(exc.status, {"error": exc.message})
        except Exception as exc:  # a bug in the adapter: tell the client and keep it for the test
            with adapter._lock:
                adapter.errors.append(f"{method} {path}: {exc!r}")
            self._json(500, {"error": f"adapter error: {exc!r}"})

    def _route(self, method: str, path: str, raw: bytes) -> None:
        adapter = self.server.adapter
        if path.startswith("/v1/") or path in ("/health", "/tokenize", "/detokenize"):
            status, body, headers = adapter.fetch(method, path, raw if method == "POST" else None)
            self.upstream_server = headers.get("Server")
            self._send(status, body, headers.get("Content-Type", "application/json"))
        elif method == "GET" and path == "/":
            self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
        elif method == "GET" and path == "/api/version":
            self._json(200, {"version": ADAPTER_VERSION})
        elif method == "GET" and path == "/api/tags":
            self._json(200, {"models": [adapter.tag_entry()]})
        elif method == "POST" and path == "/api/show":
            self._show(raw)
        elif method == "POST" and path == "/api/chat":
            self._chat(raw)
        else:
            self._send(404, b"404 page not found", "text/plain")

    def _body(self, raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise UpstreamError(400, "invalid JSON in request body") from None
        if not isinstance(body, dict):
            raise UpstreamError(400, "request body must be a JSON object")
        return body

    def _known(self, body: dict[str, Any]) -> None:
        adapter = self.server.adapter
        name = str(body.get("model") or body.get("name") or "")
        if name not in (adapter.model, f"{adapter.model}:latest"):
            raise UpstreamError(404, f'model "{name}" not found, try pulling it first')

    def _show(self, raw: bytes) -> None:
        body = self._body(raw)
        self._known(body)
        entry = self.server.adapter.tag_entry()
        self._json(200, {"modelfile": "", "parameters": "", "template": "", "details": entry["details"],
                         "model_info": {"general.architecture": "llama"}, "capabilities": ["completion"],
                         "modified_at": entry["modified_at"]})

    def _chat(self, raw: bytes) -> None:
        body = self._body(raw)
        self._known(body)
        answer = self.server.adapter.chat(body)
        if body.get("stream") is False:
            self._json(200, answer)
            return
        # Ollama streams NDJSON by default: the text in one chunk, then the final record.
        first = {"model": answer["model"], "created_at": answer["created_at"], "message": answer["message"],
                 "done": False}
        last = dict(answer, message={"role": "assistant", "content": ""})
        lines = b"".join(json.dumps(obj).encode("utf-8") + b"\n" for obj in (first, last))
        self._send(200, lines, "application/x-ndjson")

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), "application/json; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


@contextlib.contextmanager
def ollama_adapter(upstream: str, **kwargs: Any) -> Iterator[OllamaAdapter]:
    """A started :class:`OllamaAdapter`, stopped on exit."""
    with OllamaAdapter(upstream, **kwargs) as adapter:
        yield adapter
