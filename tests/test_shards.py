"""A gate split into shards (``--robustexplain-shard=I/N``) and merged (``robustexplain merge``) is the gate
one run decides: the same verdicts, intervals, findings and pairs, serial and under ``-n 2``; shards that
cannot be one run are refused in one line naming two files; a missing shard's users are not measured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import marked, read_report, stable_report

from pytest_robustexplain.cli.entry import main
from pytest_robustexplain.data import EvalCase, Item, UserHistory
from pytest_robustexplain.engine.shards import Shard, restore_settings
from pytest_robustexplain.options.parsers import Invalid, parse_shard
from pytest_robustexplain.settings import Settings, resolve_settings
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

# Every decision mode, the guard, an attack and two models (so the report compares them).
SESSION = """
import pytest

@pytest.mark.robustness(perturbations=["noise", "shuffle"], severities=[1, 5], users=8, min_combined=0.3,
                        min_metric=0.1)
def test_fixed(robustness):
    assert robustness.failures == ()

@pytest.mark.robustness(perturbations=["noise", "shuffle"], users=9, decision="sequential", min_combined=0.5,
                        min_metric=0.3)
def test_sequential(robustness):
    pass

@pytest.mark.robustness(perturbations=["dilution"], severities=[3], users=7, decision="confident",
                        min_combined=0.62, min_metric=0.0, inconclusive="warn")
def test_confident(robustness):
    pass

@pytest.mark.robustness(perturbations=["prompt_injection"], users=6, severities=[3])
def test_security(robustness):
    pass
