"""``robustexplain compare`` and the comparison reports: the conclusion never contradicts the table,
incomparable runs are refused, a regression exits 1."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_robustexplain import cli
from pytest_robustexplain.report.comparison import conclusion, model_comparisons, regression
from pytest_robustexplain.report.terminal import comparison_lines
from pytest_robustexplain.results import METRICS, PairKey, PairResult, RunResult
from pytest_robustexplain.stats import compare_models
from pytest_robustexplain.testing import FakeOllamaServer

# Two or three users cannot decide a gate (INCONCLUSIVE: their intervals span the scale); these tests are
# about comparing runs, so an undecided gate only warns.
SMALL = ("--backend", "template", "--perturbations", "noise,drift", "--severities", "1,5",
         "--progress", "off", "-q", "--inconclusive", "warn")


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.startswith("ROBUSTEXPLAIN_") or name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*argv: str) -> int:
    return cli.main(list(argv))


def pairs(model: str, values: list[list[float]], offsets: list[float]) -> list[PairResult]:
    """One pair per (user, value); each metric is the value shifted by its offset, clipped to [0, 1]."""
    out = []
    for u, user_values in enumerate(values):
        for i, v in enumerate(user_values):
            scores = {m: min(1.0, max(0.0, v + off)) for m, off in zip(METRICS, offsets, strict=True)}
            out.append(PairResult(PairKey(model, f"u{u}", f"i{i}", "noise_injection", 1, 0), combined=v,
                                  original="o", perturbed="p", **scores))
    return out


# ------------------------------------------------------------------------------ conclusion against table
SCORE = st.floats(0.0, 1.0, allow_nan=False).map(lambda v: round(v, 3))
USERS = st.lists(st.lists(SCORE, min_size=2, max_size=3), min_size=3, max_size=6)
OFFSETS = st.lists(st.floats(-0.3, 0.3, allow_nan=False), min_size=4, max_size=4)


def table_deltas(lines: list[str]) -> dict[str, str]:
    """Row label → the Δ cell of the text table (the column after the two intervals)."""
    out = {}
    for line in lines[2:7]:
        label = line[:17].strip()
        match = re.search(r"\]\s+(\S+ %|n/a)\s", line[17:])
        assert match, line
        out[label.lower()] = match.group(1)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=USERS, shift=st.floats(-0.5, 0.5, allow_nan=False), noise=st.lists(SCORE, min_size=18, max_size=18),
       offsets=OFFSETS, alpha=st.sampled_from([0.01, 0.5, 0.99]))
def test_the_conclusion_quotes_the_table_and_names_the_side_its_sign_favours(
        a: list[list[float]], shift: float, noise: list[float], offsets: list[float], alpha: float) -> None:
    it = iter(noise)
    b = [[min(1.0, max(0.0, v + shift + (next(it) - 0.5) / 5)) for v in user] for user in a]
    comparison = compare_models(pairs("x", a, offsets), pairs("y", b, offsets[::-1]), names=("x", "y"),
                                alpha=alpha)
    lines = comparison_lines(comparison, 200)
    deltas = table_deltas(lines)
    said = conclusion(comparison)
    quoted = re.findall(r"(overall ρ|semantic|keyword|structural|length) of y (\S+ %|n/a) relative to x",
                        said)
    for label, delta in quoted:  # every Δ in the sentence is the table's Δ of that row
        assert deltas["overall ρ" if label == "overall ρ" else label] == delta, (said, deltas)
    winner = re.match(r"(x|y) is more robust", said)
    if winner:
        overall = deltas["overall ρ"]
        assert quoted and quoted[0][0] == "overall ρ"
        assert overall == "n/a" or overall.startswith("+" if winner.group(1) == "y" else "−"), (said, overall)
        assert all(d == "n/a" or d[0] == overall[0] for _, d in quoted), said  # gains on the winner's side
    else:
        assert said.startswith("No significant difference"), said


def test_regression_is_a_significant_drop_or_one_beyond_the_margin() -> None:
    a = [[0.8, 0.82], [0.78, 0.8], [0.81, 0.79], [0.8, 0.8]]
    b = [[v - 0.1 - 0.02 * (u % 2) for v in user] for u, user in enumerate(a)]  # mean drop 0.110
    drop = compare_models(pairs("x", a, [0] * 4), pairs("y", b, [0] * 4), names=("x", "y"), alpha=0.05)
    assert regression(drop, significant=False, max_drop=None) is None
    assert "significant" in (regression(drop, significant=True, max_drop=None) or "")
    assert regression(drop, significant=False, max_drop=0.2) is None
    assert "fell by 0.110 (0.800 → 0.690), more than --max-regression 0.05" in (
        regression(drop, significant=False, max_drop=0.05) or "")
    gain = compare_models(pairs("x", b, [0] * 4), pairs("y", a, [0] * 4), names=("x", "y"), alpha=0.05)
    assert regression(gain, significant=True, max_drop=0.0) is None


def test_a_session_compares_only_models_that_ran_the_same_cases() -> None:
    same = pairs("x", [[0.5, 0.6], [0.7, 0.6]], [0] * 4) + pairs("y", [[0.4, 0.6], [0.5, 0.7]], [0] * 4)
    run_ = RunResult(package_version="t", signature="s", seed=1, started_at="", finished_at="", settings={},
                     models={}, pairs=same, gates=[])
    assert [c.names for c in model_comparisons(run_)] == [("x", "y")]
    apart = [p for p in same if p.key.model == "x"] + [
        PairResult(PairKey("y", "v9", f"j{i}", "noise_injection", 1, 0), combined=0.5, original="o",
                   perturbed="p", **dict.fromkeys(METRICS, 0.5)) for i in range(4)]
    assert model_comparisons(RunResult(package_version="t", signature="s", seed=1, started_at="",
                                       finished_at="", settings={}, models={}, pairs=apart, gates=[])) == []


def test_relative_robustness_sits_beside_the_holm_family_without_changing_it() -> None:
    a = [[0.8, 0.75, 0.82], [0.7, 0.72, 0.69], [0.9, 0.88, 0.91], [0.6, 0.62, 0.58]]
    b = [[v - 0.01 for v in row] for row in a]
    left, right = pairs("x", a, [0] * 4), pairs("y", b, [0] * 4)
    plain = compare_models(left, right, names=("x", "y"), alpha=0.05)
    high = {f"u{u}": (0.3 + 0.01 * u, 0.4) for u in range(4)}   # R ≈ 0.79
    low = {f"u{u}": (0.05 + 0.01 * u, 0.4) for u in range(4)}   # R ≈ 0.16
    with_r = compare_models(left, right, names=("x", "y"), alpha=0.05, relative=(high, low))
    assert with_r.rows == plain.rows  # the paper's rows and their Holm correction are untouched
    r = with_r.relative
    assert r is not None and r.label == "Relative R" and r.p_holm is None and r.significant
    assert r.mean_a.mean == pytest.approx(sum(n for n, _ in high.values()) / 1.6)
    assert r.mean_b.mean == pytest.approx(sum(n for n, _ in low.values()) / 1.6)
    lines = comparison_lines(with_r, 140)
    row = next(line for line in lines if line.startswith("Relative R"))
    assert "−0.625" in row and "†" in row  # Δ as a difference of R, its own p marked
    text = "\n".join(lines)
    assert "outside the Holm family" in text
    assert "Relative robustness R differs: x is higher (0.787 → 0.163, Δ −0.625" in conclusion(with_r)
    assert "Relative robustness" not in conclusion(plain)
    same = compare_models(left, right, names=("x", "y"), alpha=0.05, relative=(high, high))
    assert same.relative is not None and same.relative.p_value == 1.0 and not same.relative.significant


# ------------------------------------------------------------------------------------------- the command
def test_compare_refuses_runs_sharing_few_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("run", *SMALL, "--users", "2", "--json", "two.json") == 0
    assert run("run", *SMALL, "--users", "5", "--json", "five.json") == 0
    capsys.readouterr()
    assert run("compare", "two.json", "five.json") == 2
    err = capsys.readouterr().err
    assert ("share only 8 of their pairs (40 % of the larger run; 0 only in A, 12 only in B), below 80 %"
            in err)
    assert "Traceback" not in err


def test_compare_refuses_another_max_history_and_warns_on_generation_settings(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run("run", *SMALL, "--users", "2", "--json", "a.json") == 0
    assert run("run", *SMALL, "--users", "2", "--json", "short.json", "--max-history", "5") == 0
    assert run("run", *SMALL, "--users", "2", "--json", "warm.json", "--temperature", "0.7") == 0
    capsys.readouterr()
    assert run("compare", "a.json", "short.json") == 2
    assert "a.json has max_history 50 and short.json max_history 5" in capsys.readouterr().err
    assert run("compare", "a.json", "warm.json") == 0
    out, err = capsys.readouterr()
    assert "warning: the runs differ in temperature (0.0 vs 0.7)" in err
    assert "WARNING: the runs differ in temperature (0.0 vs 0.7)" in out


def test_compare_exits_1_on_regression(server: FakeOllamaServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake = ("run", "--model", "fake-model", "--host", server.url, *SMALL[2:], "--users", "3",
            "--cache", "off")
    assert run(*fake, "--json", "stable.json") == 0
    server.mode = "fragile"
    assert run(*fake, "--json", "fragile.json") == 1
    capsys.readouterr()
    assert run("compare", "stable.json", "fragile.json", "--unit", "pair") == 0  # no flag: a report only
    # Both runs have cross-user controls: R of each, on the users both measured, beside the table.
    assert re.search(r"^Relative R\s+-?\d\.\d{3} \[.*\].*†", capsys.readouterr().out, re.MULTILINE)
    assert run("compare", "stable.json", "fragile.json", "--unit", "pair", "--fail-on-regression") == 1
    out, err = capsys.readouterr()
    assert "Regression: fake-model (fragile) regressed against fake-model (stable)" in out
    assert "FAIL — fake-model (fragile) regressed" in err
    assert run("compare", "stable.json", "fragile.json", "--max-regression", "0.02") == 1
    assert run("compare", "stable.json", "fragile.json", "--max-regression", "1") == 0
    assert run("compare", "fragile.json", "stable.json", "--fail-on-regression", "--max-regression", "0") == 0
    assert run("compare", "stable.json", "fragile.json", "--max-regression", "-1") == 2


def test_a_change_too_wide_for_the_delta_column_is_still_apart_from_its_p_value() -> None:
    """Found by the property above (a shrunk case, kept as an example): over a base near 0 the change is
    "+12580.6 %", ten characters, and the Δ column of ten ran it into the p column ("+12580.6 %<0.001")."""
    a = [[0.0, 0.0], [0.0, 0.0], [0.0, 0.031]]
    b = [[min(1.0, v + 0.5 + 0.1 * (i % 2)) for i, v in enumerate(user)] for user in a]
    comparison = compare_models(pairs("x", a, [0.0, 0.0, 0.0, 0.25]), pairs("y", b, [0.25, 0.0, 0.0, 0.0]),
                                names=("x", "y"), alpha=0.01)
    lines = comparison_lines(comparison, 200)
    assert any(len(cell) >= 10 for cell in table_deltas(lines).values()), lines


def test_an_explainer_that_ignores_the_user_is_never_ranked_more_robust_nor_kept_as_baseline(
        server: FakeOllamaServer, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 59: compare of an honest explainer and one that returns the same text for every user concluded
    "lazy is more robust" (its ρ is 1), and lazy's recommendation read "keep this run as the baseline". A
    failed gate is never ranked, and what it failed is said, in every format; a failed run is never
    proposed as the baseline."""
    fake = ("run", "--model", "fake-model", "--host", server.url, "--perturbations", "noise", "--severities",
            "1,5", "--progress", "off", "-q", "--users", "10", "--cache", "off")
    assert run(*fake, "--json", "honest.json") == 0
    server.mode = "history-blind"
    assert run(*fake, "--json", "lazy.json") == 1
    capsys.readouterr()
    for fmt in ("terminal", "markdown"):
        assert run("compare", "honest.json", "lazy.json", "--format", fmt) == 0
        said = " ".join(capsys.readouterr().out.split())
        assert "is more robust" not in said, said
        assert "Not ranked: fake-model (lazy)'s gate failed (sensitivity" in said, said
        assert "only fake-model (honest)'s passed" in said
    for name, kept in (("honest.json", True), ("lazy.json", False)):
        for fmt in ("terminal", "markdown", "html"):
            assert run("report", name, "--format", fmt) == 0
            said = " ".join(capsys.readouterr().out.split())
            assert ("keep this run as the baseline" in said) is kept, (name, fmt)
            assert ("did not pass (sensitivity" in said) is not kept, (name, fmt)
