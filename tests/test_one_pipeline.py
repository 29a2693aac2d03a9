"""`pytest` and `robustexplain run` on the same settings: the same items, verdicts and numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

BARE = """
import pytest

@pytest.mark.robustness
def test_default(robustness):
    pass
"""



def _verdicts(doc: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """slice -> (outcome, every check's quantity/threshold/mean/bounds, the guard's outcome and S)."""
    out = {}
    for gate in doc["gates"]:
        verdict = gate["verdict"]
        checks = tuple((c["quantity"], c["threshold"], c["outcome"], round(c["interval"]["mean"], 12),
                        round(c["interval"]["low"], 12), round(c["interval"]["high"], 12))
                       for c in verdict["details"].get("stability", ()))
        guard = verdict["details"].get("guard")
        out[gate["slice"]] = (verdict["outcome"], checks, guard and guard["outcome"],
                              guard and round(guard["sensitivity"]["mean"], 12))
    return out


def _pairs(doc: dict[str, Any]) -> dict[tuple[Any, ...], float]:
    return {tuple(p["key"][k] for k in ("user_id", "item_id", "kind", "severity", "repeat")): p["combined"]
            for p in doc["pairs"]}


@pytest.mark.parametrize(("options", "backend"), [
    pytest.param(("--min-combined", "0.85"), "template", id="template-kind-fails"),
    pytest.param(("--min-combined", "0.5"), "ollama", id="fake-model-passes"),
])
def test_the_same_settings_give_the_same_verdicts_and_numbers(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch,
        options: tuple[str, ...], backend: str) -> None:
    common = ("--users", "4", "--severities", "1,4", *options)
    model = () if backend == "template" else ("--model", "fake-model", "--host", server.url)
    pytester.makepyfile(BARE)
    plugin_args = [f"--robustexplain-{a[2:]}" if a.startswith("--") else a for a in (*common, *model)]
    # pytest's option parser wants --robustexplain-x=value for values that look like options.
    joined = [f"{plugin_args[i]}={plugin_args[i + 1]}" for i in range(0, len(plugin_args), 2)]
    result = pytester.runpytest(f"--robustexplain-backend={backend}", "--robustexplain-cache=off",
                                "--robustexplain-json=plugin.json", *joined)
    plugin = json.loads((pytester.path / "plugin.json").read_text(encoding="utf-8"))

    monkeypatch.chdir(pytester.path)
    code = cli.main(["run", "--backend", backend, "--cache", "off", "--progress", "off", "--json", "cli.json",
                     *common, *model])
    command = json.loads(Path(pytester.path / "cli.json").read_text(encoding="utf-8"))

    assert _verdicts(plugin) == _verdicts(command)
    assert _pairs(plugin) == _pairs(command)  # the same pairs, swaps included, with the same ρ
    # What `robustexplain compare` checks two reports share is recorded by the engine, for both doors.
    assert plugin["settings"]["dataset_name"] == command["settings"]["dataset_name"] == "synthetic(seed=2601)"
    failed = [s for s, v in _verdicts(plugin).items() if v[0] != "PASS"]
    assert code == (cli.EXIT_GATE_FAILED if failed else cli.EXIT_OK)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == len(failed) and outcomes.get("passed", 0) == 6 - len(failed)
    if backend == "template":
        assert failed == ["category_drift"]  # the case the two entry points used to disagree on


def test_one_cache_directory_serves_both_entry_points(pytester: pytest.Pytester, server: FakeOllamaServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`robustexplain run` then `pytest` in the same directory: the second asks the model nothing."""
    monkeypatch.chdir(pytester.path)
    pytester.makepyfile(BARE)
    options = ("--users", "4", "--severities", "2", "--perturbations", "noise,drift")
    assert cli.main(["run", "--model", "fake-model", "--host", server.url, "--progress", "off", "-q",
                     *options]) == 0
    assert (pytester.path / cli.DEFAULT_CACHE_DIR).is_dir()
    before = server.chat_calls
    result = pytester.runpytest("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
                                "--robustexplain-users=4", "--robustexplain-severities=2",
                                "--robustexplain-perturbations=noise,drift")
    result.assert_outcomes(passed=3)
    assert server.chat_calls == before  # every answer came from the command's cache


