"""Every gate beyond stability set from the command line of pytest, as a CI job sets it without touching the
tests: the guard's limits, the attack kinds' limits, the preference flip, the judge's model, host, backend and
rate, the regression allowance — each with a fake-server mode that passes it and one that does not.
"""

from __future__ import annotations

import pytest
from helpers import marked, read_report, run_fake

from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]


ONE_KIND = 'perturbations=["noise"], users=6'


def _run(pytester: pytest.Pytester, mode: str, *args: str, keywords: str = ONE_KIND
         ) -> tuple[pytest.RunResult, dict[str, object]]:
    """One inner run of a one-kind gate against a fresh fake server in ``mode``; the result and the gate's
    verdict from the JSON report."""
    pytester.makepyfile(test_gate=marked(keywords))
    with FakeOllamaServer(mode=mode) as server:
        result = run_fake(pytester, server, "--robustexplain-json=r.json", "--robustexplain-cache=off", *args)
    gates = read_report(pytester)["gates"]
    verdict: dict[str, object] = gates[-1]["verdict"]
    return result, verdict


# --------------------------------------------------------------------------------- the guard
def test_guard_warn_from_the_command_line_passes_a_blind_model_with_a_warning(
        pytester: pytest.Pytester) -> None:
    result, verdict = _run(pytester, "history-blind", "--robustexplain-guard=warn", "-rw")
    result.assert_outcomes(passed=1, warnings=1)
    guard = verdict["details"]["guard"]
    assert verdict["outcome"] == "PASS" and isinstance(guard, dict) and guard["outcome"] == "INSENSITIVE"
    result.stdout.fnmatch_lines(["*RobustExplainWarning*barely depend on the user's history*"])


def test_an_explainer_that_ignores_the_user_is_said_in_full_once_and_referred_to_by_the_other_items(
        pytester: pytest.Pytester) -> None:
    """One root cause, three INSENSITIVE items: the first item's message says the finding in full (the
    guard's reason and the cases explained for two users), the others name that item; -v says each in full."""
    result, _ = _run(pytester, "history-blind", "-p", "no:randomly",
                     keywords='perturbations=["noise", "drift"], severities=[1, 5], users=6')
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    first = "test_gate.py::test_gate[noise_injection]"
    assert out.count(f"the same finding as {first}, said in full there") == 2
    assert out.count("barely depend on the user's history") >= 1
    verbose, _ = _run(pytester, "history-blind", "-p", "no:randomly", "-v",
                      keywords='perturbations=["noise", "drift"], severities=[1, 5], users=6')
    assert "said in full there" not in verbose.stdout.str()


def test_guard_off_from_the_command_line_leaves_the_stability_verdict(pytester: pytest.Pytester) -> None:
    result, verdict = _run(pytester, "history-blind", "--robustexplain-guard=off")
    assert verdict["outcome"] == "PASS" and verdict["details"].get("guard") is None
    result.assert_outcomes(passed=1)


def test_a_strict_min_relative_fails_a_model_the_default_passes(pytester: pytest.Pytester) -> None:
    passed, _ = _run(pytester, "stable")
    passed.assert_outcomes(passed=1)
    failed, verdict = _run(pytester, "stable", "--robustexplain-min-relative=0.99")
    failed.assert_outcomes(failed=1)
    assert "Relative FAIL" in str(verdict["message"])


def test_a_strict_history_reference_rate_is_read_from_the_command_line(pytester: pytest.Pytester) -> None:
    result, verdict = _run(pytester, "history-blind", "--robustexplain-min-history-reference=0.99",
                           "--robustexplain-min-sensitivity=0.0", "--robustexplain-max-insensitive-share=1.0",
                           "--robustexplain-max-identical-share=1.0")
    result.assert_outcomes(failed=1)
    assert "Grounding FAIL" in str(verdict["message"])


def test_a_copying_model_passes_only_a_copy_limit_of_one(pytester: pytest.Pytester) -> None:
    failed, _ = _run(pytester, "copycat")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*Copy FAIL*"])
    _, verdict = _run(pytester, "copycat", "--robustexplain-max-copy-rate=1.0",
                      "--robustexplain-min-history-reference=0.0", "--robustexplain-max-unsupported-rate=1.0")
    assert "Copy FAIL" not in str(verdict["message"])


# --------------------------------------------------------------------------------- attacks
def test_attack_kinds_and_their_limits_from_the_command_line(pytester: pytest.Pytester) -> None:
    keywords = "users=5, severities=[3]"
    gullible, verdict = _run(pytester, "gullible", "--robustexplain-perturbations=prompt_injection",
                             keywords=keywords)
    gullible.assert_outcomes(failed=1)
    assert "prompt injection succeeded" in str(verdict["message"])
    _, verdict = _run(pytester, "gullible", "--robustexplain-perturbations=prompt_injection",
                      "--robustexplain-max-injection-rate=1.0", keywords=keywords)
    assert "prompt injection succeeded" not in str(verdict["message"])


