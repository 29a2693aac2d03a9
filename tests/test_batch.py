"""``batch``: a gate's calls through the provider's batch API (the fake server's ``/v1/files`` and
``/v1/batches``) give the verdicts of the same gate through live calls; partial failures, expiry and a batch
still pending at the deadline are said in one line, and the same command run again picks up where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import marked, read_report

from pytest_robustexplain.cli.entry import main
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

# What a batch changes in a report: the calls' clock, the price (the batch's) and what it comes to; and
# which calls this run made rather than found in the cache (a resumed batch's run made only the rest).
VOLATILE = {"started_at", "finished_at", "timings", "latency_s", "original_latency_s", "time", "money",
            "json", "calls", "cached_original", "cached_perturbed", "cached_pairs"}

# Settings a batch run sets differently (and the history its written cache keeps, with its trend).
WHERE = ("batch", "price", "sources", "json", "cache", "history_trend")

@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(mode="fragile") as fake:
        yield fake


def _stable(value: Any) -> Any:
    if isinstance(value, dict) and "schema" in value:
        settings = {k: v for k, v in value["settings"].items() if k not in WHERE}
        value = {**value, "settings": settings}
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _run(server: FakeOllamaServer, tmp: Path, name: str, *args: str) -> int:
    return main(["run", "--backend", "openai", "--host", f"{server.url}/v1", "--model", "fake-model:latest",
                 "--users", "6", "--severities", "1,3", "--perturbations", "noise,shuffle", "-q",
                 "--cache-dir", str(tmp / "cache"), "--json", str(tmp / name), *args])


def _said(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "batch" in line]


@pytest.mark.parametrize("mode", ["stable", "fragile"])
def test_a_gate_through_a_batch_has_the_verdicts_of_the_live_calls(server: FakeOllamaServer, tmp_path: Path,
                                                                   mode: str) -> None:
    server.mode = mode
    live = _run(server, tmp_path, "live.json", "--cache", "off")
    batched = _run(server, tmp_path, "batch.json", "--batch", "--price", "0.2/0.8")
    one, two = read_report(tmp_path / "live.json"), read_report(tmp_path / "batch.json")
    assert (live, batched) == ((0, 0) if mode == "stable" else (1, 1))
    assert _stable(one) == _stable(two)
    made = one["calls"]["made"]
    assert server.batches.submitted == 1 and server.batches.lines_answered == made
    # Made (by the batch), not cache hits, and priced at the batch price: half of what was given.
    assert two["calls"]["made"] == made and two["calls"]["cached"] == 0
    assert two["settings"]["price"]["fake-model:latest"] == [0.1, 0.4]
    again = _run(server, tmp_path, "again.json", "--batch")
    assert again == live and server.batches.submitted == 1  # all in the cache: no batch, no call
    assert read_report(tmp_path / "again.json")["calls"]["cached"] == made


def test_failed_lines_are_said_in_one_line_and_sent_again_by_the_next_run(
        server: FakeOllamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.batches.fail = 3
    assert _run(server, tmp_path, "b.json", "--batch") == 3
    said = _said(capsys)[-1]
    assert "batch batch_0001 ended with 3 of its" in said and "(first: the fake failed this line)" in said
    assert "run the same command again to send the 3 in a new batch" in said
    server.batches.fail = 0
    _run(server, tmp_path, "live.json", "--cache", "off")
    assert _run(server, tmp_path, "b.json", "--batch") == 1  # fragile: the verdict, now measured
    assert server.batches.submitted == 2 and server.batches.view("batch_0002")["request_counts"]["total"] == 3
    assert _stable(read_report(tmp_path / "live.json")) == _stable(read_report(tmp_path / "b.json"))


def test_a_line_the_provider_refused_is_a_failed_call_as_live_never_called_again(
        server: FakeOllamaServer, tmp_path: Path) -> None:
    server.fail_next(2, status=400)  # the first two lines the batch answers (a user's original): refused
    assert _run(server, tmp_path, "b.json", "--batch") == 1
    report = read_report(tmp_path / "b.json")
    failures = [p["failure_detail"] for p in report["pairs"] if p["failure"] == "error"]
    assert failures and all("batch: HTTP 400" in d for d in failures)
    total = server.batches.view("batch_0001")["request_counts"]["total"]
    assert server.chat_calls == total == report["calls"]["made"]  # the batch's lines only: no live call


def test_an_expired_batch_keeps_what_it_answered(server: FakeOllamaServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    server.batches.expire_after = 10
    assert _run(server, tmp_path, "b.json", "--batch") == 3
    said = _said(capsys)[-1]
    total = server.batches.view("batch_0001")["request_counts"]["total"]
    expired = "expired (the provider's completion window ran out)"
    assert f"{expired} with {total - 10} of its {total} calls" in said
    server.batches.expire_after = None
    assert _run(server, tmp_path, "b.json", "--batch") == 1
    assert server.batches.view("batch_0002")["request_counts"]["total"] == total - 10


def test_a_batch_pending_at_the_deadline_is_picked_up_by_the_next_run(
        server: FakeOllamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.batches.hold = 10_000  # it cannot end before the run's max-minutes, whatever the machine's speed
    assert _run(server, tmp_path, "b.json", "--batch", "--max-minutes", "0.01") == 3
    said = _said(capsys)[-1]
    assert "batch batch_0001 is still in_progress" in said
    assert "run the same command again to pick it up" in said
    server.batches.hold = 1
    assert _run(server, tmp_path, "b.json", "--batch") == 1
    assert server.batches.submitted == 1  # the same batch, looked at again: nothing sent twice
    assert any("batch batch_0001: picked up where the last run left it" in line for line in _said(capsys))
    assert read_report(tmp_path / "b.json")["calls"]["made"] == server.batches.lines_answered


def test_the_pytest_door_sends_its_gates_as_one_batch(pytester: pytest.Pytester,
                                                      server: FakeOllamaServer) -> None:
    pytester.makepyfile(marked("users=5, severities=[2], perturbations=['noise', 'shuffle']"))
    args = ("--robustexplain-backend=openai", f"--robustexplain-host={server.url}/v1",
            "--robustexplain-model=fake-model:latest", "-p", "no:randomly")
    live = pytester.runpytest(*args, "--robustexplain-cache=off", "--robustexplain-json=live.json")
    batched = pytester.runpytest(*args, "--robustexplain-batch", "--robustexplain-json=batch.json")
    assert live.parseoutcomes() == batched.parseoutcomes()
    assert server.batches.submitted == 1  # every item's calls in one batch
    assert _stable(read_report(pytester, "live.json")) == _stable(read_report(pytester, "batch.json"))
    server.batches.fail = 2  # a new plan's batch, two of whose lines fail: one line, before any item runs
    failed = pytester.runpytest(*args, "--robustexplain-batch", "--robustexplain-seed=7")
    assert failed.ret == pytest.ExitCode.USAGE_ERROR
    assert "calls unanswered (first: the fake failed this line)" in failed.stderr.str()


@pytest.mark.parametrize(("args", "said"), [
    (("--backend", "ollama"), "provider batches are the OpenAI-compatible API's"),
    (("--backend", "openai", "--cache", "off"), "which cache=off does not write"),
])
def test_a_batch_the_run_cannot_send_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      args: tuple[str, ...], said: str) -> None:
    code = main(["run", "--model", "m", "--batch", "--json", str(tmp_path / "r.json"), *args])
    assert code == 2 and said in capsys.readouterr().err
