"""How close bounded concurrency gets to the ideal wall time, against the fake Ollama server.

Setup: the fake server takes ``--latency`` seconds per chat request and processes at most
``--capacity`` at once (like ``OLLAMA_NUM_PARALLEL``); :class:`OllamaExplainer` runs with
``--concurrency`` requests in flight. N calls then ideally take ``N * latency / capacity`` seconds.

Prints the wall time of N concurrent calls, the ideal, their ratio (target ≤ 1.15), the per-call time of
a strictly sequential loop over a small sample, and the speed-up of the concurrent run over that loop
extrapolated to N calls (target ≥ 3.5×). Preflight and warm-up are excluded from every timing.

    .venv/bin/python benchmarks/bench_concurrency.py [--calls 200] [--latency 0.1] [--capacity 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pytest_robustexplain.data import Interaction, Item, UserHistory
from pytest_robustexplain.explainers.ollama import OllamaExplainer
from pytest_robustexplain.testing import FakeOllamaServer, compose_reply

ITEM = Item("E900", "Smart Watch", "Electronics", {"brand": "Acme", "price": 199})


def history(i: int) -> UserHistory:
    cats = ("Electronics", "Books", "Home")
    return UserHistory(f"u{i}", tuple(
        Interaction(f"I{i}-{k}", cats[(i + k) % 3], 1_700_000_000 + k * 86_400, 3.0 + k % 3, f"Title {k}")
        for k in range(8 + i % 5)))


async def timed_calls(explainer: OllamaExplainer, n: int, *, sequential: bool) -> float:
    """Wall time of ``n`` explanations (after preflight and warm-up)."""
    await explainer.explain(history(-1), ITEM, seed=0, repeat=0)  # preflight + warm-up, untimed
    started = time.perf_counter()
    if sequential:
        for i in range(n):
            result = await explainer.explain(history(i), ITEM, seed=i, repeat=0)
            assert result.ok, result.detail
    else:
        results = await asyncio.gather(*(explainer.explain(history(i), ITEM, seed=i, repeat=0)
                                         for i in range(n)))
        assert all(r.ok for r in results), [r.detail for r in results if not r.ok][:3]
    elapsed = time.perf_counter() - started
    await explainer.aclose()
    return elapsed


async def client_cpu(explainer: OllamaExplainer, n: int) -> float:
    """CPU seconds of this thread (the event loop's; the fake server runs on other threads) per call."""
    await explainer.explain(history(-1), ITEM, seed=0, repeat=0)  # preflight + warm-up, untimed
    started = time.thread_time()
    for i in range(n):
        result = await explainer.explain(history(i), ITEM, seed=i, repeat=0)
        assert result.ok, result.detail
    elapsed = time.thread_time() - started
    await explainer.aclose()
    return elapsed / n


def print_client_cpu(n: int) -> None:
    """Client CPU per call at zero latency, through the one HTTP stack (httpx, a connection per request)."""
    with FakeOllamaServer(latency=0.0) as server:
        rounds = [asyncio.run(client_cpu(OllamaExplainer("fake-model", host=server.url), n))
                  for _ in range(3)]
    print(f"client CPU per call through OllamaExplainer (prompt, request, reply; median of 3 x {n} calls): "
          f"{1000 * statistics.median(rounds):.2f} ms")


def whole_run(latency: float, capacity: int) -> None:
    """The paper protocol as a pytest run against a server with ``latency`` and ``capacity`` slots.

    The server notes when each call's processing ends (its reply is composed as usual, just recorded);
    from the first call's start to the last call's end is the span the model was working, which ideally
    is ``calls × latency / capacity``: the ratio and the mean slot use say how well the sweep kept every
    slot busy (start-up, planning and reports are outside the span).
    """
    from bench_overhead import check, pytest_command, run_pytest, verdict, write_project

    ends: list[float] = []

    def reply(prompt: str, options: dict[str, object]) -> str:
        ends.append(time.monotonic())
        return compose_reply(prompt, options, mode=server.mode)

    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp, \
            FakeOllamaServer(latency=latency, capacity=capacity, reply=reply) as server:
        project = Path(tmp) / "paper"
        write_project(project, timing=False)
        run = run_pytest(pytest_command(server.url, "--robustexplain-guard=off"), project)
        check(run, f"paper protocol at latency {latency}")
    span = max(ends) - (min(ends) - latency)
    ideal = len(ends) * latency / capacity
    ratio = span / ideal
    print(f"whole pytest run, paper protocol (guard off), {len(ends)} calls at {latency:g} s, {capacity} "
          f"slots: {run.wall_s:.2f} s wall; the model busy from first call to last {span:.2f} s against "
          f"the ideal {ideal:.2f} s: ratio {ratio:.3f} (target <= 1.05) {verdict(ratio <= 1.05)}; "
          f"mean slot use {len(ends) * latency / span:.2f} of {capacity}")
    default_gate(latency, capacity)


def default_gate(latency: float, capacity: int, runs: int = 3) -> None:
    """The default gate (guard on: 541 calls) end to end against the budget 1.05 × ideal + 2.5 s — the
    slots kept busy and a fixed overhead (start-up, planning, the scorer's build, reports) of 2.5 s."""
    from bench_overhead import check, pytest_command, run_pytest, verdict, write_project

    walls, calls = [], 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp, \
                FakeOllamaServer(latency=latency, capacity=capacity) as server:
            project = Path(tmp) / "paper"
            write_project(project, timing=False)
            run = run_pytest(pytest_command(server.url), project)
            check(run, f"default gate at latency {latency}")
            walls.append(run.wall_s)
            calls = server.chat_calls
    budget = 1.05 * calls * latency / capacity + 2.5
    wall = statistics.median(walls)
    print(f"whole pytest run, default gate (guard on), {calls} calls at {latency:g} s, {capacity} slots: "
          f"median {wall:.2f} s wall of {runs} (ideal {calls * latency / capacity:.2f} s) against the budget "
          f"{budget:.2f} s (1.05 × ideal + 2.5 s): {verdict(wall <= budget)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sample", type=int, default=20, help="calls in the sequential loop")
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cpu-calls", type=int, default=300, help="calls per round of the client CPU timing")
    parser.add_argument("--whole-run", type=float, default=None, metavar="LATENCY",
                        help="instead: the paper protocol as a whole pytest run at this latency")
    args = parser.parse_args()
    if args.whole_run is not None:
        whole_run(args.whole_run, args.capacity)
        return
    print_client_cpu(args.cpu_calls)

    with FakeOllamaServer(latency=args.latency, capacity=args.capacity) as server:
        concurrent = OllamaExplainer("fake-model", host=server.url, concurrency=args.concurrency)
        server.reset_stats()
        wall = asyncio.run(timed_calls(concurrent, args.calls, sequential=False))
        peak = server.peak_in_flight
        sequential = OllamaExplainer("fake-model", host=server.url, concurrency=1)
        seq_wall = asyncio.run(timed_calls(sequential, args.sample, sequential=True))

    ideal = args.calls * args.latency / min(args.capacity, args.concurrency)
    per_call = seq_wall / args.sample
    extrapolated = per_call * args.calls
    ratio = wall / ideal
    speedup = extrapolated / wall
    print(f"fake server: latency {args.latency:.3f} s, capacity {args.capacity}; "
          f"explainer concurrency {args.concurrency}; peak in flight {peak}")
    print(f"concurrent: {args.calls} calls in {wall:.2f} s; ideal {ideal:.2f} s; "
          f"ratio {ratio:.3f} (target <= 1.15) {'OK' if ratio <= 1.15 else 'MISSED'}")
    print(f"sequential: {args.sample} calls in {seq_wall:.2f} s = {per_call * 1000:.1f} ms/call "
          f"(overhead {1000 * (per_call - args.latency):.1f} ms over the server latency); "
          f"{args.calls} calls ≈ {extrapolated:.1f} s")
    print(f"speed-up over sequential: {speedup:.2f}x (target >= 3.5x) {'OK' if speedup >= 3.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
