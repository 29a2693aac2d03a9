"""A lean HTTP/1.1 client for the generation requests (and the preflight) to a plain-``http://`` Ollama
server.

Through the official client (pydantic models, httpx, httpcore, anyio) a request cost 1.0–1.4 ms of CPU;
the model call itself is all that is slow, so at zero model latency that was the plugin's largest
per-pair cost. This client writes the same request bytes the official client writes (``POST /api/chat``,
the same JSON body and headers) over pooled keep-alive connections driven by an :class:`asyncio.Protocol`
(no task or stream per read), and raises the exceptions the official client raises, so retries, error
messages and deadlines behave alike:

- no connection: builtin ``ConnectionError`` with the official client's message (``ollama`` turns
  ``httpx.ConnectError`` into it); a connect that times out: ``httpx.ConnectTimeout``;
- an HTTP error status: ``ollama.ResponseError(body, status)``;
- no data for ``read_timeout`` seconds: ``httpx.ReadTimeout`` (a bound per read, as httpx's; the caller's
  deadline bounds the whole call);
- a connection closed mid-reply: ``httpx.RemoteProtocolError``; reset: ``httpx.ReadError``/``WriteError``.

A redirect is :class:`~.retry.Redirected`, as the official client's hook raises it (never followed).
Anything else unusual — a reply that is not the plain JSON object expected — is handed to the official
client or its response model, which then decides exactly as it always did. ``httpx`` and
``ollama`` are imported only on those paths, never for a normal reply.

Preflight (``/api/version``, ``/api/tags``, ``/api/show``) goes the same way: :func:`plain_version`,
:func:`plain_tags` and :func:`plain_show` read a reply whose fields have exactly the JSON types the
official response models accept unchanged (pydantic ignores unknown fields; so do they), and raise
:class:`NotPlain` for anything else — an error status included — so the explainer asks the official client
instead, which then answers, or fails, exactly as before. A run whose replies are all cached then imports
neither ``ollama`` nor ``httpx`` nor pydantic (0.13 s on a quiet machine, plus the certificate store of the
default client ``ollama`` builds when imported).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import json
import os
import platform
import re
import urllib.parse
from collections.abc import Callable
from importlib import metadata
from typing import Any

from .reply import MAX_REPLY_BYTES, MalformedReply, ReplyTooLarge
from .retry import Redirected

# As ``ollama._client`` words it.
CONNECTION_ERROR_MESSAGE = ("Failed to connect to Ollama. Please check that Ollama is downloaded, running "
                            "and accessible. https://ollama.com/download")
_HEADER_END = b"\r\n\r\n"


@functools.lru_cache(maxsize=1)
def _user_agent() -> str:
    return (f"ollama-python/{metadata.version('ollama')} ({platform.machine()} {platform.system().lower()}) "
            f"Python/{platform.python_version()}")


def official_headers() -> dict[str, str]:
    """The headers the official client sends with every request (``ollama._client.BaseClient``)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json",
               "User-Agent": _user_agent()}
    api_key = os.getenv("OLLAMA_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def chat_body(model: str, prompt: str, options: dict[str, Any], think: bool | None) -> bytes:
    """The JSON the official client's ``chat`` sends for one user message (keys in its order)."""
    body: dict[str, Any] = {"model": model, "stream": False, "options": options,
                            "messages": [{"role": "user", "content": prompt}], "tools": []}
    if think is not None:
        body["think"] = think
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class _Connection(asyncio.Protocol):
    """One keep-alive connection: buffers what arrives and wakes the one request waiting on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def more(self, timeout: float | None) -> None:
        """Wait until more data arrives or the connection closes; ``httpx.ReadTimeout`` after
        ``timeout`` seconds of silence."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _unread(transport: asyncio.Transport) -> bytes | None:
    """A peek at what the socket holds that the event loop has not delivered yet: b"" for nothing, None
    for the server's close (or a socket that cannot be read), else the first bytes waiting."""
    import select
    import socket

    sock = transport.get_extra_info("socket")
    if sock is None:
        return b""
    try:
        if not select.select([sock.fileno()], [], [], 0)[0]:
            return b""
        # A duplicate of the descriptor: peeking leaves the bytes where the loop will read them.
        with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
            return dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) or None
    except (OSError, ValueError):
        return None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        import httpx

        waiter.set_exception(httpx.ReadTimeout("timed out"))


