"""Words a person reads right (issue 43, item 4): each of these failed on the main of 2026-12-02.

- a failed item names every check that failed it, in the pytest message and the HTML row alike (the message
  named ρ alone while the HTML banner led with relative robustness);
- both doors say where they wrote the report files;
- a baseline regression is said as a drop with its interval and whether it is shown, never as a bare
  one-sided p (tests/test_stats.py holds the sentence itself; here it reaches the item's message).
"""

from __future__ import annotations

import re

import pytest
from helpers import marked, read_report, run_fake

from pytest_robustexplain import cli
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ROBUSTEXPLAIN_*, OLLAMA_HOST or GitHub Actions variables from the shell the suite started in."""
    import os

    for name in list(os.environ):
        if name.startswith(("ROBUSTEXPLAIN_", "GITHUB_")) or name == "OLLAMA_HOST":
            monkeypatch.delenv(name)


@pytest.fixture
def borderline() -> object:
    """Explanations that reword half their text at each change (ρ ≈ 0.49) and barely name the history:
    stability, relative robustness and grounding fail together."""
    with FakeOllamaServer(mode="borderline") as fake:
        yield fake


def test_a_failed_item_names_every_check_that_failed_it(pytester: pytest.Pytester, clean: None,
                                                        borderline: FakeOllamaServer) -> None:
    pytester.makepyfile(marked('perturbations=["noise"], users=20'))
    result = run_fake(pytester, borderline, "--robustexplain-json=r.json", "--robustexplain-html=r.html")
    result.assert_outcomes(failed=1)
    findings = read_report(pytester)["gates"][0]["verdict"]["findings"]
    failed = [name for name, f in findings.items() if f["outcome"] == "FAIL"]
    assert failed[0] == "stability" and {"relative", "grounding"} <= set(failed)
    text = " ".join(result.outlines)
    said = re.search(r"combined \S+ \[[^]]+\] is below its threshold 0\.5.*?\(worst pairs", text)
    assert said, text[-3000:]
    for name in failed[1:]:  # the pytest message, beside the thresholds: "also relative FAIL 0.07 …"
        assert f"{name} FAIL " in said.group(0)
    row = pytester.path.joinpath("r.html").read_text(encoding="utf-8")
    assert all(f"{name} FAIL " in row for name in failed[1:])  # the HTML row's "why" too


def test_the_guard_row_names_its_checks_as_the_findings_do_and_is_never_cut(
        pytester: pytest.Pytester, clean: None, borderline: FakeOllamaServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The short report's guard row was one line cut at the width ("PASS · ρ_swap 0.327 [0.219, 0.435] ·
    S 0.673 [0…"): its outcome was the sensitivity's alone, beside an item failed on relative robustness."""
    monkeypatch.setenv("COLUMNS", "80")
    pytester.makepyfile(marked('perturbations=["noise"], users=20'))
    result = run_fake(pytester, borderline, "--robustexplain-json=r.json", "--robustexplain-guard=warn")
    result.assert_outcomes(failed=1)  # on ρ: the guard's checks only warn
    at = next(i for i, line in enumerate(result.outlines) if line.startswith("Guard "))
    rows = [result.outlines[at]]
    while result.outlines[at + len(rows)].startswith(" " * 32):
        rows.append(result.outlines[at + len(rows)])
    row = " ".join(" ".join(rows).split())
    assert not any(line.endswith("…") for line in rows) and all(len(line) <= 80 for line in rows)
    findings = read_report(pytester)["gates"][0]["verdict"]["findings"]
    for name in ("sensitivity", "relative", "copying", "grounding"):
        assert f"{name} {findings[name]['outcome']} " in row, row
    assert "relative FAIL " in row and row.endswith("guard: warn, reported, not enforced"), row


def test_both_doors_say_where_they_wrote_the_reports(pytester: pytest.Pytester, clean: None,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(marked("users=3, severities=[1]"))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=out/r.json",
                                "--robustexplain-html=r.html")
    json_path, html_path = pytester.path / "out" / "r.json", pytester.path / "r.html"
    result.stdout.fnmatch_lines([f"robustexplain: reports written: JSON {json_path} · HTML {html_path}"])
    assert json_path.is_file() and html_path.is_file()

    code = cli.main(["run", "--backend", "template", "--users", "3", "--severities", "1", "-q",
                     "--json", str(pytester.path / "run.json"), "--junitxml", str(pytester.path / "run.xml")])
    out = capsys.readouterr().out.splitlines()
    assert code in (0, 1)
    where = pytester.path
    assert f"robustexplain: reports written: JSON {where / 'run.json'} · JUnit {where / 'run.xml'}" in out
    assert out[-1].startswith("robustexplain: ")  # the verdict line stays last


