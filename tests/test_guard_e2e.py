"""The guard end to end: pytest inside pytest, against the fake server, serial and under xdist."""

from __future__ import annotations

import csv
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import read_report, run_fake

from pytest_robustexplain import cli
from pytest_robustexplain.testing import FakeOllamaServer, compose_reply, parse_prompt

pytest_plugins = ["pytester"]


CONSTANT = """
import pytest

@pytest.fixture
def explainer():
    def explain(history, item):
        return f"We recommend {item.title} because it is a popular, well-reviewed choice with great value."
    return explain
"""

ITEM_ONLY = """
import pytest

@pytest.fixture
def explainer():
    def explain(history, item):
        details = ", ".join(f"{k} {v}" for k, v in sorted(item.features.items()))
        return (f"{item.title} is a {item.category} item ({details}). It is well made, sensibly priced "
                f"and a strong choice in {item.category}.")
    return explain
"""

HISTORY_AWARE = """
import pytest
from collections import Counter

@pytest.fixture
def explainer():
    def explain(history, item):
        top = Counter(i.category for i in history if i.category).most_common(2)
        liked = [i.title for i in history if i.title and (i.rating or 0) >= 4][-2:]
        return (f"You often choose {' and '.join(c for c, _ in top) or 'many things'}; you liked "
                f"{' and '.join(liked) or 'several items'}. {item.title} fits that taste.")
    return explain
"""


def _test_file(**marker: object) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in marker.items())
    return f"""
import pytest

@pytest.mark.robustness({args})
def test_gate(robustness):
    g = robustness.guard
    print("GUARD", robustness.kind, robustness.verdict.outcome, g.outcome if g else None,
          len(robustness.swaps))
"""



def _fake(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str) -> pytest.RunResult:
    return run_fake(pytester, server, "-s", "-p", "no:randomly", *args)


# ------------------------------------------------------------------------------ the verdict, both ways
def test_a_constant_explainer_is_insensitive_with_the_reason_and_an_example(
        pytester: pytest.Pytester, xdist_args: tuple[str, ...]) -> None:
    xdist = xdist_args
    pytester.makeconftest(CONSTANT)
    pytester.makepyfile(_test_file(users=6, severities=[1, 5]))
    result = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-json=r.json", *xdist)
    result.assert_outcomes(failed=6)
    # Said in full by the first item (of each xdist worker), named by the others.
    result.stdout.fnmatch_lines([
        "*robustness gate INSENSITIVE for *",
        "*INSENSITIVE: the explanations barely depend on the user's history: another user's interactions "
        "give ρ 1.000 * against 1.000 for the perturbed history*6 of 6 users get an "
        "explanation that barely depends on their history*",
        "*example: item * explained for user * and, under the same identity, for user *'s interactions · "
        "ρ 1.000 (word for word the same)*",
        "*Gate verdict (all checks)*INSENSITIVE (explanations barely depend on the user's history)*",
    ])
    doc = read_report(pytester)
    assert {g["verdict"]["outcome"] for g in doc["gates"]} == {"INSENSITIVE"}
    [aggregates] = doc["aggregates"].values()  # one model: the conftest's function
    assert aggregates["sensitivity"]["identical"] == 6


def test_the_history_blind_fake_model_fails_and_the_stable_one_passes(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(users=5, severities=[2, 4]))
    server.mode = "history-blind"
    blind = _fake(pytester, server, "--robustexplain-cache=off")
    blind.assert_outcomes(failed=6)
    blind.stdout.fnmatch_lines(["*INSENSITIVE*barely depend on the user's history*"])
    server.mode = "stable"
    stable = _fake(pytester, server, "--robustexplain-cache=off")
    stable.assert_outcomes(passed=6)


