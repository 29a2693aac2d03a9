"""The balanced design: every kind at one severity per user, rotated over the users. On the fake server's
modes it reaches the full sweep's verdicts — every item, under the mean, confident and sequential rules —
with about a quarter of its calls, and every report says that severity comparisons are between users."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.testing import FakeOllamaServer

pytestmark = pytest.mark.usefixtures("isolated")

RUN = ("--users", "20", "--cache", "off", "--progress", "off", "--inconclusive", "warn")


def _run(server: FakeOllamaServer, design: str, decision: str, name: str, *extra: str) -> dict[str, Any]:
    cli.main(["run", "--model", "fake-model", "--host", server.url, *RUN, "--design", design,
              "--decision", decision, "--json", name, *(extra or ("-q",))])
    doc: dict[str, Any] = json.loads(Path(name).read_text(encoding="utf-8"))
    return doc


def _verdicts(doc: dict[str, Any]) -> dict[str, str]:
    return {g["slice"]: g["verdict"]["outcome"] for g in doc["gates"]}


@pytest.mark.parametrize("decision", ["mean", "sequential"])
@pytest.mark.parametrize("mode", ["stable", "borderline", "fragile", "history-blind"])
def test_balanced_reaches_the_full_verdicts_with_under_30_percent_of_the_calls(
        server: FakeOllamaServer, mode: str, decision: str) -> None:
    server.mode = mode
    full = _run(server, "full", decision, "full.json")
    balanced = _run(server, "balanced", decision, "balanced.json")
    assert _verdicts(balanced) == _verdicts(full)
    assert len(_verdicts(full)) == 6  # five kinds and overall
    if decision == "mean":  # every planned call is made: 140 of 540
        assert balanced["calls"]["made"] <= 0.30 * full["calls"]["made"]
    else:  # a sequential run stops with up to a window of calls in flight: the count varies by a few
        assert balanced["calls"]["made"] <= 0.5 * full["calls"]["made"]
    # One severity per kind per user, every (kind, severity) run by four users of twenty.
    cells: dict[tuple[str, int], set[str]] = {}
    for pair in balanced["pairs"]:
        key = pair["key"]
        if key["kind"] != "swap":
            cells.setdefault((key["kind"], key["severity"]), set()).add(key["user_id"])
    if decision == "mean":
        assert len(cells) == 25 and all(len(users) == 4 for users in cells.values())


def test_every_report_says_the_design_and_what_it_changes(server: FakeOllamaServer,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    doc = _run(server, "balanced", "mean", "r.json", "--markdown", "r.md", "--severities", "1,3,5")
    out = capsys.readouterr().out
    (aggregate,) = doc["aggregates"].values()
    assert aggregate["design"] == "balanced" and doc["settings"]["design"] == "balanced"
    for text in (out, Path("r.md").read_text(encoding="utf-8")):
        assert "between users: balanced design" in text
        assert "compare different users" in text
    full = _run(server, "full", "mean", "f.json", "--markdown", "f.md", "--severities", "1,3,5")
    (aggregate,) = full["aggregates"].values()
    assert aggregate["design"] == "full" and "balanced" not in Path("f.md").read_text(encoding="utf-8")


def test_a_dry_run_prices_the_balanced_design(capsys: pytest.CaptureFixture[str]) -> None:
    for design, calls in (("full", "540"), ("balanced", "140")):
        argv = ["run", "--backend", "template", "--dry-run", "--design", design, "--users", "20"]
        assert cli.main(argv) == 0
        assert f"at most {calls} model calls" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------- the budget
def test_max_calls_cuts_the_users_to_fit_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "--backend", "template", "--dry-run"]
    assert cli.main([*base, "--max-calls", "100"]) == 0
    out, err = capsys.readouterr()
    # 27 calls a user on the default gate (original, 25 pairs, the cross-user control): 3 users fit in 100.
    assert "max-calls 100: this test's gate costs up to 27 calls a user, so it runs 3 of 20 users" in err
    assert "3 users × 5 kinds" in out and "at most 81 model calls" in out
    assert cli.main([*base, "--max-calls", "100", "--design", "balanced"]) == 0
    out, err = capsys.readouterr()
    assert "7 calls a user, so it runs 14 of 20 users" in err and "at most 98 model calls" in out
    assert cli.main([*base, "--max-calls", "10"]) == 0  # two users are the fewest a gate can use
    assert "runs 2 of 20 users (54 calls at most) — still above it" in capsys.readouterr().err
    assert cli.main([*base, "--max-calls", "10", "--users", "1"]) == 0  # never more users than asked for
    assert "runs 1 of 1 users (27 calls at most) — still above it" in capsys.readouterr().err
    assert cli.main([*base, "--max-calls", "1000"]) == 0  # within the budget: nothing cut, nothing said
    out, err = capsys.readouterr()
    assert "max-calls" not in err and "20 users" in out


def test_max_calls_is_the_same_budget_under_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.robustness(perturbations=['noise'], severities=[1, 5])"
                        "\ndef test_gate(robustness):\n    pass\n")
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-max-calls=20",
                                "--robustexplain-json=r.json", "--robustexplain-inconclusive=warn")
    result.assert_outcomes(passed=1)
    # 1 original + 2 pairs + 1 cross-user control = 4 calls a user: 5 users fit in 20.
    result.stdout.fnmatch_lines(["*max-calls 20: this test's gate costs up to 4 calls a user, so it runs "
                                 "5 of 20 users*"])
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert len({p["key"]["user_id"] for p in doc["pairs"]}) == 5