"""

# What depends on the clock, the processes (calls: a shard measures its users' whole design, and each xdist
# worker makes the originals it needs), the report's own paths, or the shard itself.
VOLATILE = {"started_at", "finished_at", "timings", "calls", "latency_s", "original_latency_s", "time",
            "shard", "plan"}

# Where each run writes (its reports; a merge keeps no history of its own) and where a setting came from.
WHERE = ("json", "markdown", "html", "history", "shard", "sources")

@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(models=("fake-model:latest", "other-model:latest"), mode="rating-aware") as fake:
        yield fake


def _run(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--robustexplain-model=fake-model,other-model",
                              f"--robustexplain-host={server.url}", "--robustexplain-cache=off",
                              "--robustexplain-guard=fail", "-p", "no:randomly", *args)


def _stable(report: Any) -> Any:
    return stable_report(report, VOLATILE, lambda settings: {k: v for k, v in settings.items()
                                                             if k not in WHERE})


def _shards(pytester: pytest.Pytester, server: FakeOllamaServer, count: int, *args: str) -> list[str]:
    names = []
    for index in range(1, count + 1):
        name = f"shard{index}.json"
        result = _run(pytester, server, f"--robustexplain-shard={index}/{count}",
                      f"--robustexplain-json={name}", *args)
        outcomes = result.parseoutcomes()
        # measured, not gated
        assert "failed" not in outcomes and "error" not in outcomes, result.stdout.str()
        names.append(str(pytester.path / name))
    return names


def _merge(*args: str) -> int:
    return main(["merge", *args])


@pytest.mark.parametrize("mode", ["rating-aware", "fragile"])
def test_four_shards_merged_are_the_run_they_split(pytester: pytest.Pytester, server: FakeOllamaServer,
                                                    xdist_args: tuple[str, ...], mode: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(SESSION)
    server.mode = mode
    whole = _run(pytester, server, "--robustexplain-json=whole.json", *xdist_args)
    shards = _shards(pytester, server, 4, *xdist_args)
    merged = pytester.path / "merged.json"
    code = _merge(*reversed(shards), "--json", str(merged), "--junitxml", str(pytester.path / "m.xml"),
                  "--markdown", str(pytester.path / "m.md"))
    one, two = read_report(pytester, "whole.json"), read_report(merged)
    assert _stable(one) == _stable(two)
    assert {g["verdict"]["mode"] for g in one["gates"]} == {"mean", "sequential", "confident"}
    assert "shard" not in two and all("plan" not in g for g in two["gates"])
    assert code == (1 if whole.ret else 0)  # the merge gates as the run did
    outcomes = {g["verdict"]["outcome"] for g in one["gates"]}
    assert ("FAIL" in outcomes) == (mode == "fragile")
    printed = capsys.readouterr().out
    assert ("FAIL — " in printed) == (mode == "fragile") and (pytester.path / "m.xml").is_file()
    # Each shard measured its quarter of every gate's users, and only those.
    users = [set(read_report(Path(s))["shard"]["users"]) for s in shards]
    planned = {u for g in read_report(Path(shards[0]))["gates"] for u, _ in g["plan"]["cases"]}
    assert set().union(*users) == planned and sum(map(len, users)) == len(planned)
    assert all(len(u) in (len(planned) // 4, len(planned) // 4 + 1) for u in users)


def test_a_shard_measures_its_part_and_says_the_merge_decides(pytester: pytest.Pytester,
                                                                server: FakeOllamaServer) -> None:
    pytester.makepyfile(marked("users=8, perturbations=['noise'], min_combined=0.99"))
    server.mode = "fragile"  # it would fail the gate
    result = _run(pytester, server, "--robustexplain-shard=2/4", "--robustexplain-json=s.json",
                  "--robustexplain-cache=read-write")
    result.assert_outcomes(passed=2)
    report = read_report(pytester, "s.json")
    assert report["shard"]["shard"] == "2/4" and len(report["shard"]["users"]) == 2
    verdict = report["gates"][0]["verdict"]
    assert verdict["outcome"] == "INCONCLUSIVE"
    assert verdict["message"].startswith("Measured for a merge: shard 2/4 ran 2 of the gate's 8 users")
    assert len(report["gates"][0]["plan"]["cases"]) == 8
    assert not list(pytester.path.rglob("history.jsonl"))  # measured, not decided: nothing to remember
    _run(pytester, server, "--robustexplain-cache=read-write")
    assert list(pytester.path.rglob("history.jsonl"))  # where a whole run keeps its history
    # Its dry run prices its own share: 2 of the 8 users, each an original, 5 severities and a control, on
    # both models.
    whole, mine = (_run(pytester, server, "--robustexplain-dry-run", *more)
                   for more in ((), ("--robustexplain-shard=2/4",)))
    assert "at most 112 model calls in all" in whole.stdout.str() + whole.stderr.str()
    assert "at most 28 model calls in all" in mine.stdout.str() + mine.stderr.str()


def test_a_sequential_shard_never_stops_and_the_merge_stops_where_one_run_would(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(marked("users=12, perturbations=['noise'], decision='sequential'"))
    server.mode = "fragile"  # clearly below the thresholds: one run stops after a few users
    whole = _run(pytester, server, "--robustexplain-json=whole.json")
    shards = _shards(pytester, server, 3)
    assert all(read_report(Path(s))["calls"]["cancelled"] == 0 for s in shards)
    assert _merge(*shards, "--json", str(pytester.path / "m.json")) == whole.ret
    one, two = read_report(pytester, "whole.json"), read_report(pytester, "m.json")
    assert one["calls"]["cancelled"] > 0  # the run stopped early on its own users, in their seeded order
    assert _stable(one) == _stable(two)


def test_a_gate_of_fewer_users_than_shards_leaves_some_shards_nothing_to_measure(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(marked("users=2, perturbations=['noise'], severities=[2]"))
    whole = _run(pytester, server, "--robustexplain-json=whole.json")
    shards = _shards(pytester, server, 4)
    empty = read_report(Path(shards[3]))
    assert empty["shard"]["users"] == [] and empty["gates"][0]["verdict"]["outcome"] == "INCONCLUSIVE"
    assert _merge(*shards, "--json", str(pytester.path / "m.json")) == whole.ret
    assert _stable(read_report(pytester, "whole.json")) == _stable(read_report(pytester, "m.json"))


def test_the_merge_gates_against_the_baseline_the_shards_were_given(pytester: pytest.Pytester,
                                                                    server: FakeOllamaServer) -> None:
    pytester.makepyfile(marked("users=8, perturbations=['noise', 'shuffle'], severities=[1, 3], "
                               "min_combined=0.3, min_metric=0.1"))
    _run(pytester, server, "--robustexplain-save-baseline=base.json")  # the release before
    server.mode = "fragile"  # this change: a regression
    whole = _run(pytester, server, "--robustexplain-baseline=base.json", "--robustexplain-json=whole.json")
    shards = _shards(pytester, server, 4, "--robustexplain-baseline=base.json")
    assert _merge(*shards, "--json", str(pytester.path / "m.json")) == whole.ret == 1
    one, two = read_report(pytester, "whole.json"), read_report(pytester, "m.json")
    assert _stable(one) == _stable(two)
    assert all("regression" in g["verdict"]["findings"] for g in two["gates"])


@pytest.fixture
def four(pytester: pytest.Pytester, server: FakeOllamaServer) -> list[str]:
    """The four shards of a small passing gate."""
    pytester.makepyfile(marked("users=8, perturbations=['noise'], severities=[2]"))
    return _shards(pytester, server, 4)


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert _merge(*args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


def test_shards_that_are_not_one_run_are_refused_naming_two_files(
        pytester: pytest.Pytester, server: FakeOllamaServer, four: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    one, two = four[0], four[1]
    assert "are both shard 1/4: give each shard once" in _error(capsys, one, one)
    other = _run(pytester, server, "--robustexplain-shard=2/4", "--robustexplain-json=other.json",
                 "--robustexplain-seed=7")
    assert other.ret == 0
    said = _error(capsys, one, str(pytester.path / "other.json"))
    assert "other.json and " in said
    assert "shard1.json measured different plans (settings.seed: 42 and 7)" in said
    whole = _run(pytester, server, "--robustexplain-json=whole.json")
    assert "whole.json is not a shard's report" in _error(capsys, one, str(pytester.path / "whole.json"))
    # The same plan, but a user claimed by two shards (a hand-edited report).
    doc = read_report(Path(two))
    doc["shard"]["users"].append(read_report(Path(one))["shard"]["users"][0])
    Path(two).write_text(json.dumps(doc), encoding="utf-8")
    assert "both measured user" in _error(capsys, one, two)
    doc["shard"]["plan"] = "0" * 16
    Path(two).write_text(json.dumps(doc), encoding="utf-8")
    assert "its plan fingerprint" in _error(capsys, one, two)
    # Pairs of a user the shard does not say it measured (another shard's, made up): refused too.
    doc = read_report(Path(four[2]))
    doc["shard"]["users"] = doc["shard"]["users"][1:]
    Path(four[2]).write_text(json.dumps(doc), encoding="utf-8")
    assert "whom it does not say it measured" in _error(capsys, four[2])
    assert whole.ret == 0


def test_a_gate_with_a_conftest_check_is_refused_not_decided_without_it(
        pytester: pytest.Pytester, server: FakeOllamaServer, capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "custom_check" / "conftest.py"
    pytester.makeconftest(example.read_text(encoding="utf-8"))
    pytester.makepyfile(marked("users=4, perturbations=['noise'], severities=[2]"))
    shards = _shards(pytester, server, 2)
    said = _error(capsys, *shards)
    assert "was decided by check 'no_price' too, which robustexplain merge does not know" in said


def test_a_missing_shard_leaves_its_users_not_measured(pytester: pytest.Pytester, four: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = pytester.path / "m.json"
    assert _merge(four[0], four[1], four[3], "--json", str(out)) == 1  # inconclusive=fail
    assert "shard 3 of 4 not given" in capsys.readouterr().err
    verdict = read_report(out)["gates"][0]["verdict"]
    assert verdict["outcome"] == "INCONCLUSIVE"
    assert verdict["message"].startswith("Not measured: 2 of the 8 users (shard 3 of 4) were not measured")
    comment, history = pytester.path / "comment.md", pytester.path / "history.jsonl"
    assert _merge(*four, "--json", str(out), "--pr-comment", str(comment), "--details-url", "https://ci/1",
                  "--history", str(history)) == 0
    assert len(history.read_text(encoding="utf-8").splitlines()) == 1  # the merged run, once
    assert read_report(out)["gates"][0]["verdict"]["outcome"] == "PASS"
    said = comment.read_text(encoding="utf-8")
    assert said.startswith("<!-- robustexplain:pr-comment -->") and "explanations: **PASS**" in said


def test_a_shard_is_one_setting_of_the_option_table(pytester: pytest.Pytester,
                                                    server: FakeOllamaServer) -> None:
    assert parse_shard(" 2 / 4 ") == "2/4" and Shard.of("2/4") == Shard(2, 4)
    for wrong in ("0/4", "5/4", "2", "a/b", "1/0"):
        with pytest.raises(Invalid):
            parse_shard(wrong)
    pytester.makepyfile(marked("users=4"))
    result = _run(pytester, server, "--robustexplain-shard=5/4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--robustexplain-shard=5/4: shard 5 of 4: I runs from 1 to N" in result.stderr.str()
    # Which users a shard measures: by their place among the gate's users, every shard's share alike.
    shares = [Shard(i, 3).users(_cases(7)) for i in (1, 2, 3)]
    assert shares == [("u0", "u3", "u6"), ("u1", "u4"), ("u2", "u5")]


def _cases(n: int) -> list[Any]:

    return [EvalCase(UserHistory(f"u{i}", ()), Item(f"i{i}", "t", "c")) for i in range(n)]


def test_recorded_settings_read_back_as_they_were(tmp_path: Path) -> None:
    cli = {"robustexplain_model": "a,b", "robustexplain_users": "9", "robustexplain_severities": "1,3",
           "robustexplain_per_kind": "noise.min_combined=0.4", "robustexplain_weights": "0.4,0.2,0.2,0.2",
           "robustexplain_price": "0.15/0.6", "robustexplain_check_limits": "max_copy_rate=0.3",
           "robustexplain_decision": "sequential", "robustexplain_temperature": "0.7"}
    settings = resolve_settings(cli=cli, env={}, ini={}, yaml_path=None, rootdir=tmp_path)
    back = restore_settings(settings.to_dict())
    assert back == settings and back != Settings.defaults()
    assert back.sources == settings.sources
