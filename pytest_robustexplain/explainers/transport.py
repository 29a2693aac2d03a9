"""The one HTTP stack's transport: every client a backend builds (the official ``ollama`` client, the
OpenAI-compatible, judge and embedding clients, all httpx) reads its replies through it, bounded.

httpx decodes a compressed body a whole network chunk at a time, so a 1 MiB gzip body of zeros took 730 MB
at 4 requests in flight before any size check saw it. Here the reply is decoded as it streams with
``zlib``'s ``max_length``, and refused past :data:`~.reply.MAX_REPLY_BYTES` of *decoded* bytes; the client
asks only for what this decodes (gzip, deflate), and a body in any other encoding is one sentence naming
it. The response handed on is plain (no ``Content-Encoding``), so httpx decodes nothing again.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from .reply import MAX_REPLY_BYTES, MalformedReply, ReplyTooLarge

ACCEPTED = "gzip, deflate"


class BoundedTransport(httpx.AsyncBaseTransport):
    """``inner``'s responses, decoded and bounded as they stream."""

    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int = MAX_REPLY_BYTES) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = ACCEPTED
        response = await self.inner.handle_async_request(request)
        announced = response.headers.get("content-length", "")
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding in ("", "identity") and announced.isdigit() and int(announced) > self.limit:
            await response.aclose()
            raise ReplyTooLarge(int(announced))
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            await response.aclose()
            where = f"{request.url.host}:{request.url.port or ''}".rstrip(":")
            raise MalformedReply(f"{where} sent a reply compressed with {encoding[:40]!r}, which this client "
                                 f"does not read (it asked for {ACCEPTED})")
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length")]
        stream = _Decoded(response, "" if encoding == "identity" else encoding, self.limit)
        return httpx.Response(response.status_code, headers=headers, stream=stream,
                              extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Decoded(httpx.AsyncByteStream):
    """A response's body as sent before its encoding, never past ``limit`` decoded bytes."""

    def __init__(self, response: httpx.Response, encoding: str, limit: int) -> None:
        self.response, self.encoding, self.limit = response, encoding, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        inflater = None
        left = self.limit
        async for raw in self.response.aiter_raw():
            if self.encoding and inflater is None:
                inflater = inflater_for(self.encoding, raw)
            pieces = [raw] if inflater is None else _inflate(inflater, raw, left + 1)
            for piece in pieces:
                left -= len(piece)
                if left < 0:
                    raise ReplyTooLarge
                yield piece

    async def aclose(self) -> None:
        await self.response.aclose()


def inflater_for(encoding: str, first: bytes) -> Any:
    """The decoder of a body whose first bytes are ``first``: wbits 32 + MAX_WBITS reads a gzip or a zlib
    header (a "deflate" body is zlib-wrapped, as HTTP says); a deflate body some servers send without the
    header is read raw."""
    if encoding == "deflate":
        try:
            zlib.decompressobj(32 + zlib.MAX_WBITS).decompress(first[:64], 1)
        except zlib.error:
            return zlib.decompressobj(-zlib.MAX_WBITS)
    return zlib.decompressobj(32 + zlib.MAX_WBITS)


def _inflate(inflater: Any, data: bytes, most: int) -> list[bytes]:
    """``data`` decoded, at most ``most`` bytes of it (what lies past that is never inflated)."""
    try:
        out = [inflater.decompress(data, most)]
        while inflater.unconsumed_tail and sum(map(len, out)) < most:
            out.append(inflater.decompress(inflater.unconsumed_tail, most - sum(map(len, out))))
    except zlib.error:
        raise MalformedReply("the server sent a compressed reply that does not decompress") from None
    return out
