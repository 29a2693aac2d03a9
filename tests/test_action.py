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
    gates = [GateResult(f"t.py::test[{k}]", k, "m", Verdict.of(outcome, (check,), message=message))
             for k in ("noise_injection", "category_drift", "overall")]
    return RunResult(signature="sig", seed=1, models=[{"name": "m", "backend": "ollama"}], pairs=pairs,
                     gates=gates, package_version="0.1.0")


def test_the_comment_shows_baseline_change_and_delta() -> None:
    body = render_pr_comment(_run(0.62, FAIL, f"FAIL (mean rule): {HOSTILE}. More."), _run(0.71, PASS))
    assert body.startswith(MARKER + "\n")  # how the Action finds the comment to update
    assert "Robustness of recommendation explanations: **FAIL**" in body
    assert "| Overall ρ | 0.710 [" in body and "| 0.620 [" in body and "| -0.090 (worse) |" in body
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
    # Without --baseline (a CLI user, not the Action) there is nothing to say about a baseline.
    assert cli.main(["report", "r.json", "--format", "pr-comment"]) == 0
    assert "No baseline" not in capsys.readouterr().out


def test_a_change_for_the_better_says_so() -> None:
    body = render_pr_comment(_run(0.75, PASS), _run(0.70, PASS))
    assert "| +0.050 (better) |" in body
    assert "| ±0.000 |" in render_pr_comment(_run(0.70, PASS), _run(0.70, PASS))


def test_mentions_and_issue_references_from_test_ids_and_replies_notify_nobody() -> None:
    body = render_pr_comment(_run(0.62, FAIL, "FAIL: cc @octocat, see #12 and @org/team."))
    assert "@octocat" not in body and "#12" not in body and "@org" not in body
    assert "@\u200boctocat" in body and "#\u200b12" in body


def _many_failures(n: int) -> RunResult:
    run = _run(0.3, FAIL, "FAIL (mean rule): " + "a long reason " * 40)
    gates = [GateResult(f"tests/test_{i}.py::test_gate[noise_injection]", "noise_injection", "m",
                        run.gates[0].verdict) for i in range(n)]
    from dataclasses import replace

    return replace(run, gates=gates)


def test_a_comment_over_githubs_limit_lists_fewer_items_then_is_cut_with_a_link() -> None:
    from pytest_robustexplain.report.pr_comment import MAX_COMMENT_CHARS

    url = "https://github.com/o/r/actions/runs/42"
    listed = render_pr_comment(_many_failures(20), details_url=url)
    assert len(listed) < MAX_COMMENT_CHARS and "<details>" in listed  # small: every item listed
    counted = render_pr_comment(_many_failures(200), details_url=url)
    assert len(counted) <= MAX_COMMENT_CHARS
    assert f"200 items did not pass: listed in [the workflow run's artifacts]({url})." in counted
    cut = render_pr_comment(_many_failures(20), details_url=url, max_chars=300)
    assert len(cut) <= 300 and cut.startswith(MARKER)
    assert cut.rstrip().endswith(f"the full report is in [the workflow run's artifacts]({url})._")
    # A URL that is not plain (from anywhere but the Action's own run) is not linked.
    odd = render_pr_comment(_many_failures(20), details_url="javascript:alert(1)", max_chars=300)
    assert "javascript" not in odd and odd.rstrip().endswith("the uploaded robustness reports._")


def _with_swaps(run: RunResult, rho_swap: float) -> RunResult:
    from dataclasses import replace

    swaps = [PairResult(PairKey("m", f"u{u}", "i", "swap", 0, 0), *([rho_swap + 0.01 * u] * 5), f"text {u}",
                        "other", changes={"donor": "d", "grounding": {"history": ["x"], "item": [],
                                                                      "unsupported": []}})
             for u in range(4)]
    return replace(run, pairs=[*run.pairs, *swaps])


def _sensitivity_cell(body: str) -> str:
    row = next(line for line in body.splitlines() if line.startswith("| Sensitivity S"))
    return row.rsplit("|", 2)[-2].strip()


def test_a_sensitivity_that_rises_as_the_model_collapses_is_not_called_better() -> None:
    before = _with_swaps(_run(0.80, PASS), 0.60)
    # Collapsed: its explanations change for everyone, the user's own perturbed history included.
    collapsed = _with_swaps(_run(0.30, FAIL, "FAIL (mean rule): low."), 0.10)
    cell = _sensitivity_cell(render_pr_comment(collapsed, before))
    assert cell.startswith("+0.500 (not better: ρ fell 0.500") and "better)" not in cell
    # The same rise with ρ held is more user-specific explanations: better.
    sharper = _with_swaps(_run(0.80, PASS), 0.10)
    assert _sensitivity_cell(render_pr_comment(sharper, before)) == "+0.500 (better)"
    # A fall in S is worse whatever ρ did.
    assert _sensitivity_cell(render_pr_comment(before, sharper)) == "-0.500 (worse)"