def test_a_report_that_could_not_be_written_is_not_said_as_written(pytester: pytest.Pytester,
                                                                   clean: None) -> None:
    pytester.path.joinpath("blocked").write_text("a file where a directory should be", encoding="utf-8")
    pytester.makepyfile(marked("users=3, severities=[1]"))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=blocked/r.json",
                                "--robustexplain-html=r.html")
    result.stdout.fnmatch_lines([f"robustexplain: reports written: HTML {pytester.path / 'r.html'}",
                                 "robustexplain: ERROR: --robustexplain-json=*"])
    assert "JSON" not in next(line for line in result.outlines if "reports written" in line)


def test_every_header_names_the_dataset(pytester: pytest.Pytester, clean: None) -> None:
    """A MovieLens run's terminal header said "model … · seed 42 · 20 users" and nothing of MovieLens."""
    from gaming import write_movielens

    write_movielens(pytester.path / "ml-small", users=12)
    pytester.makepyfile(marked("users=3, severities=[1]"))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-dataset=ml-small",
                                "--robustexplain-html=r.html", "--robustexplain-markdown=r.md")
    said = "dataset movielens:ml-small · seed 42 · 3 users"
    result.stdout.fnmatch_lines([f"robustexplain — model template * · {said} · *"])
    assert said in pytester.path.joinpath("r.md").read_text(encoding="utf-8")
    assert said in pytester.path.joinpath("r.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_fake_server_is_labelled_as_one_even_under_a_real_models_name(
        pytester: pytest.Pytester, clean: None, backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Run as --model qwen2.5:7b, the fake server was reported as "qwen2.5:7b (sha256:…, 7.0B)" and set beside
    the paper's Qwen2.5-7B by --tables paper."""
    with FakeOllamaServer(models=("qwen2.5:7b",)) as fake:
        host = fake.url + ("/v1" if backend == "openai" else "")
        pytester.makepyfile(marked('perturbations=["noise"], users=3, severities=[1]'))
        result = pytester.runpytest(f"--robustexplain-backend={backend}", f"--robustexplain-host={host}",
                                    "--robustexplain-model=qwen2.5:7b", "--robustexplain-json=r.json")
    label = "[[]fake model server — not a language model]"  # fnmatch: [[] is a literal [
    result.stdout.fnmatch_lines([f"robustexplain — model qwen2.5:7b*{label}*"])
    [model] = read_report(pytester)["models"]
    assert model["is_llm"] is False and model["extra"]["kind"] == "fake model server"
    capsys.readouterr()
    assert cli.main(["report", str(pytester.path / "r.json"), "--tables", "paper"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert ("Not a language model, so not comparable with the paper's models: qwen2.5:7b (" in said
            and "[fake model server — not a language model]." in said)


def test_an_item_failed_on_its_thresholds_still_says_how_it_compares_with_the_baseline(
        pytester: pytest.Pytester, clean: None) -> None:
    """With the marker's thresholds failing and the baseline matched, the word "baseline" appeared nowhere."""
    with FakeOllamaServer() as fake:
        args = (f"--robustexplain-host={fake.url}", "--robustexplain-model=fake-model",
                "--robustexplain-json=r.json")
        pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 3], users=6'))
        pytester.runpytest(*args, "--robustexplain-save-baseline=base.json").assert_outcomes(passed=1)
        pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 3], users=6, min_combined=0.99'))
        same = pytester.runpytest(*args, "--robustexplain-baseline=base.json")
    same.assert_outcomes(failed=1)
    same.stdout.fnmatch_lines(["*is below its threshold 0.99*; against the baseline: no regression beyond "
                               "the margin 0.02*"])
    message = read_report(pytester)["gates"][0]["verdict"]["message"]
    assert re.search(r"Against baseline \S*base\.json: No regression beyond the margin 0\.02", message)


def test_a_per_kind_threshold_stands_beside_its_row(pytester: pytest.Pytester, clean: None) -> None:
    """A per-kind gate's terminal row showed its outcome without the threshold it was held to."""
    pytester.makepyfile(marked('users=4, severities=[1], perturbations=["noise", "drift"], '
                               'per_kind={"category_drift": {"min_combined": 0.4}}'))
    result = pytester.runpytest("--robustexplain-backend=template", "-v")
    rows = {line.split()[0]: line for line in result.outlines if line.startswith("  ") and "[" in line
            and line.split()[0] in ("noise_injection", "category_drift")}
    assert "≥ 0.40 " in rows["category_drift"], result.outlines
    assert "≥" not in rows["noise_injection"]  # the overall's threshold: said once, on the overall's row


def test_a_marker_that_overrides_a_given_value_says_so_once(pytester: pytest.Pytester, clean: None) -> None:
    """--robustexplain-min-combined=0.3 silently lost to the marker's 0.5 (the documented precedence)."""
    pytester.makepyfile(marked('users=3, severities=[1], perturbations=["noise", "drift"], min_combined=0.5'))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-min-combined=0.3",
                                "--robustexplain-users=4")
    said = [line for line in result.outlines if "its marker sets" in line]
    assert said == ["robustexplain: test_a_marker_that_overrides_a_given_value_says_so_once.py::test_gate: "
                    "its marker sets users=3 over --robustexplain-users=4; min_combined=0.5 over "
                    "--robustexplain-min-combined=0.3 (the marker wins)"]  # once for its three items
    plain = pytester.runpytest("--robustexplain-backend=template")  # nothing given, nothing overridden
    assert not [line for line in plain.outlines if "its marker sets" in line]
    # Under xdist each worker collects every test and its output is not shown: the controller says the
    # note once, at the end of the summary.
    xdist = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-min-combined=0.3",
                               "--robustexplain-users=4", "-n", "2")
    assert xdist.parseoutcomes() == result.parseoutcomes()
    assert [line for line in xdist.outlines if "its marker sets" in line] == said


