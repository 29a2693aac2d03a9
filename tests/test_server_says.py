"""What the server says about each reply is read and said. Replies cut at the token limit (Ollama
``done_reason``, OpenAI ``finish_reason``: "length") are kept in the cache, flagged on their pair, counted per
model and said in every writer; a gate with more than a small share of them is not measured (INCONCLUSIVE,
naming the fix), never scored as normal. Retried attempts are counted in the run's calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.engine.decide import with_cut_replies
from pytest_robustexplain.errors import DataError
from pytest_robustexplain.explainers.base import Explanation
from pytest_robustexplain.explainers.cache import ResponseCache, cache_key
from pytest_robustexplain.results import (
    FAIL,
    INCONCLUSIVE,
    MAX_CUT_SHARE,
    PASS,
    AttackResult,
    GateCheck,
    Interval,
    PairKey,
    PairResult,
    Verdict,
    pair_from_dict,
)
from pytest_robustexplain.testing import FakeOllamaServer

SMALL = ("--users", "5", "--perturbations", "noise,drift", "--severities", "1,5", "--progress", "off",
         "--guard", "warn", "--cache", "off")

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(models=("fake-model:latest",)) as fake:
        yield fake


def _pair(user: str, cut: tuple[str, ...] = ()) -> PairResult:
    return PairResult(PairKey("m", user, "i", "noise_injection", 1, 0), 0.9, 0.9, 0.9, 0.9, 0.9, "a", "b",
                      cut=cut)


def _verdict(outcome: str = PASS) -> Verdict:
    return Verdict(outcome, message="ρ 0.90 ≥ 0.5")


@pytest.mark.parametrize("outcome", [PASS, FAIL])
def test_more_than_the_small_share_of_cut_pairs_is_not_measured(outcome: str) -> None:
    n = 100
    tolerated = int(MAX_CUT_SHARE * n)
    at_limit = [_pair(f"u{i}", ("perturbed",) if i < tolerated else ()) for i in range(n)]
    assert with_cut_replies(_verdict(outcome), at_limit) == _verdict(outcome)  # within the share: as scored
    over = [_pair(f"u{i}", ("original", "perturbed") if i <= tolerated else ()) for i in range(n)]
    judged = with_cut_replies(_verdict(outcome), over)
    assert judged.outcome == INCONCLUSIVE  # a FAIL on unfinished text is no measurement either
    assert judged.message.startswith(f"Not measured: {tolerated + 1} of {n} pairs")
    assert "raise num-predict" in judged.message.lower() and "ρ 0.90 ≥ 0.5" in judged.message
    assert f"{2 * (tolerated + 1)} of {2 * n} replies" in judged.message


def test_a_pair_records_which_replies_were_cut_and_old_reports_read_as_none() -> None:
    pair = _pair("u1", ("original",))
    data = json.loads(json.dumps(pair.to_dict()))
    assert data["cut"] == ["original"] and pair_from_dict(data, source="t").cut == ("original",)
    whole = _pair("u1").to_dict()
    assert "cut" not in whole  # a report of whole replies is written as before
    assert pair_from_dict(whole, source="t").cut == ()
    with pytest.raises(DataError, match="cut"):
        pair_from_dict({**data, "cut": ["summary"]}, source="t")


def test_the_stop_reason_survives_the_response_cache(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path, "read-write")
    cut = Explanation(text="The user liked sci-fi and", model="m", stop_reason="length")
    key = cache_key({"x": 1})
    assert cut.cut and cache.put(key, {"x": 1}, cut)
    again = cache.get(key)
    assert again is not None and again.cut and again.cached
    # An entry written before the field existed reads as "not said", not as cut.
    entry = json.loads(cache.store.get("reply", key) or "")
    del entry["explanation"]["stop_reason"]
    cache.store.put("reply", key, json.dumps(entry))
    older = cache.get(key)
    assert older is not None and older.stop_reason is None and not older.cut


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_run_whose_replies_are_cut_is_said_everywhere_and_not_measured(
        server: FakeOllamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str) -> None:
    host = server.url if backend == "ollama" else server.url + "/v1"
    code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host, *SMALL,
                     "--num-predict", "6", "--json", "r.json", "--markdown", "r.md", "--html", "r.html"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_GATE_FAILED  # INCONCLUSIVE under inconclusive=fail, the default
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert {g["verdict"]["outcome"] for g in doc["gates"]} == {INCONCLUSIVE}
    assert all(g["verdict"]["message"].startswith("Not measured: ") for g in doc["gates"])
    assert all(p["cut"] == ["original", "perturbed"] for p in doc["pairs"])
    aggregate = doc["aggregates"]["fake-model:latest"]
    assert aggregate["cut_pairs"] == len(doc["pairs"]) and aggregate["cut_replies"] == 2 * len(doc["pairs"])
    assert doc["calls"]["cut at num_predict"] == doc["calls"]["made"]  # every reply made was cut
    for text in (out, *((tmp_path / name).read_text(encoding="utf-8") for name in ("r.md", "r.html"))):
        text = " ".join(text.replace("\\_", "_").split())  # as read: any wrapping, Markdown escapes
        assert "Replies cut at the token limit" in text and "cut at num_predict = 6" in text
        assert "raise num-predict" in text


def test_whole_replies_are_not_flagged(server: FakeOllamaServer, tmp_path: Path) -> None:
    assert cli.main(["run", "--model", "fake-model:latest", "--host", server.url, *SMALL,
                     "--json", "r.json", "--inconclusive", "warn"]) == cli.EXIT_OK
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert not any("cut" in p for p in doc["pairs"])
    assert doc["aggregates"]["fake-model:latest"]["cut_pairs"] == 0
    assert "cut at num_predict" not in doc["calls"]
    assert all(not g["verdict"]["message"].startswith("Not measured") for g in doc["gates"])


def test_the_cut_rule_keeps_the_checks_it_was_given() -> None:
    check = GateCheck("combined", 0.5, Interval(0.9, 0.8, 0.95, 3, 3), PASS)
    verdict = _verdict().with_detail("stability", (check,))
    over = [_pair(f"u{i}", ("perturbed",)) for i in range(3)]
    assert with_cut_replies(verdict, over).checks == (check,)  # the reports still show what was scored


def test_a_failure_the_attacks_found_stands_with_the_note() -> None:
    attack = AttackResult("prompt_injection", successes=3, n=3, low=0.3, high=1.0, limit=0.0, outcome=FAIL)
    failed = _verdict(FAIL).with_detail("attacks", (attack,))
    over = [_pair(f"u{i}", ("perturbed",)) for i in range(3)]
    judged = with_cut_replies(failed, over)
    assert judged.outcome == FAIL and "Also: 3 of 3 pairs" in judged.message  # a canary, cut or not
    assert with_cut_replies(_verdict(FAIL), over).outcome == INCONCLUSIVE  # a score-only FAIL is not


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_retried_attempts_are_counted_in_the_calls(server: FakeOllamaServer, tmp_path: Path,
                                                    backend: str) -> None:
    server.script(["ok", "fail", "fail"])  # the warm-up answers; the next two explanation requests get 503
    host = server.url if backend == "ollama" else server.url + "/v1"
    assert cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host, *SMALL,
                     "--json", "r.json", "--inconclusive", "warn", "-q"]) == cli.EXIT_OK
    calls = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["calls"]
    assert calls["retried"] == 2 and calls["failed"] == 0
    assert server.chat_calls == 1 + calls["made"] + 2  # the warm-up, the replies, the two refused attempts


def test_the_tokens_the_server_reported_are_what_the_run_cost(server: FakeOllamaServer,
                                                              tmp_path: Path) -> None:
    args = ["run", "--model", "fake-model:latest", "--host", server.url, *SMALL[:-2], "--cache", "read-write",
            "--inconclusive", "warn", "-q"]
    assert cli.main([*args, "--json", "cold.json"]) == cli.EXIT_OK
    cold = json.loads((tmp_path / "cold.json").read_text(encoding="utf-8"))["calls"]
    # The fake server reports prompt_eval_count / eval_count as Ollama does: every call made has some.
    assert cold["prompt tokens"] >= cold["made"] > 0 and cold["completion tokens"] >= cold["made"]
    assert cli.main([*args, "--json", "warm.json"]) == cli.EXIT_OK
    warm = json.loads((tmp_path / "warm.json").read_text(encoding="utf-8"))["calls"]
    assert warm["made"] == 0 and "prompt tokens" not in warm  # cache hits cost no tokens


def _cached_run(server: FakeOllamaServer) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """A small run into a cold response cache: its arguments, JSON report and the model's aggregate."""
    argv = ["run", "--model", "fake-model", "--host", server.url, *SMALL[:-2], "--cache", "read-write",
            "--json", "cold.json"]
    assert cli.main(argv) in (0, 1)
    cold = json.loads(Path("cold.json").read_text(encoding="utf-8"))
    (aggregate,) = cold["aggregates"].values()
    return argv, cold, aggregate