def test_the_openai_compatible_backend_gets_the_same_controls(pytester: pytest.Pytester,
                                                              server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(users=4, severities=[3], perturbations=["noise"]))
    server.mode = "history-blind"
    args = ("--robustexplain-backend=openai", f"--robustexplain-host={server.url}/v1",
            "--robustexplain-model=fake-model", "--robustexplain-cache=off")
    blind = pytester.runpytest(*args, "--robustexplain-json=openai.json")
    blind.assert_outcomes(failed=1)
    blind.stdout.fnmatch_lines(["*INSENSITIVE*barely depend on the user's history*"])
    ollama = _fake(pytester, server, "--robustexplain-cache=off", "--robustexplain-json=ollama.json")
    ollama.assert_outcomes(failed=1)
    assert _swaps(read_report(pytester, "openai.json")) == _swaps(read_report(pytester, "ollama.json"))


def test_an_item_only_explainer_fails_on_the_synthetic_set(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ITEM_ONLY)
    pytester.makepyfile(_test_file(users=6, severities=[3]))
    result = pytester.runpytest("-s", "--robustexplain-backend=callable")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["*INSENSITIVE*explanations barely depend on the user's history*"])


def test_history_aware_explainers_pass(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HISTORY_AWARE)
    pytester.makepyfile(_test_file(users=8, severities=[1, 3]))
    custom = pytester.runpytest("-s", "--robustexplain-backend=callable")
    custom.assert_outcomes(passed=6)
    assert "GUARD overall PASS PASS 8" in custom.stdout.str()
    (pytester.path / "conftest.py").unlink()
    template = pytester.runpytest("-s", "--robustexplain-backend=template")
    template.assert_outcomes(passed=6)
    assert "GUARD overall PASS PASS 8" in template.stdout.str()


def test_guard_warn_passes_with_a_warning_and_off_gives_the_old_verdicts(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONSTANT)
    pytester.makepyfile(_test_file(users=4, severities=[1, 5], perturbations=["noise", "drift"]))
    warned = pytester.runpytest("-s", "-rw", "--robustexplain-backend=callable", "--robustexplain-guard=warn")
    warned.assert_outcomes(passed=3, warnings=3)
    warned.stdout.fnmatch_lines(["*RobustExplainWarning*Guard warning: the explanations barely depend*"])
    assert "GUARD overall PASS INSENSITIVE 4" in warned.stdout.str()
    off = pytester.runpytest("-s", "--robustexplain-backend=callable", "--robustexplain-guard=off",
                             "--robustexplain-json=off.json")
    off.assert_outcomes(passed=3)
    assert "GUARD overall PASS None 0" in off.stdout.str()
    doc = read_report(pytester, "off.json")
    assert not [p for p in doc["pairs"] if p["key"]["kind"] == "swap"]
    [aggregates] = doc["aggregates"].values()
    assert aggregates["sensitivity"] is None


def test_the_marker_sets_the_guard_per_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONSTANT)
    pytester.makepyfile(_test_file(users=4, severities=[1], perturbations=["noise"], guard="off"))
    pytester.runpytest("--robustexplain-backend=callable").assert_outcomes(passed=1)
    pytester.makepyfile(_test_file(users=4, severities=[1], perturbations=["noise"], guard="warn"))
    warned = pytester.runpytest("--robustexplain-backend=callable")
    warned.assert_outcomes(passed=1)
    warned.stdout.fnmatch_lines(["*Guard warning: the explanations barely depend on the user's history*"])
    # Every limit opened per test: S = 0 is not below a 0 minimum, identical texts are allowed, the
    # grounding gate asks for nothing, and "no evidence" passes under inconclusive="pass".
    pytester.makepyfile(_test_file(users=4, severities=[1], perturbations=["noise"], min_sensitivity=0.0,
                                   max_identical_share=1.0, min_history_reference=0.0, inconclusive="pass"))
    pytester.runpytest("--robustexplain-backend=callable").assert_outcomes(passed=1)


