"""A compression bomb on every backend, many at once (issue 60): the fake server answers each chat request
with a gzip body of about 1 MiB that inflates to 1 GiB of spaces, ``--in-flight`` requests at a time, and
the client must refuse each by what it inflates to (the 8 MiB reply bound, ``explainers/transport.py``),
never holding the inflated bytes. The Ollama backend and the OpenAI-compatible one (the judge asks through
the same two; the embedding client and the official ``ollama`` client use the same transport,
``remote.http_options``). Prints the body's size, what it inflates to, the calls refused and the process's
peak memory (server and client together) against the 200 MB target.

    .venv/bin/python benchmarks/bench_bombs.py [--in-flight 16] [--inflated-mib 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time

from pytest_robustexplain.data import Interaction, Item, UserHistory
from pytest_robustexplain.explainers.ollama import OllamaExplainer
from pytest_robustexplain.explainers.openai_compat import OpenAICompatExplainer
from pytest_robustexplain.explainers.retry import RetryPolicy
from pytest_robustexplain.testing import FakeOllamaServer
from pytest_robustexplain.testing.handler import bomb_body

TARGET_MB = 200
HISTORY = UserHistory("u1", (Interaction("i1", "Dune", 0, 5.0, "Books"),))
ITEM = Item("i2", "Hyperion", "Books")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _no_sleep(_: float) -> None:
    return None


async def bombed(backend: str, url: str, in_flight: int, server: FakeOllamaServer, inflated: int
                 ) -> tuple[int, int, str]:
    """(refused, calls, one refusal's detail): ``in_flight`` explanations at once, every reply a bomb."""
    retry = RetryPolicy(max_attempts=1, sleep=_no_sleep)
    explainer = (OllamaExplainer("fake-model", host=url, retry=retry, concurrency=in_flight)
                 if backend == "ollama" else
                 OpenAICompatExplainer("fake-model:latest", base_url=url + "/v1", retry=retry,
                                       concurrency=in_flight))
    try:
        await explainer.explain(HISTORY, ITEM, seed=0, repeat=0)  # preflight and warm-up, unbombed
        server.bomb_next(in_flight, inflated=inflated)
        replies = await asyncio.gather(*(explainer.explain(HISTORY, ITEM, seed=s, repeat=0)
                                         for s in range(1, in_flight + 1)))
    finally:
        await explainer.aclose()
    refused = [r for r in replies if not r.ok and "longer than 8 MiB" in (r.detail or "")]
    return len(refused), len(replies), (refused[0].detail if refused else replies[0].detail or "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--inflated-mib", type=int, default=1024)
    args = parser.parse_args()
    inflated = args.inflated_mib << 20
    started = time.perf_counter()
    body = len(bomb_body(inflated))  # built once, a mebibyte at a time, before anything is measured
    print(f"bomb: {body / 2**20:.2f} MiB of gzip inflating to {inflated / 2**30:.2f} GiB "
          f"(built in {time.perf_counter() - started:.1f} s); {args.in_flight} requests in flight a backend")
    print(f"peak memory before the requests: {peak_mb():.0f} MB")
    ok = True
    with FakeOllamaServer() as server:
        for backend in ("ollama", "openai"):
            started = time.perf_counter()
            run = bombed(backend, server.url, args.in_flight, server, inflated)
            refused, calls, detail = asyncio.run(run)
            wall = time.perf_counter() - started
            peak = peak_mb()
            good = refused == calls and peak <= TARGET_MB
            ok &= good
            print(f"{backend:7} refused {refused} of {calls} in {wall:.1f} s · peak memory {peak:.0f} MB "
                  f"(target ≤ {TARGET_MB} MB) {'OK' if good else 'MISSED'}")
            print(f"        {detail[:150]}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
