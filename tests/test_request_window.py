"""The request window (issue 41, item 8): requests in flight back off when the server says it limits the
rate, and grow back slowly — a gateway that allows fewer requests at once than ``concurrency`` is paced, not
failed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.explainers.window import AdaptiveWindow
from pytest_robustexplain.testing import FakeOllamaServer


def test_a_refusal_halves_the_window_once_a_round_and_answers_grow_it_back() -> None:
    window = AdaptiveWindow(4)

    async def main() -> None:
        rounds = [await window.acquire() for _ in range(4)]
        assert window.in_flight == 4 and set(rounds) == {0}
        window.limited(rounds[0])
        window.limited(rounds[1])  # the same burst: sent before the cut, so no second cut
        assert (window.limit, window.cuts, window.smallest) == (2, 1, 2)
        for _ in range(4):
            window.release()
        for _ in range(7):
            window.answered()
        assert window.limit == 2  # eight answers (four times the window) before it grows
        window.answered()
        assert window.limit == 3
        window.limited(await window.acquire())  # sent since the cut: it says the window is too large
        assert (window.limit, window.cuts, window.smallest) == (1, 2, 1)

    asyncio.run(main())


def test_requests_wait_their_turn_and_a_cancelled_waiter_hands_its_place_on() -> None:
    window = AdaptiveWindow(1)
    order: list[str] = []

    async def request(name: str) -> None:
        await window.acquire()
        order.append(name)

    async def main() -> None:
        await window.acquire()  # the window is full
        first = asyncio.ensure_future(request("first"))
        cancelled = asyncio.ensure_future(request("cancelled"))
        last = asyncio.ensure_future(request("last"))
        await asyncio.sleep(0)
        cancelled.cancel()
        window.release()  # the first waiter's turn
        await first
        window.release()
        await last  # the cancelled waiter's place went to the next one
        assert order == ["first", "last"] and window.in_flight == 1

    asyncio.run(main())


def test_a_window_holds_at_least_one_request() -> None:
    with pytest.raises(ValueError, match="at least one"):
        AdaptiveWindow(0)


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_server_that_allows_fewer_requests_at_once_paces_the_run_and_fails_no_call(
        backend: str, tmp_path: Path) -> None:
    """Four calls at a time against a server that refuses a third at once (429, no Retry-After), two retries
    a call: before, every round sent four and two were refused — 13–16 refusals and 1–2 failed calls in 60;
    the window halves at the first refusal and probes back slowly, so 5–6 are refused and none fails."""
    with FakeOllamaServer(latency=0.05) as server:
        server.limit_concurrency(2)
        host = server.url + ("/v1" if backend == "openai" else "")
        with pytest.warns(RobustExplainWarning) as said:
            code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host,
                             "--users", "10", "--perturbations", "noise", "--severities", "1,2,3,4,5",
                             "--guard", "off", "--retries", "2", "--concurrency", "4", "--cache", "off",
                             "--progress", "off", "-q", "--json", str(tmp_path / "r.json")])
        refused = server.rate_limited
    backed_off = [str(w.message) for w in said if "refuses requests for its rate" in str(w.message)]
    assert len(backed_off) == 1 and "requests in flight cut from 4 to 2" in backed_off[0]  # said once
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert code in (cli.EXIT_OK, cli.EXIT_GATE_FAILED)
    assert doc["calls"]["failed"] == 0 and all(p["failure"] is None for p in doc["pairs"])
    calls = doc["calls"]["made"]
    # The first burst is refused, then a probe now and then.
    assert 1 <= refused <= calls // 8, (refused, calls)