def test_a_robust_model_passes_the_shilling_kind(pytester: pytest.Pytester) -> None:
    result, verdict = _run(pytester, "robust", "--robustexplain-perturbations=shilling",
                           "--robustexplain-max-hijack-rate=0", keywords="users=5, severities=[3]")
    result.assert_outcomes(passed=1)
    assert verdict["outcome"] == "PASS"


# --------------------------------------------------------------------------------- the preference flip
def test_the_flip_and_its_sensitivity_from_the_command_line(pytester: pytest.Pytester) -> None:
    keywords = "users=8"
    aware, verdict = _run(pytester, "rating-aware", "--robustexplain-perturbations=preference_flip",
                          keywords=keywords)
    aware.assert_outcomes(passed=1)
    demanding, verdict = _run(pytester, "rating-aware", "--robustexplain-perturbations=preference_flip",
                              "--robustexplain-min-flip-sensitivity=0.9", keywords=keywords)
    demanding.assert_outcomes(failed=1)
    flip = verdict["details"]["flip"]
    assert isinstance(flip, dict) and flip["outcome"] == "FAIL"


# --------------------------------------------------------------------------------- the judge
def test_the_judge_can_live_on_another_host(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=marked(ONE_KIND))
    with FakeOllamaServer(mode="stable") as explainer, FakeOllamaServer(mode="stable") as judge:
        result = run_fake(pytester, explainer, "--robustexplain-judge-model=fake-model",
                          f"--robustexplain-judge-host={judge.url}", "--robustexplain-json=r.json")
        result.assert_outcomes(passed=1)
        assert explainer.judge_calls == 0 and judge.judge_calls == 12
        assert judge.chat_calls <= judge.judge_calls + 1  # nothing else but the judge's warm-up


def test_an_openai_compatible_judge(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=marked(ONE_KIND))
    with FakeOllamaServer(mode="stable") as explainer, FakeOllamaServer(mode="stable") as judge:
        result = run_fake(pytester, explainer, "--robustexplain-judge-model=fake-model",
                          "--robustexplain-judge-backend=openai",
                          f"--robustexplain-judge-host={judge.url}/v1")
        result.assert_outcomes(passed=1)
        assert judge.judge_calls == 12
        assert all(r["path"].startswith("/v1/") for r in judge.requests)


def test_a_faithful_rate_from_the_command_line_fails_a_history_dump(pytester: pytest.Pytester) -> None:
    result, verdict = _run(pytester, "copycat", "--robustexplain-judge-model=fake-model",
                           "--robustexplain-min-faithful-rate=0.9", "--robustexplain-guard=off")
    result.assert_outcomes(failed=1)
    faithfulness = verdict["details"]["faithfulness"]
    assert isinstance(faithfulness, dict) and faithfulness["outcome"] == "FAIL"


# --------------------------------------------------------------------------------- the regression allowance
def test_a_generous_regression_allowance_tolerates_a_worse_release(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(test_gate=marked(ONE_KIND + ", min_combined=0.0, min_metric=0.0"))
    common = ("--robustexplain-guard=off", "--robustexplain-cache=off")
    run_fake(pytester, server, "--robustexplain-save-baseline=base.json", *common).assert_outcomes(passed=1)
    server.mode = "fragile"
    strict = run_fake(pytester, server, "--robustexplain-baseline=base.json", *common)
    strict.assert_outcomes(failed=1)
    generous = run_fake(pytester, server, "--robustexplain-baseline=base.json",
                        "--robustexplain-max-regression=0.9", *common)
    generous.assert_outcomes(passed=1)


def test_inconclusive_pass_from_the_command_line_passes_an_undecided_gate(pytester: pytest.Pytester) -> None:
    # Two users under the confident rule: ρ's interval straddles its threshold (under the mean rule its
    # mean decides). The guard is off: its checks decide this explainer at two users (Fieller's bound on R).
    keywords = 'perturbations=["noise"], users=2, decision="confident", guard="off"'
    failed, verdict = _run(pytester, "borderline", keywords=keywords)
    assert verdict["outcome"] == "INCONCLUSIVE"
    failed.assert_outcomes(failed=1)
    passed, _ = _run(pytester, "borderline", "--robustexplain-inconclusive=pass", keywords=keywords)
    passed.assert_outcomes(passed=1)
