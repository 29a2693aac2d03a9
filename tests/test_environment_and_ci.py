"""The plugin as CI meets it, through pytest: settings from the environment and ``robustexplain.yaml``,
the GitHub Actions outputs, the response cache's modes, colour, and the ``fake_ollama`` fixture users
write their own offline tests with.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from helpers import marked, read_report, run_fake

from pytest_robustexplain.store import DB_NAME
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

def _gate(extra: str = ", users=6") -> str:
    return marked(f'perturbations=["noise"], severities=[1, 5]{extra}')


def _users(pytester: pytest.Pytester, name: str = "r.json") -> int:
    return len({p["key"]["user_id"] for p in read_report(pytester, name)["pairs"]})


@pytest.fixture(autouse=True)
def _clean(isolated: Path) -> None:
    """No ROBUSTEXPLAIN_*, OLLAMA_HOST or GitHub variables from the shell that started the suite."""


# --------------------------------------------------------------------------------- the environment
def test_the_model_and_host_come_from_the_environment(pytester: pytest.Pytester, server: FakeOllamaServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_MODEL", "fake-model")
    monkeypatch.setenv("OLLAMA_HOST", server.url)  # Ollama's own variable names the default host
    pytester.makepyfile(_gate())
    pytester.runpytest().assert_outcomes(passed=1)
    assert server.chat_calls > 0


def test_a_bad_environment_value_is_a_usage_error_naming_the_variable(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_USERS", "lots")
    pytester.makepyfile(_gate())
    result = pytester.runpytest("--robustexplain-backend=template")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ROBUSTEXPLAIN_USERS=lots" in result.stderr.str()


def test_a_misspelt_environment_variable_is_a_usage_error_not_a_default(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_MIN_COMBIND", "0.9")  # ignored, the gate would run at 0.5
    pytester.makepyfile(_gate())
    result = pytester.runpytest("--robustexplain-backend=template")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ROBUSTEXPLAIN_MIN_COMBIND: not a robustexplain setting; did you mean "
                                 "ROBUSTEXPLAIN_MIN_COMBINED?*"])


def test_require_model_from_the_environment(pytester: pytest.Pytester,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_REQUIRE_MODEL", "1")
    pytester.makepyfile(_gate())
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no model configured*"])


def test_the_command_line_beats_the_environment(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_USERS", "4")
    pytester.makepyfile(_gate(extra=", inconclusive='pass'"))
    pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=3",
                       "--robustexplain-json=r.json").assert_outcomes(passed=1)
    assert _users(pytester) == 3


# --------------------------------------------------------------------------------- robustexplain.yaml
def test_a_yaml_file_in_the_rootdir_is_read(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "robustexplain.yaml").write_text("backend: template\nusers: 3\n", encoding="utf-8")
    pytester.makepyfile(_gate(extra=", inconclusive='pass'"))
    pytester.runpytest("--robustexplain-json=r.json").assert_outcomes(passed=1)
    assert _users(pytester) == 3


def test_the_config_option_names_another_yaml_file(pytester: pytest.Pytester) -> None:
    (pytester.path / "ci.yaml").write_text("backend: template\nusers: 2\n", encoding="utf-8")
    pytester.makepyfile(_gate(extra=", inconclusive='pass'"))
    result = pytester.runpytest("--robustexplain-config=ci.yaml", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=1)
    assert _users(pytester) == 2


def test_a_misspelt_yaml_key_names_the_file_and_line_with_a_suggestion(pytester: pytest.Pytester) -> None:
    (pytester.path / "robustexplain.yaml").write_text("backend: template\nuser: 3\n", encoding="utf-8")
    pytester.makepyfile(_gate())
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "robustexplain.yaml" in err and "user" in err and "users" in err


@pytest.mark.parametrize(("name", "text"), [
    ("pyproject.toml", '[tool.pytest.ini_options]\nrobustexplain_min_combind = "0.9"\n'),
    ("pytest.ini", "[pytest]\nrobustexplain_min_combind = 0.9\n"),
    ("tox.ini", "[pytest]\nrobustexplain-min-combined = 0.9\n"),  # the flag's spelling, not the key's
])
def test_a_misspelt_ini_key_is_a_usage_error_naming_the_one_meant(pytester: pytest.Pytester, name: str,
                                                                  text: str) -> None:
    """Before: pytest's "Unknown config option" warning in the summary, and the gate ran at 0.5 (issue 43)."""
    (pytester.path / name).write_text(text, encoding="utf-8")
    pytester.makepyfile("def test_plain():\n    pass\n")  # no marked test: the key is the plugin's anyway
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    key = text.split("\n")[1].split(" =")[0]
    result.stderr.fnmatch_lines([f"ERROR: robustexplain: {name}: {key} is not a robustexplain setting; "
                                 "did you mean 'robustexplain_min_combined'?*"])


