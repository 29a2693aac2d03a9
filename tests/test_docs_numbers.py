"""The error rates in the docs are the benchmarks' output (issue 63, item 4): each table a benchmark printed
into a doc is what it prints today — every line of a short run has the shape of a line there, each table's
lines in the order printed (numbers aside) — and the guard's rates the prose claims are the ones its tables
show, so a claim cannot drift from the code that measures it without a test failing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUARD_DOC = REPO / "docs" / "guard.md"
# Each doc and the benchmark whose output it holds verbatim, with a short run's arguments.
VERBATIM = [("guard.md", "bench_guard.py", ("--runs", "20")),
            ("statistics.md", "bench_calibration.py", ("--runs", "30", "--quick")),
            ("statistics.md", "bench_sequential_checks.py", ("--runs", "30")),
            ("statistics.md", "bench_error_rates.py", ("--runs", "20")),
            ("statistics.md", "bench_history_trend.py", ("--reps", "20")),
            ("statistics.md", "bench_judge_agreement.py", ("--reps", "20")),
            ("statistics.md", "bench_sequential_pass.py", ("--runs", "20")),
            ("statistics.md", "bench_design.py", ("--runs", "30", "--show", "t3,0.89,0.02")),
            ("statistics.md", "bench_design.py", ("--runs", "2", "--failure-weights")),
            ("faithfulness.md", "bench_faithfulness.py", ("--runs", "30"))]


def _shape(line: str) -> str:
    """A line without its numbers, its OK/MISSED and its column widths: what a short run shares with it. A
    cell may say "> 20" or "—" where another run has a number (a median past the users, a ratio of it)."""
    numbers = re.sub(r"> #|(?<!\S)—(?!\S)", "#", re.sub(r"-?\d+(?:[.,]\d+)*", "#", line))
    return " ".join(re.sub(r"\b(OK|MISSED)\b", "V", numbers).split())


def _blocks(text: str, *, inside_them: bool = True) -> list[str]:
    """The lines of the doc's fenced blocks and Markdown tables (``inside_them`` False: the lines outside
    them)."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif (inside or line.startswith("|")) == inside_them:
            lines.append(line)
    return lines


def _prose(text: str) -> str:
    """The doc's text outside its fenced blocks, on one line."""
    return " ".join(" ".join(_blocks(text, inside_them=False)).split())


@pytest.mark.parametrize(("doc", "script", "args"), VERBATIM,
                         ids=[" ".join((script, *args[2:])) for _, script, args in VERBATIM])
def test_a_docs_tables_are_the_benchmarks_output(doc: str, script: str, args: tuple[str, ...]) -> None:
    # A short run's verdict (its exit status) is noise; what it prints is the format.
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args, "--seed", "1"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert "Traceback" not in run.stderr, run.stderr
    documented = [_shape(line) for line in _blocks((REPO / "docs" / doc).read_text(encoding="utf-8"))]
    tables: list[list[str]] = [[]]
    for line in run.stdout.splitlines():  # each table ("1. P(INSENSITIVE) …", or after a blank line)
        shape = _shape(line)
        if (not shape or re.match(r"#\. \S", shape)) and tables[-1]:
            tables.append([])
        if shape:
            tables[-1].append(shape)
    tables = [table for table in tables if table]
    assert tables
    for table in tables:  # each where the docs show it, its lines in the order the benchmark prints them
        assert table[0] in documented, f"docs/{doc} does not hold {script}'s table {table[0]!r}"
        at = documented.index(table[0])
        for line in table[1:]:
            assert line in documented[at:], f"docs/{doc} does not hold {script}'s line {line!r}"
            at = documented.index(line, at) + 1


def test_the_guard_docs_claims_are_the_tables_numbers() -> None:
    text = GUARD_DOC.read_text(encoding="utf-8")
    table = "\n".join(_blocks(text))
    prose = _prose(text)
    insensitive = re.search(r"largest false INSENSITIVE rate \(q ≤ 0\.2 and i ≤ 0\.05\), G = 3–100: "
                            r"([\d.]+) %", table)
    relative = re.search(r"largest false relative FAIL \(true R ≥ 0\.5\), G = 3–100: before ([\d.]+) %, "
                         r"shipped ([\d.]+) %", table)
    assert insensitive and relative
    assert f"the false INSENSITIVE rate stays ≤ {insensitive[1]} %" in prose
    assert f"false relative FAIL ≤ {relative[2]} %" in prose
    assert f"Fieller's bound at alpha itself reached {relative[1]} %" in prose
    # The interval's own docstring says the same numbers.
    intervals = " ".join((REPO / "pytest_robustexplain" / "stats" / "intervals.py").read_text(
        encoding="utf-8").split())
    assert f"Fieller's bound at alpha 5 % failed up to {relative[1]} % of runs" in intervals
    assert f"FIELLER_SHARE`` of its alpha: at most {relative[2]} %" in intervals


def test_the_faithfulness_docs_claims_are_the_tables_numbers() -> None:
    text = (REPO / "docs" / "faithfulness.md").read_text(encoding="utf-8")
    table = "\n".join(_blocks(text))
    prose = _prose(text)
    faithful = re.search(r"worst false PASS ([\d.]+) %, worst false FAIL ([\d.]+) %", table)
    misattributed = re.search(r"2\. max-misattributed-rate.*?worst false FAIL ([\d.]+) %", table, flags=re.S)
    assert faithful and misattributed
    assert f"a false PASS (the rate the judge reports below 0.8) in at most {faithful[1]} %" in prose
    assert f"a false FAIL (at or above 0.8) in at most {faithful[2]} %" in prose
    assert f"a false FAIL in at most {misattributed[1]} % of runs" in prose
    # The 92 %-faithful explainer's PASS rates at 20, 50 and 100 users: the last column of those rows.
    rows = {int(m[1]): float(m[2]) for m in re.finditer(r"^ +(20|50|100) .* ([\d.]+) / +[\d.]+ %$", table,
                                                         flags=re.M)}
    claim = (f"passes in {rows[20]:.0f} % of 20-user runs, {rows[50]:.0f} % of 50-user runs and "
             f"{rows[100]:.0f} % of 100-user runs")
    assert claim in prose


def test_the_error_rate_tables_claim_is_its_largest_cell() -> None:
    text = (REPO / "docs" / "statistics.md").read_text(encoding="utf-8")
    largest = re.search(r"largest error at a limit, every shape and G: ([\d.]+) %",
                        "\n".join(_blocks(text)))
    assert largest
    assert f"At its limit no rule that holds α errs more than {largest[1]} % in any cell" in _prose(text)
