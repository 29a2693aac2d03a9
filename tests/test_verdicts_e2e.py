"""Verdict modes, noise floor, baselines and model comparison end to end against the fake server.

Verdicts are read from the JSON report. That each is the same under ``-n 2`` is
``test_xdist_equivalence.py``'s: one session using all of them, run both ways.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import read_report

from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(models=("fake-model:latest", "other-model:latest")) as fake:
        yield fake


def _test_file(**marker: object) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in marker.items())
    return f"""
import pytest

@pytest.mark.robustness({args})
def test_gate(robustness):
    pass
"""


def _run(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str,
         model: str = "fake-model") -> pytest.RunResult:
    (pytester.path / "r.json").unlink(missing_ok=True)  # a run writing no report must not pass on an old one
    # The stability verdicts and baselines alone: the cross-user control's checks are test_guard_e2e's.
    return pytester.runpytest(f"--robustexplain-model={model}", f"--robustexplain-host={server.url}",
                              "--robustexplain-cache=off", "--robustexplain-json=r.json",
                              "--robustexplain-guard=off", *args)


def _report(pytester: pytest.Pytester) -> dict[str, Any]:
    """The JSON report of the last :func:`_run`."""
    return read_report(pytester)


def _verdicts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(outcome, mode) of every gated item, in report order."""
    return [(g["verdict"]["outcome"], g["verdict"]["mode"]) for g in doc["gates"]]


def _kinds(doc: dict[str, Any]) -> list[str]:
    return [p["key"]["kind"] for p in doc["pairs"]]


# ------------------------------------------------------------------------------------------ sequential
def _stable_sequential_pass(pytester: pytest.Pytester, server: FakeOllamaServer,
                            guard: str) -> dict[str, Any]:
    """The fake stable model's one-kind sequential gate under ``guard``: it passes; its report."""
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.3, decision="sequential",
                                   perturbations=["noise"]))
    _run(pytester, server, f"--robustexplain-guard={guard}").assert_outcomes(passed=1)
    doc = _report(pytester)
    assert _verdicts(doc) == [("PASS", "sequential")]
    return doc


def test_sequential_stable_passes_early_and_cancels_the_remaining_calls(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    """Under guard=warn no check that can only FAIL is enforced, so nothing holds ρ's early PASS."""
    server.latency = 0.01  # calls queue behind the concurrency limit, so there is something to cancel
    doc = _stable_sequential_pass(pytester, server, "warn")
    # 100 pairs and 20 cross-user controls planned; every seen user (5 pairs each) had its control scored
    # too, and the users after the decision cost nothing.
    kinds = _kinds(doc)
    n_pairs, n_swaps = kinds.count("noise_injection"), kinds.count("swap")
    assert len(kinds) == n_pairs + n_swaps and 0 < n_pairs == 5 * n_swaps < 100
    assert doc["calls"]["cancelled"] > 0
    fixed_calls = 1 + 20 + 100 + 20
    assert server.chat_calls < 0.75 * fixed_calls


def test_a_sequential_pass_waits_for_the_checks_that_can_only_fail(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    """Issue 59: under guard=fail the copy, grounding and relative checks pass unless shown to fail, and
    their fixed rules need every planned user to catch a clear failure as often as on the whole design — so
    a PASS measures them all (a FAIL still stops early: test_sequential_fragile_fails)."""
    doc = _stable_sequential_pass(pytester, server, "fail")
    kinds = _kinds(doc)
    assert kinds.count("noise_injection") == 100 and kinds.count("swap") == 20
    assert doc["calls"]["cancelled"] == 0


def test_sequential_fragile_fails(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.3, decision="sequential",
                                   perturbations=["noise"]))
    result = _run(pytester, server)
    result.assert_outcomes(failed=1)
    assert _verdicts(_report(pytester)) == [("FAIL", "sequential")]
    result.stdout.fnmatch_lines(["*robustness gate FAIL*sequential decision*"])


# ------------------------------------------------------------------------------------------ confident
def test_confident_mode_passes_a_clear_case(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.3, decision="confident",
                                   perturbations=["noise"], severities=[1, 5]))
    result = _run(pytester, server)
    result.assert_outcomes(passed=1)
    assert _verdicts(_report(pytester)) == [("PASS", "confident")]


@pytest.mark.parametrize(("policy", "expected"), [("fail", "failed"), ("warn", "passed"), ("pass", "passed")])
def test_borderline_case_is_inconclusive_and_the_policy_decides(
        pytester: pytest.Pytester, server: FakeOllamaServer, policy: str,
        expected: str) -> None:
    server.mode = "borderline"
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.0, decision="confident",
                                   inconclusive=policy, perturbations=["noise"], severities=[3], users=6))
    result = _run(pytester, server, "-rw")
    result.assert_outcomes(**{expected: 1})
    [gate] = _report(pytester)["gates"]
    assert (gate["verdict"]["outcome"], gate["verdict"]["mode"]) == ("INCONCLUSIVE", "confident")
    assert gate["verdict"]["users_needed"] > 6  # how many more users would likely decide it
    assert "users" in result.stdout.str()
    if policy == "warn":
        assert "RobustExplainWarning" in result.stdout.str()


