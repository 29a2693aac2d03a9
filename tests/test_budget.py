"""The time budget (max-minutes): when it runs out, the calls still to make are cancelled and every gate is
decided on its first users whose pairs are all in — said in its verdict, from both doors. The fake server's
scripted hangs decide which users can finish (cache hits finish, hung calls never do), so no test depends
on how fast this machine is."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.store import DB_NAME
from pytest_robustexplain.testing import FakeOllamaServer

pytestmark = pytest.mark.usefixtures("isolated")

BASE = ("--model", "fake-model", "--perturbations", "noise,shuffle", "--severities", "1,5", "--guard", "off",
        "--progress", "off", "--inconclusive", "warn", "--cache-dir", "cache", "-q")


def _run(server: FakeOllamaServer, name: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["run", "--host", server.url, *BASE, "--json", name, *extra])
    doc: dict[str, Any] = json.loads(Path(name).read_text(encoding="utf-8"))
    return code, doc


def test_a_run_out_of_time_decides_on_the_users_that_finished(server: FakeOllamaServer) -> None:
    code, first = _run(server, "first.json", "--users", "3")
    assert code == 0 and first["calls"]["made"] == 3 * 5  # 1 original + 2 kinds × 2 severities a user
    server.hang_next(1000)  # every call from now on hangs: only the three cached users can finish
    code, doc = _run(server, "budget.json", "--users", "6", "--max-minutes", "0.05")
    assert code == 0
    assert doc["calls"]["cached"] == 15 and doc["calls"]["made"] == 0 and doc["calls"]["cancelled"] > 0
    assert doc["settings"]["max_minutes"] == 0.05
    assert len(doc["gates"]) == 3  # two kinds and overall
    for gate in doc["gates"]:
        assert "The time budget (max-minutes) ran out: decided on the first 3 of 6 users." in (
            gate["verdict"]["message"])
        assert len(gate["scope"]["users"]) == 3
    assert {p["key"]["user_id"] for p in doc["pairs"]} == {p["key"]["user_id"] for p in first["pairs"]}
    # The same three users' verdicts as the run that asked for three.
    assert ({g["slice"]: g["verdict"]["outcome"] for g in doc["gates"]}
            == {g["slice"]: g["verdict"]["outcome"] for g in first["gates"]})


def test_a_budget_no_user_fits_is_not_measured(server: FakeOllamaServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    server.hang_next(1000)
    code, doc = _run(server, "r.json", "--users", "2", "--max-minutes", "0.02", "--markdown", "r.md")
    assert code == 0  # --inconclusive warn
    outcomes = {g["verdict"]["outcome"] for g in doc["gates"]}
    assert outcomes == {"INCONCLUSIVE"}
    message = doc["gates"][0]["verdict"]["message"]
    assert message.startswith("Not measured: the time budget (max-minutes) ran out before any of the 2 users")
    assert "Raise max-minutes" in message
    assert doc["pairs"] == [] and doc["calls"]["made"] == 0
    captured = capsys.readouterr()
    assert "INCONCLUSIVE" in captured.out and "the time budget (max-minutes) ran out" in captured.err
    assert doc["calls"]["stopped by the time budget"] == doc["calls"]["cancelled"] > 0
    assert "stopped by the time budget" in Path("r.md").read_text(encoding="utf-8")
    # Without a budget the same run is not cut: nothing is said about one.
    server.clear_faults()
    code, doc = _run(server, "free.json", "--users", "2")
    assert all("time budget" not in g["verdict"]["message"] for g in doc["gates"])
    assert "stopped by the time budget" not in doc["calls"]


def test_the_budget_is_the_same_under_pytest(server: FakeOllamaServer, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.robustness(perturbations=['noise'], severities=[1])"
                        "\ndef test_gate(robustness):\n    pass\n")
    server.hang_next(1000)
    result = pytester.runpytest(f"--robustexplain-host={server.url}", "--robustexplain-model=fake-model",
                                "--robustexplain-max-minutes=0.02", "--robustexplain-json=r.json",
                                "--robustexplain-inconclusive=fail", "--robustexplain-users=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Not measured: the time budget (max-minutes) ran out*"])
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert doc["gates"][0]["verdict"]["outcome"] == "INCONCLUSIVE"


@pytest.mark.parametrize("value", ["0", "-1", "inf", "soon"])
def test_a_budget_that_is_no_positive_number_is_a_usage_error(value: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--backend", "template", "--max-minutes", value]) == 2
    assert "max-minutes" in capsys.readouterr().err


def test_a_dry_run_estimates_the_time_at_the_pace_a_run_measured(server: FakeOllamaServer,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 pytester: pytest.Pytester,
                                                                 tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    argv = ["run", "--host", server.url, *BASE, "--users", "3", "--cache-dir", str(cache)]
    assert cli.main([*argv, "--dry-run"]) == 0
    assert "min for these" not in capsys.readouterr().out  # nothing measured yet: no estimate
    server.latency = 0.05  # each reply takes at least this long
    assert cli.main([*argv, "--json", "r.json"]) == 0
    capsys.readouterr()
    with contextlib.closing(sqlite3.connect(cache / DB_NAME)) as db:
        [(kept,)] = db.execute("SELECT value FROM kept WHERE kind = 'pace'").fetchall()
    pace = json.loads(kept)
    assert pace["model"] == "fake-model" and pace["calls"] == 15 and pace["median_s"] >= 0.05
    assert pace["concurrency"] == 4
    assert cli.main([*argv, "--dry-run", "--users", "20"]) == 0
    out = capsys.readouterr().out
    assert "fake-model: ≈ " in out and "min for these 100 calls at the pace last measured" in out
    assert "users fit at that pace" not in out
    # With a time budget below the estimate, the dry run says how many users it buys at that pace.
    minutes = 100 * pace["median_s"] / 4 / 60  # the estimate for 100 calls, four at a time
    assert cli.main([*argv, "--dry-run", "--users", "20", "--max-minutes", f"{minutes / 2:.6f}"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"max-minutes [0-9.]+: about (\d+) of 20 users fit at that pace", out)
    assert found, out
    fit = int(found.group(1))
    assert fit in (9, 10)  # half the estimate's time: half the users (rounding the budget may cost one)
    # Under pytest the dry run says the same.
    pytester.makepyfile("import pytest\n\n@pytest.mark.robustness(perturbations=['noise', 'shuffle'], "
                        "severities=[1, 5])\ndef test_gate(robustness):\n    pass\n")
    result = pytester.runpytest("--robustexplain-dry-run", "--robustexplain-model=fake-model",
                                f"--robustexplain-host={server.url}", f"--robustexplain-cache-dir={cache}",
                                "--robustexplain-guard=off", "--robustexplain-users=20")
    result.stdout.fnmatch_lines(["*fake-model: ≈ * min for these 100 calls at the pace last measured*"])
    capsys.readouterr()
    # A corrupt record is no estimate (and no error).
    with contextlib.closing(sqlite3.connect(cache / DB_NAME)) as db, db:
        db.execute("UPDATE kept SET value = '{not json' WHERE kind = 'pace'")
    assert cli.main([*argv, "--dry-run"]) == 0
    assert "pace last measured" not in capsys.readouterr().out