def test_a_report_only_finding_says_it_is_one(pytester: pytest.Pytester, clean: None) -> None:
    """A passing report listed "Misattributed: user U052 cites … (disliked)" with no sign it gates nothing."""
    pytester.makepyfile(marked('users=20, severities=[1], perturbations=["noise"]'))
    result = pytester.runpytest("--robustexplain-backend=template", "-v")
    result.assert_outcomes(passed=1)
    [row] = [line for line in result.outlines if "Cites a dislike as a reason to like" in line]
    start = result.outlines.index(row)
    said = " ".join(" ".join(result.outlines[start: start + 5]).split())  # the row, wrapped under its label
    assert "reported, not gated (max-misattributed-rate gates it)" in said
    gated = pytester.runpytest("--robustexplain-backend=template", "-v",
                               "--robustexplain-max-misattributed-rate=1")
    assert "reported, not gated" not in gated.stdout.str()
    assert "each item gated on its own slice (at most 1)" in " ".join(gated.stdout.str().split())


def test_a_plan_too_large_to_run_is_one_usage_error(pytester: pytest.Pytester, clean: None) -> None:
    """repeats=10000 under pytest: refused at collection, before any perturbation is computed."""
    pytester.makepyfile(marked('repeats=10000, perturbations=["noise"]'))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-dry-run")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *test_gate*: its gate would plan up to 1,400,020 model calls*"])


def test_the_dry_run_counts_the_calls_the_cache_already_answers(pytester: pytest.Pytester,
                                                                 clean: None) -> None:
    """--dry-run said "at most 540 model calls" when 340 of them were cached: a cost nobody would pay."""
    with FakeOllamaServer() as fake:
        args = (f"--robustexplain-host={fake.url}", "--robustexplain-model=fake-model")
        pytester.makepyfile(marked('perturbations=["noise", "drift"], severities=[1, 3]'))
        first = pytester.runpytest(*args, "--robustexplain-users=4")
        first.assert_outcomes(passed=3)
        counted = re.search(r"model calls: (\d+) made", first.stdout.str())
        assert counted
        made = int(counted.group(1))
        before = fake.chat_calls
        dry = pytester.runpytest(*args, "--robustexplain-users=8", "--robustexplain-dry-run")
        assert fake.chat_calls == before  # no model call to count them
    said = re.search(r"at most (\d+) model calls in all \(.*; (\d+) already in the response cache, so at "
                     r"most (\d+) to make\)", dry.stdout.str())
    assert said, dry.stdout.str()
    total, cached, left = (int(n) for n in said.groups())
    assert cached == made and left == total - made and total > made > 0