def test_the_command_refuses_a_misspelt_ini_key_too(pytester: pytest.Pytester,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain import cli

    (pytester.path / "pytest.ini").write_text("[pytest]\nrobustexplain_userz = 3\n", encoding="utf-8")
    assert cli.main(["run", "--backend", "template", "--dry-run"]) != 0
    assert "robustexplain_userz is not a robustexplain setting; did you mean 'robustexplain_users'?" in (
        capsys.readouterr().err)


def test_other_unknown_ini_keys_stay_pytests_business(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmy_own_key = 1\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1, warnings=1)


def test_the_ini_file_beats_the_yaml_file(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrobustexplain_users = 2\n")
    (pytester.path / "robustexplain.yaml").write_text("backend: template\nusers: 5\n", encoding="utf-8")
    pytester.makepyfile(_gate(extra=", inconclusive='pass'"))
    pytester.runpytest("--robustexplain-json=r.json").assert_outcomes(passed=1)
    assert _users(pytester) == 2


# --------------------------------------------------------------------------------- GitHub Actions
def _on_actions(monkeypatch: pytest.MonkeyPatch, summary: Path) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))


def test_a_passing_run_on_actions_writes_a_pass_summary_and_no_error_annotation(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    _on_actions(monkeypatch, summary)
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server)
    result.assert_outcomes(passed=1)
    assert "::error" not in result.stdout.str()
    assert "**Status: PASS**" in summary.read_text(encoding="utf-8")


def test_a_failing_run_on_actions_annotates_the_test_on_its_line(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch,
        xdist_args: tuple[str, ...]) -> None:
    summary = pytester.path / "summary.md"
    _on_actions(monkeypatch, summary)
    server.mode = "fragile"
    pytester.makepyfile(test_gate="import pytest\n\n\ndef test_plain():\n    pass\n\n\n" + _gate())
    source = (pytester.path / "test_gate.py").read_text(encoding="utf-8").splitlines()
    line = 1 + next(i for i, text in enumerate(source) if "robustness(" in text)  # pytest's: the decorator
    # Under -n 2 the controller has no items: the line comes with each worker's report.
    result = run_fake(pytester, server, *xdist_args)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([f"::error file=test_gate.py,line={line},title=robustness gate FAIL "
                                 "(noise_injection)::test_gate.py::test_gate[[]noise_injection[]]: *"])
    assert "**Status: FAIL**" in summary.read_text(encoding="utf-8")


def test_the_step_summary_is_appended_not_overwritten(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    summary.write_text("## an earlier step\n", encoding="utf-8")
    _on_actions(monkeypatch, summary)
    pytester.makepyfile(_gate())
    pytester.runpytest("--robustexplain-backend=template").assert_outcomes(passed=1)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## an earlier step\n") and "Status: PASS" in text


def test_without_actions_no_annotation_and_no_summary(pytester: pytest.Pytester, server: FakeOllamaServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))  # set, but not on Actions
    server.mode = "fragile"
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server)
    assert "::error" not in result.stdout.str() and not summary.exists()


# --------------------------------------------------------------------------------- the response cache
def test_the_cache_directory_a_run_creates_ignores_itself_in_git(pytester: pytest.Pytester,
                                                                 server: FakeOllamaServer) -> None:
    """Issue 62: ``.robustexplain-cache/`` showed up in ``git status``; pytest's own cache ignores itself. A
    directory the user named that exists already is left as it is (it may hold more than the cache)."""
    import shutil
    import subprocess

    pytester.makepyfile(_gate())
    own = pytester.path / "mine"
    own.mkdir()
    run_fake(pytester, server).assert_outcomes(passed=1)
    run_fake(pytester, server, f"--robustexplain-cache-dir={own}").assert_outcomes(passed=1)
    cache = pytester.path / ".robustexplain-cache"
    assert (cache / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    assert (cache / "CACHEDIR.TAG").read_text(encoding="utf-8").startswith("Signature: 8a477f597d28d172")
    assert not (own / ".gitignore").exists() and any(own.iterdir())
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=pytester.path,
                                check=True, capture_output=True, text=True).stdout
        assert ".robustexplain-cache" not in status and "mine/" in status


