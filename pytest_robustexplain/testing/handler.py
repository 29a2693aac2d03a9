"""HTTP plumbing of the fake server: the request handler and its endpoints (standard library only)."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import socket
import ssl
import sys
import time
import traceback
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..explainers.base import FAKE_SERVER_OWNER
from .batches import BatchError
from .calls import (
    BLOAT_BYTES,
    FAIL_MESSAGES,
    Answer,
    ChatCall,
    HttpError,
    Ticket,
    native_call,
    openai_call,
    openai_error,
    prompt_tokens,
    words,
)
from .embeddings import embed_text
from .models import MODIFIED_EPOCH, NOT_FOUND_PAGE, ModelMeta, go_time, show_body
from .replies import digest_int

if TYPE_CHECKING:
    from .server import FakeOllamaServer


class _Abort(Exception):
    """Close the connection without (further) answer: dropped, hung or server stopping."""


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() joins handler threads itself, with a deadline
    request_queue_size = 128  # many concurrent clients connect at once; the default backlog is 5

    def __init__(self, fake: FakeOllamaServer, port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self.fake = fake
        self.tls = tls
        super().__init__(("127.0.0.1", port), _Handler)

    def get_request(self) -> tuple[Any, Any]:
        """The accepted connection, wrapped in TLS when the server serves https (the handshake is done by
        the connection's own thread, in setup, so a slow client holds up no other)."""
        sock, address = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        # Clients that time out or go away mid-answer are normal in fault tests; anything else is a bug
        # in the fake and is kept for the test to see.
        if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)) or (
            isinstance(exc, OSError) and self.fake._stopping.is_set()
        ):
            return
        self.fake._record_error("".join(traceback.format_exception(*sys.exc_info())))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffered writes (flushed after each response and each stream chunk) send headers and body in one
    # segment; with TCP_NODELAY this avoids the 40 ms Nagle/delayed-ACK stall on keep-alive connections.
    wbufsize = 64 * 1024
    server: HTTPServer

    # ---- connection bookkeeping -------------------------------------------------------------
    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10.0)  # a client that never finishes its handshake holds one thread only
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go servers do
        self.server.fake._register_connection(self.connection)

    def finish(self) -> None:
        try:
            with contextlib.suppress(OSError):
                super().finish()
        finally:
            self.server.fake._unregister_connection(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read stats, not access logs

    def send_response(self, code: int, message: str | None = None) -> None:
        # Like Go's net/http: a Date header but no Server header.
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    # ---- dispatch -----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        fake = self.server.fake
        # A gateway that takes its key in the path serves only under it: elsewhere, 401 as a gateway says.
        keyed = bool(fake.path_key) and path.startswith(f"/{fake.path_key}/")
        path = path.removeprefix(f"/{fake.path_key}") if keyed else path
        fake._count_call(path)
        raw = self._read_body()
        try:
            if fake.path_key and not keyed:
                self._send_json(401, {"error": "the key in the path is missing"})
                return
            self._route(method, path, raw)
        except _Abort:
            self.close_connection = True

    def _route(self, method: str, path: str, raw: bytes | None) -> None:
        fake = self.server.fake
        if method in ("GET", "HEAD") and path == "/":
            self._send_text(200, "Ollama is running")
        elif method in ("GET", "HEAD") and path == "/api/version":
            self._send_json(200, {"version": fake.version})
        elif method in ("GET", "HEAD") and path == "/api/tags":
            self._send_json(200, {"models": [m.tag_entry() for m in fake._model_metas()]})
        elif method == "GET" and path == "/api/ps":
            self._send_json(200, {"models": fake._loaded_entries()})
        elif method == "POST" and path == "/api/show":
            self._show(raw)
        elif method == "POST" and path == "/api/chat":
            self._chat(raw, "ollama", path)
        elif method == "GET" and path == "/v1/models":
            data = [self._openai_model(m) for m in fake._model_metas()]
            self._send_json(200, {"object": "list", "data": data})
        elif method == "GET" and path.startswith("/v1/models/"):
            self._openai_model_one(unquote(path[len("/v1/models/"):]))
        elif method == "POST" and path == "/v1/chat/completions":
            self._chat(raw, "openai", path)
        elif method == "POST" and path == "/tokenize" and fake.openai_context is not None:
            self._tokenize(raw)  # llama.cpp's, served when the fake plays llama.cpp's slot context
        elif method == "POST" and path in ("/api/embed", "/v1/embeddings"):
            self._embed(raw, "ollama" if path == "/api/embed" else "openai")
        elif path.startswith(("/v1/files", "/v1/batches")):
            self._batch(method, path, raw)
        else:
            # What Ollama's router (gin) answers for unknown paths and methods.
            self._send_text(404, NOT_FOUND_PAGE)

    def _batch(self, method: str, path: str, raw: bytes | None) -> None:
        """OpenAI's batch flow (``testing/batches.py``): upload, create, look, read a result file."""
        batches, parts = self.server.fake.batches, path.split("/")
        try:
            if method == "POST" and path == "/v1/files":
                self._send_json(200, batches.upload(raw or b"", self.headers.get("Content-Type", "")))
            elif method == "POST" and path == "/v1/batches":
                self._send_json(200, batches.create(self._json_object(raw)))
            elif method == "GET" and len(parts) == 4 and parts[2] == "batches":
                self._send_json(200, batches.look(parts[3]))
            elif method == "GET" and len(parts) == 5 and parts[2] == "files" and parts[4] == "content":
                self._send_bytes(200, batches.content(parts[3]), "application/jsonl")
            else:
                self._send_text(404, NOT_FOUND_PAGE)
        except (BatchError, HttpError) as err:
            self._send_error("openai", err.status, str(err) if isinstance(err, BatchError) else err.message)

    # ---- bodies -------------------------------------------------------------------------------
    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        try:
            size = int(length)
        except ValueError:
            self.close_connection = True
            return None
        return self.rfile.read(size) if size > 0 else b""

    def _read_chunked(self) -> bytes:
        data = bytearray()
        while True:
            size_line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            size = int(size_line or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(data)
            data += self.rfile.read(size)
            self.rfile.readline(1024)

    @staticmethod
    def _json_object(raw: bytes | None) -> dict[str, Any]:
        if not raw or not raw.strip():
            raise HttpError(400, "missing request body")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"invalid JSON in request body: {exc}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "request body must be a JSON object")
        return body

    # ---- writers ------------------------------------------------------------------------------
    def _send_bytes(self, status: int, body: bytes, content_type: str, *, trickle: float = 0.0,
                    headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":  # a HEAD answer has the GET headers and no body
            return
        if trickle <= 0:
            self.wfile.write(body)
            return
        # A slow server: 16 bytes at a time, ``trickle`` seconds apart (every read is quick, the whole
        # reply is not), until the body is out or the server stops.
        for start in range(0, len(body), 16):
            self.wfile.write(body[start:start + 16])
            self.wfile.flush()
            if self.server.fake._stopping.wait(trickle):
                return

    def _send_compressed(self, obj: Any, encoding: str) -> None:
        data = json.dumps(obj).encode("utf-8")
        if encoding in ("gzip", "deflate"):
            packer = zlib.compressobj(wbits=16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
            data = packer.compress(data) + packer.flush()
        self._send_bytes(200, data, "application/json; charset=utf-8", headers={"Content-Encoding": encoding})

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        """A JSON reply, trickled like every reply of a slow server (``trickle``)."""
        self._send_bytes(status, json.dumps(obj).encode("utf-8"), "application/json; charset=utf-8",
                         trickle=self.server.fake.trickle, headers=headers)

    def _send_text(self, status: int, text: str) -> None:
        self._send_bytes(status, text.encode("utf-8"), "text/plain; charset=utf-8")

    def _send_error(self, api: str, status: int, message: str, body: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None) -> None:
        if body is None:
            body = openai_error(status, message) if api == "openai" else {"error": message}
        self._send_json(status, body, headers)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---- endpoints ----------------------------------------------------------------------------
    def _show(self, raw: bytes | None) -> None:
        fake = self.server.fake
        try:
            body = self._json_object(raw)
            name = str(body.get("model") or body.get("name") or "")
            if not name:
                raise HttpError(400, "model is required")
            meta = fake._find_model(name)
            if meta is None:
                # Ollama's show handler words it differently from chat's.
                raise HttpError(404, f"model '{name}' not found")
        except HttpError as err:
            self._send_error("ollama", err.status, err.message)
            return
        self._send_json(200, show_body(meta, fake.think_capable, fake.context_length))

    def _openai_model(self, meta: ModelMeta) -> dict[str, Any]:
        # The owner says what it is, so that no report takes it for the model it is named after.
        entry: dict[str, Any] = {"id": meta.name, "object": "model", "created": MODIFIED_EPOCH,
                                 "owned_by": FAKE_SERVER_OWNER}
        if self.server.fake.openai_context is not None:  # as llama.cpp lists it: the context of a slot
            entry["meta"] = {"n_ctx": self.server.fake.openai_context,
                             "n_ctx_train": self.server.fake.context_length}
        return entry

    def _openai_model_one(self, name: str) -> None:
        meta = self.server.fake._find_model(name)
        if meta is None:
            self._send_error("openai", 404, f'model "{name}" not found')
        else:
            self._send_json(200, self._openai_model(meta))

    def _tokenize(self, raw: bytes | None) -> None:
        try:
            body = self._json_object(raw)
        except HttpError as err:
            self._send_error("openai", err.status, err.message)
            return
        content = body.get("content")
        if not isinstance(content, str):
            self._send_error("openai", 400, '"content" must be provided')
            return
        self._send_json(200, {"tokens": list(range(prompt_tokens(content)))})

    def _embed(self, raw: bytes | None, api: str) -> None:
        """Deterministic vectors (``testing.embeddings``) for one text or a list of texts."""
        try:
            model, texts = self._embed_request(raw)
        except HttpError as err:
            self._send_error(api, err.status, err.message)
            return
        self.server.fake._count_embedding(len(texts))
        vectors = [embed_text(t) for t in texts]
        tokens = sum(words(t) for t in texts)
        if api == "ollama":
            self._send_json(200, {"model": model, "embeddings": vectors, "total_duration": 1_000_000,
                                  "load_duration": 150_000, "prompt_eval_count": tokens})
            return
        data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)]
        self._send_json(200, {"object": "list", "data": data, "model": model,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _embed_request(self, raw: bytes | None) -> tuple[str, list[str]]:
        body = self._json_object(raw)
        model = str(body.get("model") or "")
        if not model:
            raise HttpError(400, "model is required")
        if self.server.fake._find_model(model) is None:
            raise HttpError(404, f'model "{model}" not found, try pulling it first')
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise HttpError(400, "invalid input type: input must be a string or a list of strings")
        return model, texts

    def _chat(self, raw: bytes | None, api: str, path: str) -> None:
        fake = self.server.fake
        try:
            body = self._json_object(raw)
        except HttpError as err:
            self._send_error(api, err.status, err.message)
            return
        ticket = fake._begin_chat(path, body, api, self.headers.get("Authorization"))
        try:
            self._serve_chat(body, api, ticket)
        finally:
            fake._answered(ticket)

    def _serve_chat(self, body: dict[str, Any], api: str, ticket: Ticket) -> None:
        fake = self.server.fake
        try:
            self._apply_transport_fault(ticket)
            call = native_call(body) if api == "ollama" else openai_call(body)
            answer = self._generate(call, ticket)
        except HttpError as err:
            fake._answered(ticket)
            self._send_error(api, err.status, err.message, err.body, err.headers)
            return
        if call.stream:
            self._stream_answer(call, answer, ticket)
            return
        fake._answered(ticket)
        body = self._final_body(call, answer)
        if ticket.fault is not None and ticket.fault.kind == "reshape":
            body = reshaped(body, ticket.fault.fields)
        if ticket.fault is not None and ticket.fault.kind == "trailers":
            self._send_with_trailers(body)
            return
        if ticket.fault is not None and ticket.fault.kind == "compress":
            self._send_compressed(body, ticket.fault.encoding)
            return
        if ticket.fault is not None and ticket.fault.kind == "bomb":
            self._send_bytes(200, bomb_body(ticket.fault.inflated), "application/json; charset=utf-8",
                             headers={"Content-Encoding": "gzip"})
            return
        self._send_json(200, body)
        if ticket.fault is not None and ticket.fault.kind == "extra":
            self._send_json(200, body)  # unasked; flushed with the first, so it arrives with it

    def _send_with_trailers(self, obj: Any) -> None:
        data = json.dumps(obj).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Trailer", "Checksum")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n0\r\nChecksum: abc123\r\n\r\n" % (len(data), data))

    def _apply_transport_fault(self, ticket: Ticket) -> None:
        fake = self.server.fake
        fault = ticket.fault
        if fault is None or fault.kind not in ("fail", "fail500", "hang", "drop", "redirect"):
            return
        if fault.kind == "redirect":
            raise HttpError(fault.status, "moved", headers={"Location": fault.location + self.path})
        if fault.kind == "hang":
            fake._stopping.wait(fault.seconds)
        if fault.kind in ("hang", "drop"):
            fake._answered(ticket)
            raise _Abort
        raise HttpError(fault.status, FAIL_MESSAGES.get(fault.status, f"fake server error {fault.status}"),
                        headers={} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)})

    def _generate(self, call: ChatCall, ticket: Ticket) -> Answer:
        fake = self.server.fake
        if not call.model:
            raise HttpError(400, "model is required")
        meta = fake._find_model(call.model)
        if meta is None:
            raise HttpError(404, f'model "{call.model}" not found, try pulling it first')
        if call.think not in (None, False) and not fake.think_capable:
            raise HttpError(400, f'"{call.model}" does not support thinking')
        started = time.monotonic_ns()
        load_ns = fake._load(meta.name)
        if not call.messages:
            # Ollama answers an empty conversation by just loading the model.
            return Answer("", "", "load", 0, 0, started, load_ns)
        call, read = fake._fit_context(call)
        if not fake._acquire_slot():
            raise _Abort
        try:
            if fake._stopping.wait(fake.latency):
                raise _Abort
            content, thinking = fake._reply_for(call, ticket.fault)
        finally:
            fake._release_slot()
        if ticket.fault is not None and ticket.fault.kind == "bloat":  # past every limit: num_predict too
            return Answer(content, thinking, "stop", read, words(content), started, load_ns)
        return self._answer(call, content, thinking, started, load_ns, read)

    @staticmethod
    def _answer(call: ChatCall, content: str, thinking: str, started: int, load_ns: int, read: int) -> Answer:
        limit = call.options.get("num_predict")
        done_reason = "stop"
        if isinstance(limit, (int, float)) and limit > 0 and words(content) > limit:
            content = " ".join(content.split()[: int(limit)])
            done_reason = "length"
        completion = words(content) + words(thinking)
        return Answer(content, thinking, done_reason, read, completion, started, load_ns)

    # ---- answer bodies ------------------------------------------------------------------------
    @staticmethod
    def _durations(answer: Answer) -> dict[str, int]:
        total = max(time.monotonic_ns() - answer.started_ns, 1)
        prompt_ns = min(answer.prompt_tokens * 40_000, total // 4)
        return {
            "total_duration": total,
            "load_duration": min(answer.load_ns, total // 4),
            "prompt_eval_count": answer.prompt_tokens,
            "prompt_eval_duration": prompt_ns,
            "eval_count": answer.completion_tokens,
            "eval_duration": max(total // 2, 1),
        }

    def _final_body(self, call: ChatCall, answer: Answer) -> dict[str, Any]:
        if call.api == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": answer.content}
            if answer.thinking:
                message["reasoning"] = answer.thinking
            return {
                "id": f"chatcmpl-{digest_int(time.time_ns(), id(answer)) % 1000}",
                "object": "chat.completion", "created": int(time.time()),
                "model": self.server.fake.named(call.model),
                "system_fingerprint": "fp_ollama",
                "choices": [{"index": 0, "message": message, "finish_reason": answer.done_reason}],
                "usage": self._usage(answer),
            }
        message = {"role": "assistant", "content": answer.content}
        if answer.thinking:
            message["thinking"] = answer.thinking
        return {"model": self.server.fake.named(call.model), "created_at": go_time(), "message": message,
                "done": True, "done_reason": answer.done_reason, **self._durations(answer)}

    @staticmethod
    def _usage(answer: Answer) -> dict[str, int]:
        return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                "total_tokens": answer.prompt_tokens + answer.completion_tokens}

    @staticmethod
    def _pieces(text: str) -> list[str]:
        # Word-sized pieces that concatenate back to the exact text, like token deltas.
        return re.findall(r"\s*\S+|\s+$", text)

    def _stream_answer(self, call: ChatCall, answer: Answer, ticket: Ticket) -> None:
        if call.api == "openai":
            self._stream_openai(call, answer, ticket)
            return
        self._start_stream("application/x-ndjson")

        def line(obj: dict[str, Any]) -> None:
            self._write_chunk(json.dumps(obj).encode("utf-8") + b"\n")

        for piece in self._pieces(answer.thinking):
            line({"model": self.server.fake.named(call.model), "created_at": go_time(),
                  "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False})
        for piece in self._pieces(answer.content):
            line({"model": self.server.fake.named(call.model), "created_at": go_time(),
                  "message": {"role": "assistant", "content": piece}, "done": False})
        final = self._final_body(call, answer)
        final["message"] = {"role": "assistant", "content": ""}
        self.server.fake._answered(ticket)
        line(final)
        self._end_stream()

    def _stream_openai(self, call: ChatCall, answer: Answer, ticket: Ticket) -> None:
        self._start_stream("text/event-stream")
        ident = f"chatcmpl-{digest_int(time.time_ns(), id(answer)) % 1000}"

        def event(delta: dict[str, Any] | None, finish: str | None,
                  usage: dict[str, int] | None = None) -> None:
            obj: dict[str, Any] = {"id": ident, "object": "chat.completion.chunk",
                                   "created": int(time.time()), "model": self.server.fake.named(call.model),
                                   "system_fingerprint": "fp_ollama", "choices": []}
            if delta is not None:
                obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
            if usage is not None:
                obj["usage"] = usage
            self._write_chunk(b"data: " + json.dumps(obj).encode("utf-8") + b"\n\n")

        for piece in self._pieces(answer.thinking):
            event({"role": "assistant", "content": "", "reasoning": piece}, None)
        for piece in self._pieces(answer.content):
            event({"role": "assistant", "content": piece}, None)
        self.server.fake._answered(ticket)
        event({"role": "assistant", "content": ""}, answer.done_reason)
        if call.include_usage:
            event(None, None, self._usage(answer))
        self._write_chunk(b"data: [DONE]\n\n")
        self._end_stream()


def reshaped(body: dict[str, Any], fields: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """``body`` with each dotted path set to its value (a list index is a number), made where missing."""
    out = copy.deepcopy(body)
    for path, value in fields:
        *parents, last = path.split(".")
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return out


@functools.cache
def bomb_body(inflated: int = 0) -> bytes:
    """A gzip body that inflates to ``inflated`` bytes of spaces (:data:`BLOAT_BYTES`, 20 MB, from about
    20 KB, by default): a "bomb" reply, compressed a mebibyte at a time so a big one never sits in memory."""
    packer, left, out = zlib.compressobj(9, zlib.DEFLATED, 31), inflated or BLOAT_BYTES, []  # 31: gzip
    while left:
        out.append(packer.compress(b" " * min(left, 1 << 20)))
        left -= min(left, 1 << 20)
    return b"".join([*out, packer.flush()])