# ------------------------------------------------------------------------------------------ noise floor
def test_noise_floor_is_measured_when_sampling(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(min_combined=0.3, min_metric=0.1, perturbations=["noise"],
                                   severities=[1], users=5))
    result = _run(pytester, server, "--robustexplain-temperature=0.7")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"Noise floor.*\s0\.\d{3}"])
    assert _kinds(_report(pytester)).count("control") == 5


# ------------------------------------------------------------------------------------------ baselines
def test_baseline_saved_then_matched_passes_and_a_regression_fails(
        pytester: pytest.Pytester, server: FakeOllamaServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = tmp_path / "baseline.json"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1, 3, 5], users=8))
    # With cross-user controls (their findings only warn): the baseline's R is compared too.
    watch = "--robustexplain-guard=warn"
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}", watch
         ).assert_outcomes(passed=1)
    assert len(json.loads(baseline.read_text(encoding="utf-8"))["pairs"]) == len(_report(pytester)["pairs"])
    same = _run(pytester, server, f"--robustexplain-baseline={baseline}", watch)
    same.assert_outcomes(passed=1)
    assert _verdicts(_report(pytester)) == [("PASS", "mean")]
    server.mode = "fragile"  # the new release's explanations are much less stable
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    worse = _run(pytester, server, f"--robustexplain-baseline={baseline}",
                 "--robustexplain-max-regression=0.02", watch)
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*Regression against baseline*"])
    # Every writer says FAIL with the reason, not only the item.
    worse.stdout.fnmatch_lines(["::error file=*::*Regression against baseline*"])
    gates = _report(pytester)["gates"]
    assert [g["verdict"]["outcome"] for g in gates] == ["FAIL"]
    assert "Regression against baseline" in gates[0]["verdict"]["message"]
    # R against each run's own cross-user control, beside the scores' rows (reported, not gated).
    assert re.search(r"Relative robustness R -?\d\.\d{3} → -?\d\.\d{3} \(Δ .*8 users; reported, not gated\)",
                     gates[0]["verdict"]["message"])
    assert "**Status: FAIL**" in (tmp_path / "summary.md").read_text(encoding="utf-8")
    quiet = _run(pytester, server, f"--robustexplain-baseline={baseline}", "-q")
    quiet.stdout.fnmatch_lines(["robustexplain: fake-model ρ * FAIL*"])


def test_baseline_reports_unmatched_pairs(pytester: pytest.Pytester, server: FakeOllamaServer,
                                          tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1, 5], users=6))
    # With cross-user controls (their findings only warn): the baseline's R is compared too.
    watch = "--robustexplain-guard=warn"
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}", watch
         ).assert_outcomes(passed=1)
    server.mode = "fragile"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1, 3], users=6))
    result = _run(pytester, server, f"--robustexplain-baseline={baseline}")
    result.assert_outcomes(failed=1)
    assert _verdicts(_report(pytester)) == [("FAIL", "mean")]
    result.stdout.fnmatch_lines(["*Unmatched pairs*only in the baseline*"])


def test_baseline_with_another_signature_is_refused(pytester: pytest.Pytester, server: FakeOllamaServer,
                                                    tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1], users=4))
    # With cross-user controls (their findings only warn): the baseline's R is compared too.
    watch = "--robustexplain-guard=warn"
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}", watch
         ).assert_outcomes(passed=1)
    result = _run(pytester, server, f"--robustexplain-baseline={baseline}",
                  "--robustexplain-weights=0.4,0.2,0.2,0.2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*different metric signature*", "*baseline: *w:.25/.25/.25/.25*"])


def test_unreadable_baseline_names_the_file(pytester: pytest.Pytester, server: FakeOllamaServer,
                                            tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{not json", encoding="utf-8")
    pytester.makepyfile(_test_file(min_combined=0.0, perturbations=["noise"], severities=[1], users=4))
    result = _run(pytester, server, f"--robustexplain-baseline={baseline}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert str(baseline) in result.stderr.str() and "Traceback" not in result.stderr.str()


# ------------------------------------------------------------------------------------------ comparison
def test_two_models_get_the_comparison_table(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(min_combined=0.3, min_metric=0.1, severities=[1, 5], users=6))
    result = _run(pytester, server, "-rA", model="fake-model,other-model")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["PASSED *::test_gate?fake-model-noise_injection?"])
    result.stdout.fnmatch_lines(["PASSED *::test_gate?other-model-overall?"])
    result.stdout.re_match_lines([r"Model comparison — other-model relative to fake-model", r"Overall ρ .*",
                                  r"p-values: .*Holm-corrected.*", r"Conclusion: .*"])
    doc = _report(pytester)
    assert sorted({(g["model"], g["verdict"]["outcome"]) for g in doc["gates"]}) == [
        ("fake-model", "PASS"), ("other-model", "PASS")]
    assert len(doc["gates"]) == 12 and [c["names"] for c in doc["comparisons"]] == [
        ["fake-model", "other-model"]]
