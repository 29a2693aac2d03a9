"""Verdict modes, noise floor, baselines and model comparison end to end against the fake server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    print("OUTCOME", robustness.verdict.outcome, robustness.verdict.mode, len(robustness.pairs),
          robustness.cancelled)
"""


def _run(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str,
         model: str = "fake-model") -> pytest.RunResult:
    return pytester.runpytest("-s", f"--robustexplain-model={model}", f"--robustexplain-host={server.url}",
                              "--robustexplain-cache=off", *args)


def _outcomes(result: pytest.RunResult) -> list[tuple[str, str, int, int]]:
    found = re.findall(r"OUTCOME (\w+) (\w+) (\d+) (\d+)", result.stdout.str())
    return [(o, m, int(n), int(c)) for o, m, n, c in found]


# ------------------------------------------------------------------------------------------ sequential
def test_sequential_stable_passes_early_and_cancels_the_remaining_calls(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    server.latency = 0.01  # calls queue behind the concurrency limit, so there is something to cancel
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.3, decision="sequential",
                                   perturbations=["noise"]))
    result = _run(pytester, server)
    result.assert_outcomes(passed=1)
    [(outcome, mode, n_pairs, cancelled)] = _outcomes(result)
    assert (outcome, mode) == ("PASS", "sequential")
    # 100 pairs and 20 cross-user controls planned; a seen user (5 pairs each) had its control scored too.
    assert cancelled > 0 and n_pairs + n_pairs // 5 + cancelled == 100 + 20
    fixed_calls = 1 + 20 + 100 + 20
    assert server.chat_calls < 0.75 * fixed_calls


def test_sequential_fragile_fails(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.3, decision="sequential",
                                   perturbations=["noise"]))
    result = _run(pytester, server)
    result.assert_outcomes(failed=1)
    assert _outcomes(result) == [] or _outcomes(result)[0][0] == "FAIL"
    result.stdout.fnmatch_lines(["*robustness gate FAIL*sequential decision*"])


# ------------------------------------------------------------------------------------------ confident
def test_confident_mode_passes_a_clear_case(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.3, decision="confident",
                                   perturbations=["noise"], severities=[1, 5]))
    result = _run(pytester, server)
    result.assert_outcomes(passed=1)
    assert _outcomes(result)[0][:2] == ("PASS", "confident")


@pytest.mark.parametrize(("policy", "expected"), [("fail", "failed"), ("warn", "passed"), ("pass", "passed")])
def test_borderline_case_is_inconclusive_and_the_policy_decides(
        pytester: pytest.Pytester, server: FakeOllamaServer, policy: str, expected: str) -> None:
    server.mode = "borderline"
    pytester.makepyfile(_test_file(min_combined=0.5, min_metric=0.0, decision="confident",
                                   inconclusive=policy, perturbations=["noise"], severities=[3], users=6))
    result = _run(pytester, server, "-rw")
    result.assert_outcomes(**{expected: 1})
    assert _outcomes(result)[0][:2] == ("INCONCLUSIVE", "confident")
    out = result.stdout.str()
    assert "users" in out  # how many more users would likely decide it
    if policy == "warn":
        assert "RobustExplainWarning" in out


# ------------------------------------------------------------------------------------------ noise floor
def test_noise_floor_is_measured_when_sampling(pytester: pytest.Pytester, server: FakeOllamaServer,
                                               tmp_path: Path) -> None:
    pytester.makepyfile(_test_file(min_combined=0.3, min_metric=0.1, perturbations=["noise"],
                                   severities=[1], users=5))
    report = tmp_path / "r.json"
    result = _run(pytester, server, "--robustexplain-temperature=0.7", f"--robustexplain-json={report}")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"Noise floor.*\s0\.\d{3}"])
    pairs = json.loads(report.read_text(encoding="utf-8"))["pairs"]
    assert sum(p["key"]["kind"] == "control" for p in pairs) == 5


# ------------------------------------------------------------------------------------------ baselines
def test_baseline_saved_then_matched_passes_and_a_regression_fails(
        pytester: pytest.Pytester, server: FakeOllamaServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = tmp_path / "baseline.json"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1, 3, 5], users=8))
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}").assert_outcomes(passed=1)
    assert baseline.is_file()
    same = _run(pytester, server, f"--robustexplain-baseline={baseline}")
    same.assert_outcomes(passed=1)
    server.mode = "fragile"  # the new release's explanations are much less stable
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    worse = _run(pytester, server, f"--robustexplain-baseline={baseline}",
                 "--robustexplain-max-regression=0.02", f"--robustexplain-json={tmp_path / 'worse.json'}")
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*Regression against baseline*"])
    # Every writer says FAIL with the reason, not only the item.
    worse.stdout.fnmatch_lines(["::error file=*::*Regression against baseline*"])
    gates = json.loads((tmp_path / "worse.json").read_text(encoding="utf-8"))["gates"]
    assert [g["verdict"]["outcome"] for g in gates] == ["FAIL"]
    assert "Regression against baseline" in gates[0]["verdict"]["message"]
    assert "**Status: FAIL**" in (tmp_path / "summary.md").read_text(encoding="utf-8")
    quiet = _run(pytester, server, f"--robustexplain-baseline={baseline}", "-q")
    quiet.stdout.fnmatch_lines(["robustexplain: fake-model ρ * FAIL*"])


def test_baseline_reports_unmatched_pairs(pytester: pytest.Pytester, server: FakeOllamaServer,
                                          tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1, 5], users=6))
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}").assert_outcomes(passed=1)
    server.mode = "fragile"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1, 3], users=6))
    result = _run(pytester, server, f"--robustexplain-baseline={baseline}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Unmatched pairs*only in the baseline*"])


def test_baseline_with_another_signature_is_refused(pytester: pytest.Pytester, server: FakeOllamaServer,
                                                    tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    pytester.makepyfile(_test_file(min_combined=0.0, min_metric=0.0, perturbations=["noise"],
                                   severities=[1], users=4))
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}").assert_outcomes(passed=1)
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
    result.stdout.fnmatch_lines(["PASSED *::test_gate?fake-model-noise_injection?",
                                 "PASSED *::test_gate?other-model-overall?"])
    result.stdout.re_match_lines([r"Model comparison — other-model relative to fake-model", r"Overall ρ .*",
                                  r"p-values: .*Holm-corrected.*", r"Conclusion: .*"])