class LeanOllamaHttp:
    """Pooled keep-alive connections to one ``http://host:port[/prefix]``; posts JSON and returns
    ``(status, body bytes)``. One instance belongs to one event loop."""

    def __init__(self, base_url: str, *, connect_timeout: float | None, read_timeout: float | None) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the lean client speaks plain http only, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.base_url = base_url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_body = MAX_REPLY_BYTES
        authority = f"[{self.host}]" if ":" in self.host else self.host
        self._head = "".join(f"{k}: {v}\r\n" for k, v in official_headers().items())
        self._host_header = f"Host: {authority}:{self.port}\r\n" if parts.port else f"Host: {authority}\r\n"
        self._idle: list[_Connection] = []
        # Bytes a connection received that no request of ours asked for (a second reply, junk after one):
        # HTTP/1.1 cannot tell whose they are, so such a connection is closed, never reused, and once a
        # server has done it every later request gets a connection of its own.
        self.unsolicited = 0

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``POST prefix+path``; raises like the official client for transport trouble."""
        status, payload, _ = await self.post_reply(path, body)
        return status, payload

    async def post_reply(self, path: str, body: bytes) -> tuple[int, bytes, str | None]:
        """As :meth:`post`, with the reply's ``Retry-After`` header (None when it has none)."""
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n{self._host_header}{self._head}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
        return await self._exchange(request, "POST", path)

    async def get(self, path: str) -> tuple[int, bytes]:
        """``GET prefix+path``, as :meth:`post`."""
        status, payload, _ = await self._exchange(
            f"GET {self.prefix}{path} HTTP/1.1\r\n{self._host_header}{self._head}\r\n".encode("latin-1"),
            "GET", path)
        return status, payload

    async def _exchange(self, request: bytes, method: str, path: str) -> tuple[int, bytes, str | None]:
        conn = await self._acquire()
        try:
            assert conn.transport is not None
            conn.transport.write(request)
            status, payload, keep, retry_after = await self._response(conn, method, path)
        except BaseException:
            conn.close()  # a cancelled or failed exchange leaves the connection in an unknown state
            raise
        if conn.buffer:  # more than the reply: not ours, and the next reply on it could be anyone's
            self._distrust(conn)
        elif keep and not conn.closed and not self.unsolicited:
            self._idle.append(conn)
        else:
            conn.close()
        return status, payload, retry_after

    def _distrust(self, conn: _Connection) -> None:
        self.unsolicited += 1
        conn.close()
        idle, self._idle = self._idle, []
        for other in idle:
            other.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def _acquire(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.closed or conn.transport is None or conn.transport.is_closing():
                continue
            waiting = b"" if conn.buffer else _unread(conn.transport)
            if conn.buffer or waiting:  # data while no request was out: a reply nobody asked for
                self._distrust(conn)
            elif waiting is None:  # the server closed it while it was idle, as servers may
                conn.close()
            else:
                return conn
        loop = asyncio.get_running_loop()
        try:
            connect = loop.create_connection(_Connection, self.host, self.port)
            _, conn = await (connect if self.connect_timeout is None
                             else asyncio.wait_for(connect, self.connect_timeout))
        except asyncio.TimeoutError:
            import httpx

            raise httpx.ConnectTimeout("timed out") from None
        except OSError:
            raise ConnectionError(CONNECTION_ERROR_MESSAGE) from None
        return conn

    async def _response(self, conn: _Connection, method: str,
                        path: str) -> tuple[int, bytes, bool, str | None]:
        """(status, body, keep-alive, Retry-After) of the reply on ``conn`` to ``method path``."""
        while (end := conn.buffer.find(_HEADER_END)) < 0:
            if len(conn.buffer) > self.max_body:  # headers without an end
                raise ReplyTooLarge
            await self._more(conn, bool(conn.buffer))
        head = bytes(conn.buffer[:end]).decode("latin-1").split("\r\n")
        del conn.buffer[:end + len(_HEADER_END)]
        status = self._status(head[0])
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        retry_after = headers.get("retry-after")
        if 300 <= status < 400:
            raise Redirected(method, self.base_url + path, status, headers.get("location", ""))
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._chunked(conn)
        elif "content-length" in headers:
            size = self._number(headers["content-length"], 10, "Content-Length")
            if size > self.max_body:
                raise ReplyTooLarge(size)
            body = await self._exactly(conn, size)
        else:  # the body runs until the server closes the connection
            while not conn.closed:
                if len(conn.buffer) > self.max_body:
                    raise ReplyTooLarge
                await conn.more(self.read_timeout)
            body = bytes(conn.buffer)
            return status, self._decoded(body, headers.get("content-encoding", "")), False, retry_after
        keep = headers.get("connection", "").lower() != "close"
        return status, self._decoded(body, headers.get("content-encoding", "")), keep, retry_after

    def _decoded(self, body: bytes, encoding: str) -> bytes:
        """The body as sent before a ``Content-Encoding`` a proxy may add although the request asked for
        none: gzip and deflate are decoded (never past ``max_body``: a small body can expand a thousandfold),
        any other is one sentence naming it — not "not JSON (b'\\x1f\\x8b…')"."""
        name = encoding.strip().lower()
        if name in ("", "identity"):
            return body
        if name not in ("gzip", "x-gzip", "deflate"):
            raise MalformedReply(f"{self.host}:{self.port} sent a reply compressed with {encoding[:40]!r}, "
                                 "which this client does not read (it asked for no compression)")
        import zlib

        for wbits in ((16 + zlib.MAX_WBITS,) if name != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)):
            inflater = zlib.decompressobj(wbits)
            try:
                plain = inflater.decompress(body, self.max_body + 1)
            except zlib.error:
                continue
            if len(plain) > self.max_body or inflater.unconsumed_tail:
                raise ReplyTooLarge
            return plain
        raise MalformedReply(f"{self.host}:{self.port} sent a {name} reply that does not decompress")

    def _status(self, line: str) -> int:
        parts = line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise MalformedReply(f"{self.host}:{self.port} did not answer in HTTP (its first line: "
                                 f"{line[:80]!r})")
        return int(parts[1])

    def _number(self, text: str, base: int, what: str) -> int:
        try:
            value = int(text.strip(), base)
        except ValueError:
            value = -1
        if value < 0:
            raise MalformedReply(f"{self.host}:{self.port} sent a reply with a broken {what} ({text[:40]!r})")
        return value

    async def _more(self, conn: _Connection, started: bool) -> None:
        if conn.closed:
            import httpx

            if conn.error is not None:
                raise httpx.ReadError(str(conn.error) or type(conn.error).__name__)
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body"
                                            if started else "Server disconnected without sending a response.")
        await conn.more(self.read_timeout)

    async def _exactly(self, conn: _Connection, size: int) -> bytes:
        while len(conn.buffer) < size:
            await self._more(conn, True)
        body = bytes(conn.buffer[:size])
        del conn.buffer[:size]
        return body

    async def _chunked(self, conn: _Connection) -> bytes:
        body = bytearray()
        while True:
            while (end := conn.buffer.find(b"\r\n")) < 0:
                await self._more(conn, True)
            line = bytes(conn.buffer[:end]).split(b";", 1)[0].decode("latin-1")
            size = self._number(line, 16, "chunk size")
            if len(body) + size > self.max_body:
                raise ReplyTooLarge
            del conn.buffer[:end + 2]
            if size == 0:
                await self._trailers(conn)
                return bytes(body)
            chunk = await self._exactly(conn, size + 2)  # the chunk and its CRLF
            body += chunk[:-2]

    async def _trailers(self, conn: _Connection) -> None:
        """Consume the trailer section after the last chunk, up to its empty line: left on the connection,
        it was read as the next request's status line."""
        read = 0
        while True:
            while (end := conn.buffer.find(b"\r\n")) < 0:
                if len(conn.buffer) > self.max_body:
                    raise ReplyTooLarge
                await self._more(conn, True)
            del conn.buffer[:end + 2]
            read += end + 2
            if end == 0:
                return
            if read > self.max_body:
                raise ReplyTooLarge