def test_tokens_are_counted_per_kind_and_per_history_line_and_kept_by_the_cache(
        server: FakeOllamaServer, capsys: pytest.CaptureFixture[str]) -> None:
    argv, cold, aggregate = _cached_run(server)
    cost = aggregate["cost"]
    # Every reply counted once: the originals once per user, each pair's other reply under its kind, and
    # together exactly what the run's calls say the server reported.
    assert cost["prompt"] == cold["calls"]["prompt tokens"] and cost["completion"] == cold["calls"][
        "completion tokens"]
    assert cost["originals"][2] == 5
    assert set(cost["by_kind"]) == {"noise_injection", "category_drift", "swap"}
    assert sum(n for _, _, n in cost["by_kind"].values()) == len(cold["pairs"])
    # The fake server counts four characters a token: a history line is a few dozen, the rest of the
    # prompt (instructions, the item) more than one line.
    assert 5 < cost["per_line"] < 60 and cost["fixed"] > cost["per_line"]
    assert all(len(p["tokens"]) == 4 and p["tokens"][2] > 0 for p in cold["pairs"])
    assert pair_from_dict(cold["pairs"][0], source="t").tokens == tuple(cold["pairs"][0]["tokens"])
    out = " ".join(capsys.readouterr().out.split())  # the terminal wraps the row
    assert "Tokens (as the server counted)" in out and "tokens per history line" in out
    assert "cross-user controls" in out
    # A warm rerun costs no call, and reports what the cached replies took when they were made.
    assert cli.main([*argv[:-1], "warm.json"]) in (0, 1)
    warm = json.loads(Path("warm.json").read_text(encoding="utf-8"))
    (warm_aggregate,) = warm["aggregates"].values()
    assert warm["calls"]["made"] == 0 and warm_aggregate["cost"] == cost


