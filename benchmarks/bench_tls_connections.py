"""What a connection per request costs over https: the backends' httpx clients open a connection for every
request (``explainers/remote.py`` ``http_options``; a pooled one may hand a reply the server sent unasked to
the next request as its own), so over https each request pays a TLS handshake. Against the fake server on
loopback with the tests' certificate: 200 sequential chat requests pooled and with a connection each, the
wall time and the process's CPU (client and in-process server together) a request, and the ratio.

A network adds one or two round trips to each handshake (TCP, then TLS 1.3's one); a model call takes
seconds, so the cost is a few percent of a call at most.

    .venv/bin/python benchmarks/bench_tls_connections.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import httpx

from pytest_robustexplain.testing import FakeOllamaServer

TLS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tls"


async def _per_request(url: str, *, pooled: bool, requests: int) -> tuple[float, float]:
    """(wall ms, CPU ms) a request over ``requests`` sequential chat requests."""
    limits = httpx.Limits() if pooled else httpx.Limits(max_keepalive_connections=0)
    body = {"model": "fake-model:latest", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(limits=limits) as client:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(requests):
            (await client.post(url + "/v1/chat/completions", json=body)).raise_for_status()
        return ((time.perf_counter() - wall) * 1000 / requests, (time.process_time() - cpu) * 1000 / requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    os.environ["SSL_CERT_FILE"] = str(TLS / "cert.pem")
    with FakeOllamaServer(tls=(TLS / "cert.pem", TLS / "key.pem")) as server:
        asyncio.run(_per_request(server.url, pooled=True, requests=20))  # warm: imports, first handshake
        pooled = asyncio.run(_per_request(server.url, pooled=True, requests=args.requests))
        each = asyncio.run(_per_request(server.url, pooled=False, requests=args.requests))
    print(f"{'https, loopback':<28}{'wall ms/request':>16}{'CPU ms/request':>16}")
    print(f"{'pooled connection':<28}{pooled[0]:>16.2f}{pooled[1]:>16.2f}")
    print(f"{'a connection each':<28}{each[0]:>16.2f}{each[1]:>16.2f}")
    print(f"{'ratio':<28}{each[0] / pooled[0]:>16.1f}{each[1] / pooled[1]:>16.1f}")
    print(f"handshake ≈ {each[0] - pooled[0]:.1f} ms a request here; a 2 s model call: "
          f"{(each[0] - pooled[0]) / 2000:.1%} more")


if __name__ == "__main__":
    main()