# The fields of a chat reply and their plain JSON types: a reply made only of these is read directly.
_REPLY_FIELDS: dict[str, type] = {"model": str, "created_at": str, "done": bool, "done_reason": str,
                                  "total_duration": int, "load_duration": int, "prompt_eval_count": int,
                                  "prompt_eval_duration": int, "eval_count": int, "eval_duration": int}
_MESSAGE_FIELDS: dict[str, type] = {"role": str, "content": str, "thinking": str}
_COUNT_FIELDS = ("prompt_eval_count", "eval_count")


def _plain(obj: Any, fields: dict[str, type]) -> bool:
    """Every key known and of its exact type (or null): what pydantic would accept unchanged."""
    return isinstance(obj, dict) and all(
        key in fields and (value is None or type(value) is fields[key]) for key, value in obj.items())


def parse_chat_reply(status: int, payload: bytes, retry_after: str | None = None
                     ) -> tuple[Any, Any, Any, str | None, bool, Any]:
    """(content, prompt tokens, completion tokens, done reason, whether it holds reasoning, the model the
    reply names) of a chat reply, or the official client's
    error (carrying the reply's ``Retry-After`` as ``retry_after``, for the retry policy).

    The common shape is read directly; anything else goes through ``ollama.ChatResponse``, so a hostile
    or unusual reply fails (or passes) exactly as it does through the official client — except the content
    and the two token counts, which are handed on as they came, for the one check every backend's replies
    pass (``RemoteExplainer.checked``): a count that is no count is unknown, not the end of the reply.
    """
    if not 200 <= status < 300:
        import ollama

        error = ollama.ResponseError(payload.decode("utf-8", errors="replace"), status)
        error.retry_after = retry_after  # type: ignore[attr-defined]
        raise error
    try:
        data = json.loads(payload)
    except ValueError:
        raise MalformedReply(f"the server's chat reply is not JSON ({payload[:60]!r})") from None
    if isinstance(data, dict):
        if data.get("message") is None and data.get("error") is not None:  # an error sent with status 200
            raise MalformedReply(f"the server answered with an error: {str(data['error'])[:300]}")
        counts = {key: data.pop(key) for key in _COUNT_FIELDS if key in data}
        message = data.get("message")
        content = message.pop("content", None) if isinstance(message, dict) else None
        rest = {k: v for k, v in data.items() if k != "message"}
        found = (content, counts.get("prompt_eval_count"), counts.get("eval_count"))
        if (isinstance(message, dict) and _plain(rest, _REPLY_FIELDS) and _plain(message, _MESSAGE_FIELDS)
                and isinstance(message.get("role"), str)):
            return (*found, data.get("done_reason"), bool(message.get("thinking")), data.get("model"))
    import ollama

    if not isinstance(data, dict):
        raise MalformedReply(f"the server's chat reply is a JSON {type(data).__name__}, not an object")
    try:
        response = ollama.ChatResponse(**data)
    except Exception as exc:  # pydantic's ValidationError: many lines about the fields
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MalformedReply(f"the server's chat reply is not one Ollama sends ({first})") from None
    return (*found, response.done_reason, bool(response.message.thinking), response.model)