def test_model_time_is_reported_per_call_and_per_verdict_and_kept_by_the_cache(
        server: FakeOllamaServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.latency = 0.01  # each reply takes at least this long: a floor, never a ceiling, is asserted
    argv, cold, aggregate = _cached_run(server)
    time = aggregate["time"]
    # Every reply once: the originals once per user and each pair's other reply — the calls made.
    assert time["calls"] == cold["calls"]["made"] == 5 + len(cold["pairs"])
    assert time["seconds"] >= 0.01 * time["calls"] and time["median"] >= 0.01
    assert all(p["original_latency_s"] >= 0.01 and p["latency_s"] >= 0.01 for p in cold["pairs"])
    mean, most, count = time["per_verdict"]
    assert count == len(cold["gates"]) == 3 and mean <= most <= time["seconds"] + 0.1
    out = " ".join(capsys.readouterr().out.split())
    assert "Model time" in out and "per verdict" in out and "a call" in out
    assert cli.main([*argv[:-1], "warm.json"]) in (0, 1)  # cache hits keep what their calls took
    warm = json.loads(Path("warm.json").read_text(encoding="utf-8"))
    (warm_aggregate,) = warm["aggregates"].values()
    assert warm["calls"]["made"] == 0 and warm_aggregate["time"] == time
