"""The guard's error rates in docs/guard.md are the benchmark's output (issue 63, item 4): its tables are what
``benchmarks/bench_guard.py`` prints today — every line of a short run has the shape of a line there, each
table's lines in the order printed (numbers aside) — and the rates the prose claims are the ones those
tables show, so a claim cannot drift from the code that measures it without a test failing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GUARD_DOC = REPO / "docs" / "guard.md"


def _shape(line: str) -> str:
    """A line without its numbers, its OK/MISSED and its column widths: what a short run shares with it."""
    return " ".join(re.sub(r"\b(OK|MISSED)\b", "V", re.sub(r"-?\d+(?:[.,]\d+)*", "#", line)).split())


def _blocks(text: str) -> list[str]:
    return [line for block in re.findall(r"```\n(.*?)```", text, re.S) for line in block.splitlines()]


def test_the_guard_docs_tables_are_the_benchmarks_output() -> None:
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_guard.py"), "--runs", "20",
                          "--seed", "1"], capture_output=True, text=True, timeout=600, check=True)
    documented = [_shape(line) for line in _blocks(GUARD_DOC.read_text(encoding="utf-8"))]
    printed = [_shape(line) for line in run.stdout.splitlines() if line.strip()]
    assert printed
    tables: list[list[str]] = []
    for line in printed:  # each numbered table ("1. P(INSENSITIVE) …") with its lines
        if re.match(r"#\. \S", line) or not tables:
            tables.append([])
        tables[-1].append(line)
    for table in tables:  # each where the docs show it, its lines in the order the benchmark prints them
        assert table[0] in documented, f"docs/guard.md does not hold bench_guard.py's table {table[0]!r}"
        at = documented.index(table[0])
        for line in table[1:]:
            assert line in documented[at:], f"docs/guard.md does not hold bench_guard.py's line {line!r}"
            at = documented.index(line, at) + 1


def test_the_guard_docs_claims_are_the_tables_numbers() -> None:
    text = GUARD_DOC.read_text(encoding="utf-8")
    table = "\n".join(_blocks(text))
    prose = " ".join(re.sub(r"```\n.*?```", "", text, flags=re.S).split())
    insensitive = re.search(r"largest false INSENSITIVE rate \(q ≤ 0\.2 and i ≤ 0\.05\), G = 3–100: "
                            r"([\d.]+) %", table)
    relative = re.search(r"largest false relative FAIL \(true R ≥ 0\.5\), G = 3–100: before [\d.]+ %, "
                         r"shipped ([\d.]+) %", table)
    assert insensitive and relative
    assert f"the false INSENSITIVE rate stays ≤ {insensitive[1]} %" in prose
    assert f"the false relative FAIL ≤ {relative[1]} %" in prose
    # The interval's own docstring says the same number.
    intervals = (REPO / "pytest_robustexplain" / "stats" / "intervals.py").read_text(encoding="utf-8")
    assert f"Fieller's at most {relative[1]} %" in " ".join(intervals.split())