def test_the_grounding_gate_fails_explanations_that_never_mention_the_history(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ITEM_ONLY)
    # Six users: with four, even 0 of 4 is not confidently below 0.5 (exact upper bound 0.53).
    pytester.makepyfile(_test_file(users=6, severities=[1], perturbations=["noise"], guard="off",
                                   min_history_reference=0.5))
    result = pytester.runpytest("--robustexplain-backend=callable")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Grounding FAIL: 0 % of explanations refer to something from the user's "
                                 "history*confidently outside the limits (history references needed ≥ 0.5*"])
    # guard="off": the controls ran for the grounding gate alone; the item-only texts' other findings
    # (INSENSITIVE, no relative robustness) are neither enforced nor warned about.
    out = result.stdout.str()
    assert "robustness gate FAIL for noise_injection" in out and "INSENSITIVE:" not in out
    assert "Guard warning" not in out


# ------------------------------------------------------------------------------- calls, cache, xdist
def _swaps(doc: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    return {(p["key"]["user_id"], p["key"]["item_id"], p["changes"]["donor"])
            for p in doc["pairs"] if p["key"]["kind"] == "swap"}


def test_controls_cost_one_call_per_user_and_a_warm_rerun_costs_none(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_test_file(users=5, severities=[1, 3, 5]))
    cold = _fake(pytester, server, "--robustexplain-json=cold.json")
    cold.assert_outcomes(passed=6)
    doc = read_report(pytester, "cold.json")
    pairs = [p for p in doc["pairs"] if p["key"]["kind"] != "swap"]
    # The warm-up, one original per user, every pair and one cross-user control per user.
    assert server.chat_calls == 1 + 5 + len(pairs) + 5
    assert doc["calls"]["made"] == 5 + len(pairs) + 5
    before = server.chat_calls
    warm = _fake(pytester, server, "--robustexplain-json=warm.json")
    warm.assert_outcomes(passed=6)
    assert server.chat_calls == before  # everything, the controls included, came from the cache
    assert _swaps(read_report(pytester, "warm.json")) == _swaps(doc)


def test_the_dry_run_shows_the_controls(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--backend", "template", "--users", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 cross-user controls (guard)" in out
    assert cli.main(["run", "--backend", "template", "--users", "4", "--dry-run", "--guard", "off"]) == 0
    assert "cross-user" not in capsys.readouterr().out


def test_the_cli_gives_the_same_insensitive_verdict(server: FakeOllamaServer, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    server.mode = "history-blind"
    code = cli.main(["run", "--model", "fake-model", "--host", server.url, "--users", "4",
                     "--severities", "1", "--progress", "off", "--cache", "off", "--json", "r.json"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_GATE_FAILED
    assert "FAIL — 1 of 1 model failed the gate: fake-model (all 6 items INSENSITIVE)" in out
    assert "Sensitivity (cross-user control" in out


# ------------------------------------------------------------------------------ calibration
def _long_history_blind(prompt: str, options: Mapping[str, Any]) -> str:
    """A model that stops reading long prompts (as SmolLM2 did): item-only text past 40 history lines."""
    mode = "history-blind" if len(parse_prompt(prompt).history) > 40 else "stable"
    return compose_reply(prompt, options, mode=mode)


def test_calibration_a_minority_of_ignored_users_is_listed_not_failed(pytester: pytest.Pytester) -> None:
    """The issue's calibration, reproduced: a model that ignores the history of some users has a positive
    mean Δ; the guard names those users (and their identical texts) without failing the gate while they
    are few, and fails it when they are most. Two of eight is above the default share (0.2), which no mean
    S rescues since issue 44 (INCONCLUSIVE, test_guard.py): this team allows 0.3."""
    with FakeOllamaServer(reply=_long_history_blind) as server:
        pytester.makepyfile(_test_file(users=8, severities=[1, 3, 5], max_insensitive_share=0.3))
        result = _fake(pytester, server, "--robustexplain-cache=off", "--robustexplain-json=r.json")
        result.assert_outcomes(passed=6)
    doc = read_report(pytester)
    sens = doc["aggregates"]["fake-model"]["sensitivity"]
    swaps = [p for p in doc["pairs"] if p["key"]["kind"] == "swap"]
    # Ignored whatever the history: both the user's and the donor's prompt are past the cut-off.
    blind = sorted(p["key"]["user_id"] for p in swaps
                   if p["history_length"] > 40 and p["changes"]["donor_history_length"] > 40)
    assert 1 <= len(blind) <= 2  # the bundled set: 2 of its first 8 users have over 40 interactions
    assert sens["insensitive_users"] == blind and sens["identical"] == len(blind)
    # The model's summary reads the run's settings (the default share 0.2), not this test's marker.
    assert sens["delta"]["mean"] > 0.05 and sens["outcome"] == "INCONCLUSIVE"


def _movielens(root: Path, users: int = 24) -> Path:
    """A small MovieLens-format directory (made up, same layout as ml-latest-small)."""
    rng = random.Random(5)
    genres = ["Action", "Comedy", "Drama", "Horror", "Romance", "Sci-Fi", "Animation", "Thriller"]
    root.mkdir()
    with (root / "movies.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["movieId", "title", "genres"])
        for m in range(1, 121):
            w.writerow([m, f"Movie Number {m} ({1980 + m % 40})", "|".join(rng.sample(genres, 2))])
    with (root / "ratings.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["userId", "movieId", "rating", "timestamp"])
        for u in range(1, users + 1):
            for k, m in enumerate(rng.sample(range(1, 121), rng.randint(12, 40))):
                w.writerow([u, m, rng.choice([2.5, 3.0, 4.0, 4.5, 5.0]), 1_500_000_000 + 3600 * k])
    return root


def test_on_a_movielens_directory(pytester: pytest.Pytester) -> None:
    ml = _movielens(pytester.path / "ml")
    pytester.makepyfile(_test_file(users=6, severities=[1, 3]))
    template = pytester.runpytest("-s", "--robustexplain-backend=template", f"--robustexplain-dataset={ml}",
                                  "--robustexplain-json=t.json")
    template.assert_outcomes(passed=6)
    donors = {d for _, _, d in _swaps(read_report(pytester, "t.json"))}
    assert len(donors) >= 4  # drawn from all 24 users, not only the 6 evaluated
    pytester.makeconftest(CONSTANT)
    constant = pytester.runpytest("--robustexplain-backend=callable", f"--robustexplain-dataset={ml}")
    constant.assert_outcomes(failed=6)
    constant.stdout.fnmatch_lines(["*INSENSITIVE*barely depend on the user's history*"])


# ------------------------------------------------------------------------------ every writer agrees
HOSTILE_CONSTANT = """
import pytest

@pytest.fixture
def explainer():
    def explain(history, item):
        return "<script>alert(1)</script> ![pixel](https://evil.invalid/t.png) | We recommend it."
    return explain
"""


def test_every_writer_says_insensitive_and_escapes_the_example(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makeconftest(HOSTILE_CONSTANT)
    pytester.makepyfile(_test_file(users=4, severities=[2]))
    result = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-json=r.json",
                                "--robustexplain-html=r.html", "--robustexplain-markdown=r.md",
                                "--junitxml=junit.xml")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["::error file=*title=robustness gate INSENSITIVE (overall)::*INSENSITIVE*"])
    quiet = pytester.runpytest("-q", "--robustexplain-backend=callable")
    quiet.stdout.fnmatch_lines(["robustexplain: *explain ρ 1.000 * INSENSITIVE*"])
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "**Status: INSENSITIVE**" in markdown and "**Sensitivity**" in markdown
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert summary.read_text(encoding="utf-8").startswith(markdown)  # the quiet rerun appended its own
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert '<span class="INSENSITIVE">INSENSITIVE</span>' in page and "Sensitivity" in page
    assert '<div class="banner banner-INSENSITIVE" role="status">' in page  # the verdict first
    assert "<script>alert" not in page
    doc = read_report(pytester)
    assert {g["verdict"]["outcome"] for g in doc["gates"]} == {"INSENSITIVE"}
    junit = (pytester.path / "junit.xml").read_text(encoding="utf-8")
    assert 'name="robustexplain_outcome" value="INSENSITIVE"' in junit
    assert 'name="robustexplain_insensitive_users" value="4/4"' in junit
    assert cli.main(["report", str(pytester.path / "r.json"), "-q"]) == 0
