"""One outcome in every writer: for each way a gate can fail — a threshold, a regression against the baseline,
the guard (INSENSITIVE), a security gate, generation failures — the terminal report, the -q line, the item's
failure (JUnit), the JSON gates, the Markdown report and step summary, the ``::error`` annotations and the
HTML banner all say the failing outcome with its reason."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

MARKED = """
import pytest

@pytest.mark.robustness({args})
def test_gate(robustness):
    pass
"""
CONSTANT = """
import pytest

@pytest.fixture
def explainer():
    return lambda history, item: "We recommend it: a popular, well-reviewed choice."
"""
WRITERS = ("--robustexplain-json=r.json", "--robustexplain-html=r.html", "--robustexplain-markdown=r.md",
           "--junitxml=junit.xml")


@dataclass(frozen=True)
class Case:
    marker: str  # the marker's arguments
    outcome: str
    reason: str  # words of the reason every writer must carry
    prepare: Callable[[pytest.Pytester, FakeOllamaServer], tuple[str, ...]]  # extra options, after setup
    served: bool = True  # explained by the fake Ollama server (else by the conftest's explainer)


def _fragile(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    server.mode = "fragile"
    return ()


def _regressed(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    baseline = pytester.path / "baseline.json"
    saved = pytester.runpytest(*_model(server), f"--robustexplain-save-baseline={baseline}")
    saved.assert_outcomes(passed=1)
    server.mode = "fragile"
    return (f"--robustexplain-baseline={baseline}",)


def _constant(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    pytester.makeconftest(CONSTANT)
    return ("--robustexplain-backend=template", "--robustexplain-cache=off")


def _copycat(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    server.mode = "copycat"
    return ()


def _stable(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    server.mode = "stable"
    return ()


def _gullible(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    server.mode = "gullible"
    return ()


def _empty_replies(pytester: pytest.Pytester, server: FakeOllamaServer) -> tuple[str, ...]:
    server.empty_next(1000)  # every explanation comes back empty: each pair scores 0
    return ("--robustexplain-retries=0",)


CASES = {
    # One reason a case: the threshold and regression cases leave out the cross-user control, whose
    # relative-robustness check would fail the fragile model first.
    "threshold": Case('perturbations=["noise"], users=4, severities=[2], min_combined=0.9, guard="off"',
                      "FAIL", "below its threshold", _fragile),
    "regression": Case('perturbations=["noise"], users=4, severities=[2], min_combined=0, min_metric=0, '
                       'guard="off"', "FAIL", "Regression against baseline", _regressed),
    "relative": Case('perturbations=["noise"], users=6, severities=[2], min_combined=0, min_metric=0',
                     "FAIL", "Relative FAIL", _fragile),
    "copy": Case('perturbations=["noise"], users=6, severities=[2], min_combined=0, min_metric=0',
                 "FAIL", "copy their prompt back", _copycat),
    "no evidence": Case('perturbations=["noise"], users=2, severities=[2], min_combined=0, min_metric=0',
                        "INCONCLUSIVE", "no evidence that the explanations depend", _stable),
    "guard": Case('perturbations=["noise"], users=4, severities=[2], min_combined=0, min_metric=0',
                  "INSENSITIVE", "another user", _constant, served=False),
    "security": Case('perturbations=["prompt_injection"], users=5, severities=[3], guard="off"', "FAIL",
                     "prompt injection succeeded", _gullible),
    "generation failures": Case('perturbations=["noise"], users=3, severities=[2], guard="off"', "FAIL",
                                "Every reply was empty", _empty_replies),
}


def _model(server: FakeOllamaServer) -> tuple[str, ...]:
    return ("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
            "--robustexplain-cache=off")


@pytest.mark.parametrize("name", list(CASES))
def test_every_writer_says_the_failing_outcome_with_its_reason(
        name: str, pytester: pytest.Pytester, server: FakeOllamaServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    pytester.makepyfile(test_g=MARKED.format(args=case.marker))
    extra = case.prepare(pytester, server)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    options = (*_model(server), *extra) if case.served else extra
    result = pytester.runpytest(*options, *WRITERS)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert case.reason in " ".join(out.split()), out  # the item's failure, wrapped or not
    _check_terminal_and_annotation(out, case)
    _check_files(pytester.path, case)
    assert f"**Status: {case.outcome}**" in summary.read_text(encoding="utf-8")
    quiet = pytester.runpytest(*options, "-q")
    quiet.stdout.re_match_lines([rf"robustexplain: \S+ ρ .* {case.outcome} · "])


def _check_terminal_and_annotation(out: str, case: Case) -> None:
    report = out.split("robustness report", 1)[1]
    assert f"  {case.outcome} " in report or f"   {case.outcome}" in report, report
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert errors and all(f"robustness gate {case.outcome}" in line for line in errors)
    assert any(case.reason in line for line in errors), errors


def _check_files(path: Path, case: Case) -> None:
    doc = json.loads((path / "r.json").read_text(encoding="utf-8"))
    assert {g["verdict"]["outcome"] for g in doc["gates"]} == {case.outcome}
    assert all(case.reason in g["verdict"]["message"] for g in doc["gates"])
    junit = (path / "junit.xml").read_text(encoding="utf-8")
    assert f'name="robustexplain_outcome" value="{case.outcome}"' in junit
    assert "<failure" in junit and html.escape(case.reason, quote=True) in junit
    markdown = (path / "r.md").read_text(encoding="utf-8")
    assert f"**Status: {case.outcome}**" in markdown
    page = (path / "r.html").read_text(encoding="utf-8")
    banner = page.split('role="status">', 1)[1].split("</div>", 1)[0]
    assert f'class="{case.outcome}"' in banner and html.escape(case.reason, quote=False) in banner, banner


def test_a_regression_beside_other_failures_is_named_by_every_writer(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 59: a run that regressed against its baseline and failed other checks too: the step summary's
    line for the item was the first check's prose, cut, and never said "regression". Every writer names
    every check that failed the item (``Verdict.failing``), the regression among them."""
    from pytest_robustexplain import cli

    pytester.makepyfile(test_g=MARKED.format(args='perturbations=["noise"], users=6, severities=[2], '
                                                  'min_combined=0, min_metric=0'))
    extra = _regressed(pytester, server)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(*_model(server), *extra, *WRITERS)
    result.assert_outcomes(failed=1)
    (gate,) = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["gates"]
    failing = [name for name, f in gate["verdict"]["findings"].items()
               if f["enforced"] and f["outcome"] in ("FAIL", "INSENSITIVE")]
    assert "regression" in failing and len(failing) > 1, failing
    monkeypatch.chdir(pytester.path)
    assert cli.main(["report", "r.json", "--format", "pr-comment", "-o", "pr.md"]) == 0
    writers = {"terminal": result.stdout.str(), "step summary": summary.read_text(encoding="utf-8"),
               "markdown": (pytester.path / "r.md").read_text(encoding="utf-8"),
               "html": (pytester.path / "r.html").read_text(encoding="utf-8"),
               "junit": (pytester.path / "junit.xml").read_text(encoding="utf-8"),
               "pr comment": (pytester.path / "pr.md").read_text(encoding="utf-8")}
    for writer, text in writers.items():  # as a name or a label ("Grounding FAIL")
        for check in failing:
            assert check in text.lower(), (writer, check)
    # The step summary's line for the failed item names them all before the first one's reason.
    line = next(line for line in writers["step summary"].splitlines() if "regression" in line and
                all(check in line for check in failing))
    assert line.index("regression") < line.index("Relative FAIL"), line
