"""The reusable Action's pull-request comment, rendered offline from saved reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.report.json_report import write_json
from pytest_robustexplain.report.pr_comment import MARKER, render_pr_comment
from pytest_robustexplain.results import (
    FAIL,
    PASS,
    GateCheck,
    GateResult,
    Interval,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)

HOSTILE = "![x](https://evil.invalid/p.png) <script>alert(1)</script>"


def _run(rho: float, outcome: str, message: str = "") -> RunResult:
    pairs = [PairResult(PairKey("m", f"u{u}", "i", kind, 1, 0), rho, rho, rho, rho, rho, "o", HOSTILE)
             for u in range(4) for kind in ("noise_injection", "category_drift")]
    check = GateCheck("combined", 0.5, Interval(rho, rho - 0.05, rho + 0.05, 8, 4), outcome)
    gates = [GateResult(f"t.py::test[{k}]", k, "m", Verdict(outcome, (check,), message=message))
             for k in ("noise_injection", "category_drift", "overall")]
    return RunResult(signature="sig", seed=1, models=[{"name": "m", "backend": "ollama"}], pairs=pairs,
                     gates=gates, package_version="0.1.0")


def test_the_comment_shows_baseline_change_and_delta() -> None:
    body = render_pr_comment(_run(0.62, FAIL, f"FAIL (mean rule): {HOSTILE}. More."), _run(0.71, PASS))
    assert body.startswith(MARKER + "\n")  # how the Action finds the comment to update
    assert "Robustness of recommendation explanations: **FAIL**" in body
    assert "| Overall ρ | 0.710 [" in body and "| 0.620 [" in body and "| -0.090 |" in body
    assert "t.py::test[category\\_drift] — **FAIL**" in body
    assert "<script>" not in body and "](" not in body and "https://evil" not in body


def test_an_undecided_run_is_not_announced_as_a_pass() -> None:
    undecided = _run(0.62, "INCONCLUSIVE", "INCONCLUSIVE (mean rule): the evidence cannot tell.")
    body = render_pr_comment(undecided)
    assert "Robustness of recommendation explanations: **INCONCLUSIVE**" in body


def test_the_comment_shows_relative_robustness_when_the_run_has_controls() -> None:
    run = _run(0.8, PASS)
    swaps = [PairResult(PairKey("m", f"u{u}", "i", "swap", 0, 0), *([0.4 + 0.05 * u] * 5), f"text {u}",
                        "other", changes={"donor": "d", "grounding": {"history": ["x"], "item": [],
                                                                      "unsupported": []}})
             for u in range(4)]
    from dataclasses import replace

    body = render_pr_comment(replace(run, pairs=[*run.pairs, *swaps]))
    row = next(line for line in body.splitlines() if line.startswith("| Relative robustness R"))
    assert "| — |" in row and "0." in row  # no baseline yet; this change's R with its interval


def test_without_a_baseline_the_comment_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write_json(_run(0.8, PASS), tmp_path / "r.json")
    assert cli.main(["report", "r.json", "--format", "pr-comment", "--baseline", "missing.json"]) == 0
    out = capsys.readouterr().out
    assert "**PASS**" in out and "No baseline yet" in out and "| Overall ρ | — |" in out