# ------------------------------------------------------------------------------------------ preflight
class NotPlain(Exception):
    """A preflight reply the lean path does not read itself: the official client takes over."""


_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?"
                        r"(?:Z|([+-])(\d{2}):(\d{2}))")


def _timestamp(value: Any) -> bool:
    """An RFC 3339 time with valid fields (what Ollama sends, and pydantic's ``datetime`` accepts)."""
    match = _TIMESTAMP.fullmatch(value) if type(value) is str else None
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    try:
        _dt.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return match.group(7) is None or (int(match.group(8)) < 24 and int(match.group(9)) < 60)


def _is(kind: type) -> Callable[[Any], bool]:
    return lambda value: type(value) is kind


def _str_list(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


# The fields the official response models read, each with the check that its JSON value is one they
# accept unchanged (None is always accepted: every field is optional).
_DETAILS: dict[str, Callable[[Any], bool]] = {
    "parent_model": _is(str), "format": _is(str), "family": _is(str), "families": _str_list,
    "parameter_size": _is(str), "quantization_level": _is(str)}
_TAG: dict[str, Callable[[Any], bool]] = {
    "model": _is(str), "modified_at": _timestamp, "digest": _is(str),
    "size": lambda v: type(v) is int and v >= 0, "details": _is(dict)}
_SHOW: dict[str, Callable[[Any], bool]] = {
    "modified_at": _timestamp, "template": _is(str), "modelfile": _is(str), "license": _is(str),
    "details": _is(dict), "model_info": _is(dict), "parameters": _is(str), "capabilities": _str_list}


def _object(status: int, payload: bytes) -> dict[str, Any]:
    if not 200 <= status < 300:
        raise NotPlain(f"HTTP {status}")
    try:
        data = json.loads(payload)
    except ValueError:
        raise NotPlain("not JSON") from None
    if not isinstance(data, dict):
        raise NotPlain("not a JSON object")
    return data


def _checked(obj: Any, fields: dict[str, Callable[[Any], bool]]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise NotPlain("not a JSON object")
    for name, ok in fields.items():
        value = obj.get(name)
        if value is not None and not ok(value):
            raise NotPlain(f"{name}: {value!r}")
    details = obj.get("details")
    if "details" in fields and details is not None:
        _checked(details, _DETAILS)
    return obj


def plain_version(status: int, payload: bytes) -> str | None:
    """The server's version from ``GET /api/version`` (None for a 404: very old servers)."""
    if status == 404:
        return None
    version = _object(status, payload).get("version")
    return str(version) if version is not None else None


def plain_tags(status: int, payload: bytes) -> list[dict[str, Any]]:
    """The model entries of ``GET /api/tags`` as ``ollama.ListResponse`` reads them."""
    models = _object(status, payload).get("models")
    if type(models) is not list:
        raise NotPlain("models is not a list")
    return [_checked(entry, _TAG) for entry in models]


def plain_show(status: int, payload: bytes) -> dict[str, Any]:
    """The reply of ``POST /api/show`` as ``ollama.ShowResponse`` reads it (``model_info`` is required)."""
    data = _checked(_object(status, payload), _SHOW)
    if "model_info" not in data:
        raise NotPlain("no model_info")
    return data


def show_body(model: str) -> bytes:
    """What the official client's ``show`` sends."""
    return json.dumps({"model": model}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