def test_large_plans_say_their_size_before_they_start(pytester: pytest.Pytester,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(BARE.replace("robustness\n", 'robustness(perturbations=["noise"])\n', 1))
    big = pytester.runpytest("--co", "--robustexplain-backend=template", "--robustexplain-repeats=20")
    big.stdout.fnmatch_lines(["robustexplain: this run plans up to 2,040 model calls (above 2,000)*"
                              "--robustexplain-users=N*"])
    small = pytester.runpytest("--co", "--robustexplain-backend=template")
    assert "plans up to" not in small.stdout.str()
    monkeypatch.chdir(pytester.path)
    assert cli.main(["run", "--backend", "template", "--repeats", "4", "--progress", "off", "-q"]) == 0
    assert "robustexplain: this run plans up to 2,040 model calls" in capsys.readouterr().err


def test_a_dry_run_prices_every_item_calls_no_model_and_skips_the_tests(
        pytester: pytest.Pytester, server: FakeOllamaServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = 'robustness(perturbations=["noise", "drift"], users=3)\n'
    pytester.makepyfile(BARE.replace("robustness\n", marker, 1))
    result = pytester.runpytest(f"--robustexplain-host={server.url}", "--robustexplain-model=fake-model",
                                "--robustexplain-dry-run")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines([
        "robustexplain: dry run — no model is called: 3 gated items, at most 36 model calls in all*",
        "robustexplain:   *test_default[[]noise_injection[]] (fake-model):*15 pairs planned · 3 cross-user "
        "controls (guard)*",
        "robustexplain:   *test_default[[]overall[]] (fake-model):*30 pairs planned · 3 cross-user "
        "controls (guard) · at most 36 model calls"])
    assert server.chat_calls == 0 and not (pytester.path / ".robustexplain-cache").exists()
    # The same setting from the environment, through the command.
    monkeypatch.chdir(pytester.path)
    monkeypatch.setenv("ROBUSTEXPLAIN_DRY_RUN", "1")
    assert cli.main(["run", "--backend", "template", "--users", "3", "--perturbations", "noise,drift"]) == 0
    out = capsys.readouterr().out  # the same lines, by model
    assert "dry run — no model is called: 1 model, at most 36 model calls in all" in out
    assert re.search(r"^  template: +30 pairs planned · 3 cross-user controls \(guard\) · "
                     r"at most 36 model calls", out, re.M)


def _movielens(root: Path, users: int) -> Path:
    """Users that are near copies of one another (three genres in turn, one rating): another user's
    history moves an explanation less than noise does, so relative robustness rightly fails; the tests
    that use it are about planning and reporting, and run the guard as a warning."""
    root.mkdir()
    (root / "movies.csv").write_text("movieId,title,genres\n" + "".join(
        f"{m},Film Number {m} (1999),{['Drama', 'Comedy', 'Horror'][m % 3]}\n" for m in range(1, 61)),
        encoding="utf-8")
    rows = [f"{u},{m},4.0,{1_500_000_000 + m}\n" for u in range(1, users + 1)
            for m in range(1 + u % 7, 60, 4)]
    (root / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + "".join(rows), encoding="utf-8")
    return root


def test_a_movielens_directory_plans_20_seeded_users_by_default(pytester: pytest.Pytester,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ml = _movielens(pytester.path / "ml", users=35)
    monkeypatch.chdir(pytester.path)
    assert cli.main(["run", "--backend", "template", "--dataset", str(ml), "--dry-run"]) == 0
    assert ": 20 users × 5 kinds" in capsys.readouterr().out
    assert cli.main(["run", "--backend", "template", "--dataset", str(ml), "--severities", "3",
                     "--perturbations", "noise", "--progress", "off", "--json", "a.json", "-q",
                     "--guard", "warn"]) == 0
    assert cli.main(["run", "--backend", "template", "--dataset", str(ml), "--severities", "3", "--seed", "7",
                     "--perturbations", "noise", "--progress", "off", "--json", "b.json", "-q",
                     "--guard", "warn"]) == 0
    users_a = {p["key"]["user_id"] for p in json.loads(Path("a.json").read_text(encoding="utf-8"))["pairs"]}
    users_b = {p["key"]["user_id"] for p in json.loads(Path("b.json").read_text(encoding="utf-8"))["pairs"]}
    assert len(users_a) == len(users_b) == 20 and users_a != users_b  # a seeded sample, not the first 20
    donors = {p["changes"]["donor"] for p in json.loads(Path("a.json").read_text(encoding="utf-8"))["pairs"]
              if p["key"]["kind"] == "swap"}
    assert donors - users_a  # donors come from all 35 users, not only the sampled ones


def test_max_history_is_a_setting_and_the_reports_say_what_the_prompts_showed(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ml = _movielens(pytester.path / "ml", users=25)
    monkeypatch.chdir(pytester.path)
    args = ["run", "--backend", "template", "--dataset", str(ml), "--severities", "3",
            "--perturbations", "noise", "--progress", "off", "--users", "3", "--guard", "warn"]
    assert cli.main([*args, "--max-history", "6", "--json", "six.json"]) == 0
    assert "Interactions per prompt         6–6 (median 6" in capsys.readouterr().out
    six = json.loads(Path("six.json").read_text(encoding="utf-8"))
    assert {p["history_length"] for p in six["pairs"]} == {6}
    pytester.makepyfile(BARE)
    result = pytester.runpytest(f"--robustexplain-dataset={ml}", "--robustexplain-backend=template",
                                "--robustexplain-users=3", "--robustexplain-severities=3",
                                "--robustexplain-perturbations=noise", "--robustexplain-max-history=all",
                                "--robustexplain-guard=warn")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"Interactions per prompt\s+1[45]–1[45] \(median"])  # every rating kept


def test_more_users_than_the_dataset_has_is_said_not_hidden(pytester: pytest.Pytester,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    marker = 'robustness(perturbations=["noise"], severities=[1])\n'
    pytester.makepyfile(BARE.replace("robustness\n", marker, 1))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=1000")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["robustexplain: users=1000 asked for, but the dataset has 20 evaluation "
                                 "cases: running 20"])
    monkeypatch.chdir(pytester.path)
    assert cli.main(["run", "--backend", "template", "--users", "1000", "--severities", "1",
                     "--perturbations", "noise", "--progress", "off", "-q"]) == 0
    assert "robustexplain: users=1000 asked for, but the dataset has 20" in capsys.readouterr().err


def test_both_doors_warn_about_the_same_items(pytester: pytest.Pytester, server: FakeOllamaServer,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """One outcome rule (engine.Outcome): a guard finding under guard=warn (here: explanations that copy
    the prompt back) warns from both doors, for the same items. The command used to warn only about an
    INSENSITIVE guard, so a passing gate with copied explanations went unsaid."""
    server.mode = "copycat"
    common = ("--users", "8", "--severities", "1,4", "--perturbations", "noise,shuffle", "--guard", "warn",
              "--model", "fake-model", "--host", server.url, "--cache", "off",
              "--num-predict", "4096")  # whole copies: a cut reply would leave the gate unmeasured
    pytester.makepyfile(BARE)
    plugin_args = [f"--robustexplain-{common[i][2:]}={common[i + 1]}" for i in range(0, len(common), 2)]
    result = pytester.runpytest("-rw", *plugin_args)
    copied = r"\]: Guard warning: 8 of 8 explanations copy their prompt back"
    pytest_warned = set(re.findall(r"RobustExplainWarning: test_both_doors_warn_about_the_same_items\.py::"
                                   r"test_default\[(\w+)" + copied, result.stdout.str()))
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert cli.main(["run", "--progress", "off", *common]) == cli.EXIT_OK
    run_warned = set(re.findall(r"warning: robustexplain run\[(\w+)" + copied, capsys.readouterr().err))
    assert pytest_warned == run_warned == {"noise_injection", "temporal_shuffle", "overall"}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_notes_and_the_skip_reason_are_said_once_in_the_summary_under_plain_pytest(
        pytester: pytest.Pytester, workers: list[str]) -> None:
    """Under pytest's capture (no -s) and in xdist workers, what the run says — more users asked for than the
    data has; why every gate is skipped without a model — is in the terminal summary, once (issue 62)."""
    marker = 'robustness(perturbations=["noise"], severities=[1])\n'
    pytester.makepyfile(BARE.replace("robustness\n", marker, 1))
    said = "robustexplain: users=1000 asked for, but the dataset has 20 evaluation cases: running 20"
    result = pytester.runpytest_subprocess(*workers, "-q", "--robustexplain-backend=template",
                                           "--robustexplain-users=1000")
    result.assert_outcomes(passed=1)
    assert result.stdout.str().count(said) == 1 and said in result.stdout.lines  # a line of its own
    result = pytester.runpytest_subprocess(*workers, "-q")  # the main job: no model configured
    result.assert_outcomes(skipped=1)
    [line] = [line for line in result.stdout.lines if "gated test item skipped" in line]
    assert line.startswith("robustexplain: 1 gated test item skipped: ") and "model" in line
