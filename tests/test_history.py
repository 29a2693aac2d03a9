"""The run history (issue 42, item 1): one line per run appended at its end, safe for runs that end together,
bounded, read back past a damaged line, and told as a trend per test — a drop shown at the run it happened."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path

import pytest
from helpers import marked, run_fake

from pytest_robustexplain.cli import main
from pytest_robustexplain.report.history import (
    HISTORY_FILE,
    HistoryError,
    append_run,
    current_commit,
    read_history,
    trends,
)
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.report.pr_comment import render_pr_comment
from pytest_robustexplain.stats.trend import MIN_RUNS, change_point
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

GATE = marked('perturbations=["noise_injection"], severities=[1], min_metric=0.0, guard="off"')
ARGS = ("--robustexplain-users=4", "-p", "no:cacheprovider")
# The cache off, so that the runs after the fake model's change call it again; the history where it is named.
UNCACHED = ("--robustexplain-cache=off", "--robustexplain-history=h.jsonl", *ARGS)
REPORTS = ("--robustexplain-html=r.html", "--robustexplain-json=r.json")


def _line(signature: str = "sig", rho: float = 0.8, test: str = "t::g[overall]") -> dict:
    return {"v": 1, "time": "2026-12-03T10:00:00+00:00", "commit": None, "signature": signature,
            "dataset": "synthetic", "models": {"m": None}, "calls": {}, "tokens": None,
            "items": [{"test": test, "slice": "overall", "model": "m", "outcome": "PASS",
                       "values": {"stability": rho}}]}


# ------------------------------------------------------------------------------ the change test
def test_a_perfect_split_of_eight_runs_has_the_exact_permutation_p_value() -> None:
    found = change_point([0.8, 0.81, 0.8, 0.82, 0.4, 0.41, 0.4, 0.42])
    assert found is not None
    assert (found.at, found.before, found.after) == (4, 0.805, 0.405)
    assert found.p == pytest.approx(2 / 70)  # 2 of the C(8, 4) = 70 splits are this separated
    assert found.significant


@pytest.mark.parametrize("values", [[0.8] * 12, [0.8, 0.4] * 6])
def test_runs_without_a_change_show_none(values: list[float]) -> None:
    found = change_point(values)
    assert found is not None and not found.significant


def test_too_few_runs_or_a_value_that_is_not_a_number_is_no_test() -> None:
    assert change_point([0.8] * 4 + [0.1] * (MIN_RUNS - 5)) is None
    assert change_point([0.8] * 8 + [float("nan")]) is None


# ------------------------------------------------------------------------------ writing and reading
def test_runs_that_append_together_each_leave_one_complete_line(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        barrier.wait()
        for i in range(25):
            append_run(path, _line(rho=n + i / 100))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records, warnings = read_history(path)
    assert (len(records), warnings) == (100, [])


def test_the_history_keeps_the_last_runs_up_to_its_cap(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    for i in range(8):
        append_run(path, _line(rho=i / 10), cap=5)
    records, _ = read_history(path)
    assert [r["items"][0]["values"]["stability"] for r in records] == [0.3, 0.4, 0.5, 0.6, 0.7]


def test_a_line_cut_short_is_skipped_with_one_warning_and_the_next_run_starts_a_new_line(tmp_path: Path
                                                                                         ) -> None:
    path = tmp_path / HISTORY_FILE
    append_run(path, _line(rho=0.1))
    path.write_text(path.read_text() + json.dumps(_line(rho=0.2))[:40], encoding="utf-8")  # a killed run
    append_run(path, _line(rho=0.3))
    records, warnings = read_history(path)
    assert [r["items"][0]["values"]["stability"] for r in records] == [0.1, 0.3]
    assert warnings == [f"{path}: line 2 is not a run record (cut short or edited): skipped"]


def test_the_history_is_never_written_through_a_link_or_into_a_fifo(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with pytest.raises(HistoryError, match="symbolic link"):
        append_run(link, _line())
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(HistoryError, match="not a regular file"):
        append_run(fifo, _line())
    assert target.read_text() == "keep\n"


def test_trends_never_mix_signatures_or_datasets() -> None:
    other_data = {**_line(), "dataset": "movielens"}
    found = trends([_line(), _line(signature="other"), _line(), other_data])
    assert sorted((t.signature, t.dataset, len(t.runs)) for t in found) == [
        ("other", "synthetic", 1), ("sig", "movielens", 1), ("sig", "synthetic", 2)]


def test_the_commit_comes_from_the_ci_or_from_git(tmp_path: Path) -> None:
    assert current_commit({"GITHUB_SHA": "abc123"}, tmp_path) == "abc123"
    assert current_commit({"GITHUB_SHA": "abc\n::error::x"}, tmp_path) is None  # not a commit: not said
    assert current_commit({}, tmp_path) is None  # not a repository


# ------------------------------------------------------------------------------ end to end
def test_ten_runs_show_the_drop_at_run_six_with_the_tests_verdict(pytester: pytest.Pytester,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_gate=GATE)
    with FakeOllamaServer() as server:
        for run in range(1, 11):
            server.mode = "stable" if run < 6 else "fragile"
            run_fake(pytester, server, *UNCACHED, *REPORTS)
    history = pytester.path / "h.jsonl"
    records, warnings = read_history(history)
    assert (len(records), warnings) == (10, [])
    capsys.readouterr()  # the inner runs' output
    assert main(["history", "--file", str(history)]) == 0
    out = capsys.readouterr().out
    # Compact: a heading per test, model and dataset, one line for the item, its change on it.
    heading = r"^test test_gate.py::test_gate · model fake-model · dataset synthetic\S* · signature "
    assert re.search(heading, out, re.M)
    [line] = [line for line in out.splitlines() if line.startswith("  [noise_injection]")]
    assert line.startswith("  [noise_injection] runs 1–10 PASS×5 FAIL×5, last FAIL · ρ ")
    assert "· ρ changed at run 6" in line and "too few" not in out
    assert main(["history", "--file", str(history), "--format", "json"]) == 0
    [item] = json.loads(capsys.readouterr().out)["items"]
    assert item["outcomes"] == ["PASS"] * 5 + ["FAIL"] * 5 and item["changes"]["stability"]["run"] == 6
    assert len(item["values"]["stability"]) == 10
    # The reports of the tenth run: today's ρ beside the recent runs, the change where it happened.
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    comment = render_pr_comment(read_json(pytester.path / "r.json"))
    for text in (html, comment.replace("\\_", "_")):  # Markdown escapes the underscores
        assert "test_gate.py::test_gate[noise_injection]: ρ " in text
        assert "; last 10 runs " in text and "; changed at run 6: " in text
    # The HTML draws the trend: ρ (the one enforced check with guard off) over the ten runs, the values
    # in words under the chart, its text alternative.
    [figure] = re.findall(r'<figure class="trend">.*?</figure>', html)
    assert 'alt="trend of ρ over runs 1–10 of test_gate.py::test_gate[noise_injection]"' in figure
    assert 'src="data:image/svg+xml;base64,' in figure
    caption = re.search(r"<figcaption>(.*?)</figcaption>", figure).group(1)  # type: ignore[union-attr]
    assert caption.startswith("ρ, runs 1–10: ") and "; changed at run 6: " in caption


def test_history_off_or_a_cache_that_writes_none_keeps_none_and_a_named_file_that_fails_is_an_error(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=GATE)
    with FakeOllamaServer() as server:
        run_fake(pytester, server, *ARGS, "--robustexplain-history=off").assert_outcomes(passed=1)
        assert not (pytester.path / ".robustexplain-cache" / HISTORY_FILE).exists()
        run_fake(pytester, server, *ARGS, "--robustexplain-cache=read").assert_outcomes(passed=1)
        assert not (pytester.path / ".robustexplain-cache" / HISTORY_FILE).exists()  # the cache writes none
        run_fake(pytester, server, *ARGS).assert_outcomes(passed=1)
        assert len(read_history(pytester.path / ".robustexplain-cache" / HISTORY_FILE)[0]) == 1
        os.mkfifo(pytester.path / "fifo")
        result = run_fake(pytester, server, *ARGS, "--robustexplain-history=fifo")
    assert result.ret == 4  # every test passed; the history the settings named could not be written
    assert "--robustexplain-history=" in result.stdout.str() and "not a regular file" in result.stdout.str()


def test_the_default_history_that_cannot_be_written_is_a_warning_not_a_failure(pytester: pytest.Pytester
                                                                              ) -> None:
    pytester.makepyfile(test_gate=GATE)
    cache = pytester.path / ".robustexplain-cache"
    cache.mkdir()
    os.mkfifo(cache / HISTORY_FILE)
    with FakeOllamaServer() as server:
        result = run_fake(pytester, server, *ARGS)
    result.assert_outcomes(passed=1, warnings=1)
    assert result.ret == 0
    assert "cannot append this run to the history" in result.stdout.str()


def test_the_command_reports_a_damaged_history_and_a_missing_one(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / HISTORY_FILE
    for rho in (0.8, 0.81, 0.79):
        append_run(path, _line(rho=rho))
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"v": 1, "items": [')
    assert main(["history", "--file", str(path)]) == 0
    said = capsys.readouterr()
    assert said.err.count("not a run record") == 1
    assert "[overall] runs 1–3 PASS×3, last PASS · ρ 0.79" in said.out
    assert said.out.count("too few to test for a change") == 1
    assert main(["history", "--file", str(tmp_path / "none.jsonl")]) == 2
    assert "no run history at" in capsys.readouterr().err


def test_ids_from_a_shared_history_are_shown_never_obeyed(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """A history restored from a shared cache is outside text: a test id carrying a workflow command or a
    line break reaches the log as text."""
    path = tmp_path / HISTORY_FILE
    append_run(path, _line(test="::error title=pwned::x\n::warning::y"))
    assert main(["history", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    assert not any(line.lstrip().startswith("::") for line in out.splitlines())
    assert "pwned" in out and out.count("\n") < 20


def test_two_runs_that_end_together_on_one_cache_leave_two_complete_records(tmp_path: Path) -> None:
    """Two processes (parallel CI jobs restoring one cache) each append their run; the lock keeps both."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "pytest_robustexplain", "run", "--backend", "template", "--users", "3",
               "--perturbations", "noise", "--severities", "1", "--cache-dir", str(tmp_path / "cache"),
               "--progress", "off", "-q"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROBUSTEXPLAIN_")}
    # The template backend writes no response cache, so each run's line is its own.
    runs = [subprocess.Popen([*command, "--seed", str(seed)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT) for seed in (1, 2)]
    outputs = [run.communicate(timeout=300)[0].decode() for run in runs]
    assert all(run.returncode in (0, 1) for run in runs), outputs  # a gate may fail; it is recorded
    records, warnings = read_history(tmp_path / "cache" / HISTORY_FILE)
    assert (len(records), warnings) == (2, [])
    assert all(r["items"] and all(i["values"] for i in r["items"]) for r in records)  # each line whole


# ------------------------------------------------------------------------------ a hostile history (issue 61)
def _hostile() -> dict[str, str]:
    """Lines a history restored from a shared cache may hold, each of which once ended every later run in a
    traceback (OverflowError, AttributeError, TypeError, RecursionError) or fed a trend a number it cannot
    hold."""
    item = _line()["items"][0]
    huge = {**item, "values": {"stability": 10 ** 400}}
    return {
        "a 400-digit number": json.dumps({**_line(), "items": [huge]}),
        "models as a list": json.dumps({**_line(), "models": ["m"]}),
        "a model's digest as a list": json.dumps({**_line(), "models": {"m": ["d"]}}),
        "NaN": json.dumps(_line()).replace("0.8", "NaN"),
        "an outcome as a list": json.dumps({**_line(), "items": [{**item, "outcome": ["PASS"]}]}),
        "brackets nested deeply": "[" * 300_000 + "]" * 300_000,
    }


@pytest.mark.parametrize("name", list(_hostile()))
def test_a_line_that_does_not_validate_is_skipped_naming_it(name: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / HISTORY_FILE
    path.write_text(json.dumps(_line(rho=0.7)) + "\n" + _hostile()[name] + "\n", encoding="utf-8")
    append_run(path, _line(rho=0.9))
    records, warnings = read_history(path)
    assert [r["items"][0]["values"]["stability"] for r in records] == [0.7, 0.9]
    assert warnings == [f"{path}: line 2 is not a run record (cut short or edited): skipped"]
    assert main(["history", "--file", str(path)]) == 0
    assert "[overall] runs 1–2 PASS×2" in capsys.readouterr().out


def test_a_record_of_a_newer_schema_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    path.write_text(json.dumps({**_line(), "v": 2}) + "\n", encoding="utf-8")
    assert read_history(path) == ([], [f"{path}: line 1 was written by a newer pytest-robustexplain (history "
                                       "schema 2; this one reads 1): skipped"])
    path.write_text(2 * (json.dumps({**_line(), "v": 2}) + "\n"), encoding="utf-8")
    assert read_history(path)[1] == [f"{path}: lines 1, 2 were written by a newer pytest-robustexplain "
                                     "(history schema 2; this one reads 1): skipped"]


def test_the_history_is_bounded_in_bytes_keeping_its_newest_runs(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_robustexplain.report import history

    monkeypatch.setattr(history, "HISTORY_MAX_BYTES", 4096)
    path = tmp_path / HISTORY_FILE
    size = len(json.dumps(_line(), separators=(",", ":"))) + 1
    path.write_text("x" * 10_000 + "\n", encoding="utf-8")  # one huge line, as a shared cache may hold
    for i in range(40):
        append_run(path, _line(rho=i / 100))
    assert path.stat().st_size <= 4096
    records, warnings = read_history(path)
    kept = [r["items"][0]["values"]["stability"] for r in records]
    assert kept == [i / 100 for i in range(40)][-len(kept):] and len(kept) == 4096 // size
    assert warnings == []
    path.write_text("x" * 10_000 + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    records, warnings = read_history(path)  # read: only the newest bytes, and it says so
    assert len(records) == len(kept) and "bytes at its start left unread" in warnings[0]


def test_a_run_writes_its_reports_whatever_the_history_holds(pytester: pytest.Pytester) -> None:
    """Every hostile line at once: the run passes, writes its JSON and says each skipped line once, serially
    and under ``robustexplain run`` (one line each there, as the command's other messages)."""
    pytester.makepyfile(test_gate=GATE)
    (pytester.path / "h.jsonl").write_text("\n".join(_hostile().values()) + "\n", encoding="utf-8")
    with FakeOllamaServer() as server:
        result = run_fake(pytester, server, *UNCACHED, *REPORTS)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*h.jsonl: lines 1, 2, 3, 4, 5 and 1 more are not a run record*"])
        assert read_json(pytester.path / "r.json").gates
        cli = pytester.run(sys.executable, "-m", "pytest_robustexplain", "run", "--model", "fake-model",
                           "--host", server.url, "--users", "3", "--perturbations", "noise", "--severities",
                           "1", "--cache", "off", "--history", "h.jsonl", "--json", "c.json", "--progress",
                           "off")
    assert cli.ret in (0, 1) and (pytester.path / "c.json").exists()
    warned = [line for line in cli.errlines if "h.jsonl" in line]
    assert warned and all(line.startswith("robustexplain: warning: ") for line in warned), cli.errlines
    assert not any("warnings.warn" in line or "RobustExplainWarning" in line for line in cli.errlines)