def test_cache_off_calls_the_model_again(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    run_fake(pytester, server).assert_outcomes(passed=1)
    first = server.chat_calls
    run_fake(pytester, server, "--robustexplain-cache=off").assert_outcomes(passed=1)
    assert server.chat_calls >= 2 * first - 1  # the warm-up may be skipped on a known model


def test_cache_read_uses_answers_and_writes_none(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    run_fake(pytester, server, "--robustexplain-cache=read").assert_outcomes(passed=1)
    database = pytester.path / ".robustexplain-cache" / DB_NAME
    if database.exists():  # the pace of the calls is kept: it is no answer
        with contextlib.closing(sqlite3.connect(database)) as db:
            assert db.execute("SELECT count(*) FROM kept WHERE kind != 'pace'").fetchone() == (0,)


def test_replay_only_on_an_empty_cache_names_what_is_missing(pytester: pytest.Pytester,
                                                             server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server, "--robustexplain-cache=replay-only")
    assert result.ret != 0
    assert server.chat_calls == 0
    assert "replay-only" in result.stdout.str() + result.stderr.str()


def test_a_warm_rerun_replays_the_same_verdict_and_scores(pytester: pytest.Pytester,
                                                          server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    run_fake(pytester, server, "--robustexplain-json=cold.json").assert_outcomes(passed=1)
    server.reset_stats()
    run_fake(pytester, server, "--robustexplain-cache=replay-only",
             "--robustexplain-json=warm.json").assert_outcomes(passed=1)
    assert server.chat_calls == 0
    cold, warm = read_report(pytester, "cold.json"), read_report(pytester, "warm.json")
    assert [p["combined"] for p in cold["pairs"]] == [p["combined"] for p in warm["pairs"]]
    assert cold["gates"][0]["verdict"]["outcome"] == warm["gates"][0]["verdict"]["outcome"]


# --------------------------------------------------------------------------------- terminal
def test_color_yes_colours_only_pytests_own_lines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    result = pytester.runpytest("--robustexplain-backend=template", "--color=yes")
    report = result.stdout.str().split("robustness report", 1)[1]
    assert "PASS" in report
    lines = [line for line in report.splitlines() if "Overall robustness" in line]
    assert lines and not any("\x1b[2J" in line for line in lines)  # colour codes at most, no control


def test_the_report_is_printed_once_per_session_however_many_marked_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=_gate(), test_b=_gate().replace("test_gate", "test_other"))
    result = pytester.runpytest("--robustexplain-backend=template")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("robustness report") == 1


# --------------------------------------------------------------------------------- the fake_ollama fixture
def test_the_fake_ollama_fixture_serves_a_users_own_client(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import ollama

        def test_my_client(fake_ollama):
            reply = ollama.Client(host=fake_ollama.url).chat(
                model="fake-model", messages=[{"role": "user", "content": "Explain why."}])
            assert reply.message.content
            assert fake_ollama.chat_calls == 1
    """)
    pytester.runpytest().assert_outcomes(passed=1)


def test_the_fake_ollama_fixture_gates_a_marked_test_in_the_same_session(pytester: pytest.Pytester) -> None:
    # A user's own offline check of their gate: the fixture's server, through a conftest explainer that
    # calls it like their production client would.
    pytester.makeconftest("""
        import ollama
        import pytest

        @pytest.fixture
        def explainer(fake_ollama):
            client = ollama.Client(host=fake_ollama.url)

            def explain(history, item):
                titles = ", ".join(i.title or i.item_id for i in history.interactions[-3:])
                prompt = f"History: {titles}. Recommend: {item.title}."
                return client.chat(model="fake-model", messages=[{"role": "user", "content": prompt}]
                                   ).message.content
            return explain
    """)
    pytester.makepyfile(_gate(extra=", users=6, min_combined=0.0, min_metric=0.0, guard='off'"))
    result = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-json=r.json")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1
    assert read_report(pytester)["pairs"]


def test_the_plugin_disabled_leaves_a_marked_test_without_its_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    result = pytester.runpytest("-p", "no:robustexplain")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'robustness' not found*"])


def test_json_reports_of_two_sessions_compare_with_the_command(pytester: pytest.Pytester,
                                                             server: FakeOllamaServer,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain import cli

    pytester.makepyfile(_gate())
    run_fake(pytester, server, "--robustexplain-json=a.json").assert_outcomes(passed=1)
    run_fake(pytester, server, "--robustexplain-json=b.json").assert_outcomes(passed=1)
    assert read_report(pytester, "a.json")["settings"]["dataset_name"]
    capsys.readouterr()
    assert cli.main(["compare", str(pytester.path / "a.json"), str(pytester.path / "b.json")]) == 0
    assert "No significant difference" in capsys.readouterr().out  # the same model, the same answers
