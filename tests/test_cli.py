"""The ``robustexplain`` command: run (against the loopback fake Ollama server), report, compare, dataset,
exit codes, interruption and resume, and the example CI workflow."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_robustexplain import cli
from pytest_robustexplain.data import generate_synthetic, load_dataset_dir
from pytest_robustexplain.explainers.remote import is_warmup_prompt
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.results import OVERALL
from pytest_robustexplain.settings import OPTIONS
from pytest_robustexplain.sweep import Counters
from pytest_robustexplain.testing import FakeOllamaServer

REPO = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "data_samples"
MODELS = ("fake-a:7b", "fake-b:14b")
# Two kinds keep the reports cheap (the kind-difference tests of three or more kinds take ~0.5 s a model).
# Five users: with two, every interval spans the scale and the verdict is INCONCLUSIVE. So few users still
# cannot always show that the explanations depend on the user (INCONCLUSIVE under the guard's default
# "fail"); these tests are about the command line, so the guard only warns. Its verdicts are tested in
# test_guard_e2e.py.
SMALL_USERS = 5
SMALL = ("--users", str(SMALL_USERS), "--perturbations", "noise,drift", "--severities", "1,5", "--progress",
         "off", "--guard", "warn")
SMALL_PAIRS = SMALL_USERS * 2 * 2
ISOLATED_ENV = ("OLLAMA_HOST", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Each test in its own directory, free of the caller's robustexplain/Ollama/GitHub environment."""
    for name in list(os.environ):
        if name.startswith("ROBUSTEXPLAIN_") or name in ISOLATED_ENV:
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(models=MODELS) as fake:
        yield fake


def run(*argv: str) -> int:
    return cli.main(list(argv))


def fake_run(server: FakeOllamaServer, *argv: str, model: str = MODELS[0]) -> int:
    return run("run", "--model", model, "--host", server.url, *argv)


def explanation_calls(server: FakeOllamaServer) -> int:
    """Chat requests for explanations (each model's one warm-up request of a run left out)."""
    return sum(1 for request in server.requests if not is_warmup_prompt(request["prompt"]))


def one_error_line(err: str) -> str:
    """stderr holds exactly one error line and no traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- help
def test_help_documents_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--help") == 0
    out = capsys.readouterr().out
    for command in ("run", "report", "compare", "dataset", "fake-server"):
        assert re.search(rf"^\s+{command}\s+\S", out, re.M), command
    for argv in (["run"], ["report"], ["compare"], ["dataset"], ["dataset", "generate"],
                 ["dataset", "import"]):
        assert run(*argv, "--help") == 0
        text = capsys.readouterr().out
        assert text.startswith(f"usage: robustexplain {' '.join(argv)}")
    assert run("run", "--help") == 0
    text = capsys.readouterr().out
    for flag in ("--model", "--backend", "--host", "--perturbations", "--severities", "--users", "--repeats",
                 "--seed", "--temperature", "--concurrency", "--cache", "--cache-dir", "--json", "--html",
                 "--markdown", "--min-combined", "--min-metric", "--config", "--protocol", "--junitxml"):
        assert f"{flag} " in text, flag
    assert "callable" not in text.split("--backend", 1)[1].split("\n", 1)[0]


def test_module_and_console_entry_points() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest_robustexplain", "--version"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("robustexplain ")
    script = Path(sys.executable).parent / "robustexplain"
    if script.exists():  # installed (editable or not): the pyproject entry point works
        done = subprocess.run([str(script), "dataset", "--help"], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0 and "generate" in done.stdout


# ---------------------------------------------------------------------------------------------- run
def test_template_run_passes_and_records_the_overall_gate(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    assert run("run", "--backend", "template", *SMALL, "--json", "r.json", "--markdown", "r.md") == 0
    out = capsys.readouterr().out
    assert "Overall robustness ρ" in out and "PASS" in out
    assert out.rstrip().endswith("robustexplain: PASS — 1 of 1 model passed the gate")
    report = read_json(tmp_path / "r.json")
    # Each kind and the overall, as a bare @pytest.mark.robustness test is expanded.
    kinds = ("noise_injection", "category_drift", OVERALL)
    assert [(g.nodeid, g.slice, g.model) for g in report.gates] == [
        (f"{cli.NODEID}[{kind}]", kind, "template") for kind in kinds]
    assert {g.thresholds["combined"] for g in report.gates} == {0.5}
    assert len(report.model_pairs("template")) == SMALL_PAIRS
    assert len(report.model_swaps("template")) == SMALL_USERS  # one cross-user control per user (the guard)
    assert report.settings["users"] == SMALL_USERS and report.settings["sources"]["users"] == "--users"
    assert "partial" not in report.settings
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("## robustexplain")


def test_gate_below_threshold_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """The pre-deploy check: a model below the thresholds makes the command fail."""
    assert run("run", "--backend", "template", *SMALL, "--min-combined", "0.99", "-q") == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    last = out.rstrip().splitlines()[-1]
    assert last == "robustexplain: FAIL — 1 of 1 model failed the gate: template (all 3 items FAIL)"


def test_inconclusive_follows_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("run", "--backend", "template", *SMALL, "--decision", "confident", "--min-combined", "0.87", "-q")
    assert run(*base) == 1  # policy "fail" by default
    assert "INCONCLUSIVE" in capsys.readouterr().out
    assert run(*base, "--inconclusive", "warn") == 0
    assert f"warning: {cli.NODEID}[overall]: INCONCLUSIVE" in capsys.readouterr().err


def test_junitxml_follows_the_inconclusive_policy(tmp_path: Path) -> None:
    """``run --junitxml``: one testcase per gated item; INCONCLUSIVE is a failure under policy "fail",
    a pass under "warn" (as the pytest item would be)."""
    import xml.etree.ElementTree as ET

    base = ("run", "--backend", "template", *SMALL, "--decision", "confident", "--min-combined", "0.87", "-q")
    for policy, code, failures in (("fail", 1, 3), ("warn", 0, 0)):
        assert run(*base, "--inconclusive", policy, "--junitxml", f"{policy}/j.xml") == code
        suite = ET.parse(tmp_path / policy / "j.xml").getroot().find("testsuite")
        assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == str(failures)
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [f"run[{k}]" for k in ("noise_injection", "category_drift",
                                                                           OVERALL)]
        assert sum(c.find("failure") is not None for c in cases) == failures
        outcomes = {p.get("value") for p in suite.iter("property")
                    if p.get("name") == "robustexplain_outcome"}
        assert "INCONCLUSIVE" in outcomes


def test_two_models_against_the_fake_server(server: FakeOllamaServer, capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    code = fake_run(server, *SMALL, "--json", "two.json", "--cache-dir", "cache", model=",".join(MODELS))
    assert code == 0
    out = capsys.readouterr().out
    assert "Model comparison — fake-b:14b relative to fake-a:7b" in out
    report = read_json(tmp_path / "two.json")
    assert [g.model for g in report.gates] == [m for m in MODELS for _ in range(3)]  # 2 kinds + overall
    assert {g.nodeid for g in report.gates} == {f"{cli.NODEID}[{m}-{k}]" for m in MODELS
                                                for k in ("noise_injection", "category_drift", OVERALL)}
    assert {m["name"] for m in report.models} == set(MODELS)
    # Per model: the pairs, 2 originals and 2 cross-user controls (one per user).
    assert explanation_calls(server) == 2 * (SMALL_PAIRS + SMALL_USERS + SMALL_USERS)
    assert report.calls["made"] == explanation_calls(server)
    assert (tmp_path / "cache").is_dir()


def test_default_cache_dir_makes_the_rerun_free(server: FakeOllamaServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert fake_run(server, *SMALL, "-q") == 0
    first = server.chat_calls
    assert (tmp_path / cli.DEFAULT_CACHE_DIR).is_dir()
    assert fake_run(server, *SMALL, "-q", "--json", "again.json") == 0
    assert server.chat_calls == first
    assert read_json(tmp_path / "again.json").calls["made"] == 0
    assert f"{SMALL_PAIRS} cached" in capsys.readouterr().out


def test_protocol_paper_plans_500_pairs_per_model(server: FakeOllamaServer,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert fake_run(server, "--protocol", "paper", "--dry-run", model=",".join(MODELS)) == 0
    out = capsys.readouterr().out
    assert "20 users × 5 kinds × 5 severities × 1 repeat = 500 pairs per model" in out
    for model in MODELS:
        # 500 pairs, 20 originals and one cross-user control per user: +20 calls (3.8 %) for the guard.
        assert re.search(rf"^  {re.escape(model)}:\s+500 pairs planned · 20 cross-user controls \(guard\) · "
                         "at most 540 model calls", out, re.M)
    assert server.chat_calls == 0  # a dry run calls no model


def test_protocol_overrides_environment_and_yaml_but_not_the_command_line(
        server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_USERS", "3")
    (tmp_path / "robustexplain.yaml").write_text("severities: 2\nrepeats: 2\n", encoding="utf-8")
    args = argparse_namespace("run", "--protocol", "paper", "--severities", "1,5")
    settings, extra = cli.resolve_run_settings(args)
    assert settings.users == 20 and settings.repeats == 1  # env and YAML lose to the protocol
    assert settings.severities == (1, 5)  # the command line wins
    assert settings.sources["users"] == "--protocol paper"
    assert extra == {"protocol": "paper", "protocol_departures": {"severities": [1, 5]}}
    code = fake_run(server, "--protocol", "paper", "--users", "2", "--severities", "1", "--progress", "off",
                    "--json", "p.json", "-q", "--guard", "warn", "--inconclusive", "warn")
    assert code == 0
    assert "departing from the paper protocol on the command line: users=2, severities=1" in (
        capsys.readouterr().err)
    recorded = read_json(tmp_path / "p.json").settings
    assert recorded["protocol"] == "paper"
    assert recorded["protocol_departures"] == {"users": 2, "severities": [1]}


def argparse_namespace(*argv: str) -> Any:
    return cli.build_parser().parse_args(list(argv))


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("argv", "message"), [
    (["--backend", "template", "--min-combined", "1.5"], "--min-combined=1.5: must be between 0 and 1"),
    (["--backend", "template", "--severities", "7"], "--severities=7: severity 7 is outside 1-5"),
    (["--backend", "template", "--perturbations", "noize"], "unknown perturbation kind 'noize'"),
    (["--backend", "callable"], "the 'callable' backend needs a pytest conftest"),
    ([], "no model configured for robustness tests: pass --model=NAME"),
    (["--backend", "template", "--dataset", "missing-dir"], "--dataset=missing-dir: directory not found"),
    (["--backend", "template", "--histories", str(SAMPLES / "histories.json")],
     "a histories file needs a catalog file too (--catalog)"),
    # Checked before anything is allocated (issue 41): a traceback, and a dry run that ran past 120 s.
    (["--backend", "template", "--severities", "1-99999999999999999999"], "severity 6 is outside 1-5"),
    (["--backend", "template", "--repeats", "10000", "--dry-run"],
     "its gate would plan up to 1,400,020 model calls (20 users × 1 kind × 5 severities × 10000 repeats); "
     "more than 1,000,000 is refused. Shrink it with --repeats, --users or --severities."),
])
def test_bad_options_exit_2_with_one_line(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert run("run", *argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("robustexplain run: error: ")
    assert message in line
    assert "--robustexplain-" not in line


def test_bad_environment_and_settings_file_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ROBUSTEXPLAIN_SEED", "abc")
    assert run("run", "--backend", "template") == 2
    assert "ROBUSTEXPLAIN_SEED=abc: not an integer" in one_error_line(capsys.readouterr().err)
    monkeypatch.delenv("ROBUSTEXPLAIN_SEED")
    (tmp_path / "s.yaml").write_text("min_combind: 0.4\n", encoding="utf-8")
    assert run("run", "--backend", "template", "--config", "s.yaml") == 2
    assert "s.yaml:1: unknown key 'min_combind'; did you mean 'min_combined'?" in one_error_line(
        capsys.readouterr().err)


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("run", "--bogus") == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert run() == 2
    assert run("report", "r.json", "--format", "pdf") == 2
    assert "invalid choice: 'pdf'" in capsys.readouterr().err


def test_unreachable_server_and_missing_model_exit_3(server: FakeOllamaServer,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert run("run", "--model", "m", "--host", f"http://127.0.0.1:{port}", "--retries", "0",
               "--connect-timeout", "0.5", "--progress", "off") == 3
    assert "cannot reach Ollama" in one_error_line(capsys.readouterr().err)
    assert fake_run(server, *SMALL, model="not-pulled:1b") == 3
    line = one_error_line(capsys.readouterr().err)
    assert "not-pulled:1b" in line and "robustexplain run: error:" in line


def test_replay_only_cache_miss_exits_3(server: FakeOllamaServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert fake_run(server, *SMALL, "--cache", "replay-only") == 3
    assert "replay-only" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------- interrupt
def test_a_server_killed_mid_run_leaves_a_partial_report_and_a_resume_hint(
        server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The server dies once 6 pairs are scored: exit 3 (backend), what finished is kept, the rerun resumes."""
    argv = ("--users", "1", "--perturbations", "noise,drift", "--concurrency", "2", "--retries", "0",
            "--json", "r.json")
    server.script(["ok"] * 8)  # the warm-up, the original and six perturbed explanations are answered...
    server.hang_next(20, seconds=30)  # ...later requests hang until the server is stopped under them
    real_call = cli.ProgressBar.__call__

    def kill_after_six_pairs(self: cli.ProgressBar, counters: Counters) -> None:
        if counters.pairs_done >= 6 and server.chat_calls:
            server.stop()
        real_call(self, counters)

    monkeypatch.setattr(cli.ProgressBar, "__call__", kill_after_six_pairs)
    assert fake_run(server, *argv) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "robustexplain run: error: " in err
    assert "stopped — 6 of 11 pairs finished" in err
    assert f"partial report (\"partial\": true in its settings) written to {tmp_path / 'r.json'}" in err
    assert "rerun the same command to resume" in err
    partial = read_json(tmp_path / "r.json")
    assert partial.settings["partial"] is True and len(partial.pairs) == 6


def test_interrupt_writes_a_partial_report_and_the_rerun_resumes(
        server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C once 6 pairs are scored: the partial report keeps them, the rerun asks only for the rest."""
    argv = ("--users", "1", "--perturbations", "noise,drift", "--concurrency", "2", "--json", "r.json",
            "--guard", "warn", "--inconclusive", "warn")  # one user decides nothing: the resume is the point
    server.script(["ok"] * 8)  # the warm-up, the original and six perturbed explanations are answered...
    server.hang_next(20, seconds=30)  # ...every later request hangs: no seventh pair can finish
    armed = [True]
    real_call = cli.ProgressBar.__call__

    def interrupt_after_six_pairs(self: cli.ProgressBar, counters: Counters) -> None:
        if armed[0] and counters.pairs_done >= 6:
            raise KeyboardInterrupt
        real_call(self, counters)

    monkeypatch.setattr(cli.ProgressBar, "__call__", interrupt_after_six_pairs)
    assert fake_run(server, *argv) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "interrupted — 6 of 11 pairs finished" in err  # 10 pairs and the user's cross-user control
    assert f"partial report (\"partial\": true in its settings) written to {tmp_path / 'r.json'}" in err
    assert "rerun the same command to resume" in err
    assert f"robustexplain run --model fake-a:7b --host {server.url} --users 1" in err
    partial = read_json(tmp_path / "r.json")
    assert partial.settings["partial"] is True and partial.settings["pairs_planned"] == 11
    # Which six finished depends on which calls reached the server first (cache look-ups run in threads);
    # a slice whose pairs all finished is gated in the partial report, the others are not.
    assert len(partial.pairs) == 6
    noise_slice_done = {p.key.kind for p in partial.pairs} == {"noise_injection", "swap"}
    assert [g.slice for g in partial.gates] == (["noise_injection"] if noise_slice_done else [])
    assert run("report", "r.json", "-q") == 0
    assert "r.json is a partial run (interrupted)" in capsys.readouterr().err

    armed[0] = False
    server.clear_faults()
    server.reset_stats()
    assert fake_run(server, *argv, "--progress", "off") == 0
    final = read_json(tmp_path / "r.json")
    assert "partial" not in final.settings and len(final.pairs) == 11
    assert explanation_calls(server) == 11 - 6  # exactly the remaining pairs: the original is cached too
    assert final.calls["made"] == 11 - 6 and final.calls["cached"] == 6 + 1
    done_before = {p.key for p in partial.pairs}
    assert all(p.cached_original and p.cached_perturbed for p in final.pairs if p.key in done_before)
    assert not any(p.cached_perturbed for p in final.pairs if p.key not in done_before)


_SIGINT_CHILD = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if the test runner ignores SIGINT
from pytest_robustexplain.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _read_terminal(terminal: int, deadline: float, until: bytes | None = None) -> bytes:
    """What a child wrote to the pseudo-terminal ``terminal``: up to ``until`` or, without it, until the
    child closed it; either way no later than ``deadline``."""
    seen = b""
    while (until is None or until not in seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], max(0.0, deadline - time.monotonic()))
        try:
            chunk = os.read(terminal, 4096) if ready else b""
        except OSError:  # EIO: the child has exited and closed the terminal
            chunk = b""
        if not chunk:
            break
        seen += chunk
    return seen


@pytest.mark.parametrize(("sent", "code", "how"), [
    (signal.SIGINT, 130, "interrupted"),
    (signal.SIGTERM, 143, "terminated (SIGTERM)"),  # a CI job cancelled, `timeout`, a process manager
])
def test_a_signal_stops_a_subprocess_cleanly(server: FakeOllamaServer, tmp_path: Path, sent: int, code: int,
                                             how: str) -> None:
    """The real thing: SIGINT or SIGTERM to a ``robustexplain run`` process; exit 130 or 143, partial
    report, resume hint, no traceback (also the subprocess smoke test of ``run``).

    Its stderr is a pseudo-terminal, so the progress line is redrawn as pairs finish: the signal goes once the
    line says two pairs are scored and the server holds the hanging request, never after a guessed sleep.
    """
    server.script(["ok"] * 4)  # the warm-up, the original and two perturbed explanations...
    server.hang_next(20, seconds=60)  # ...then the run is stuck: exactly two pairs can finish
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ROBUSTEXPLAIN_") and k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    env["COLUMNS"] = "200"  # the progress line is cut to the terminal's width
    terminal, child_side = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGINT_CHILD, "run", "--model", MODELS[0], "--host", server.url,
         "--users", "1", "--severities", "1,2", "--concurrency", "1", "--progress", "on"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=child_side, text=True)
    os.close(child_side)
    try:
        deadline = time.monotonic() + 60
        progress = _read_terminal(terminal, deadline, until=b" 2/11 pairs")
        assert b" 2/11 pairs" in progress, f"two pairs were never scored: {progress!r}"
        while server.chat_calls < 5 and time.monotonic() < deadline:  # the third pair's call may lag
            time.sleep(0.01)
        assert server.chat_calls == 5, "the run never reached the hanging request"
        proc.send_signal(sent)
        err = (progress + _read_terminal(terminal, time.monotonic() + 60)).decode("utf-8", "replace")
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(terminal)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert f"{how} — 2 of 11 pairs finished" in err and "rerun the same command to resume" in err
    partial = json.loads((tmp_path / cli.DEFAULT_CACHE_DIR / cli.PARTIAL_REPORT).read_text(encoding="utf-8"))
    assert partial["settings"]["partial"] is True and len(partial["pairs"]) == 2
    assert out == ""


# ---------------------------------------------------------------------------------------------- report
@pytest.fixture(scope="module")
def two_model_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-model run against the fake server (both models answer alike: the reply model is the
    server's; the tables and the comparison only need two models)."""
    directory = tmp_path_factory.mktemp("two")
    with pytest.MonkeyPatch.context() as patch, FakeOllamaServer(models=MODELS, mode="borderline") as fake:
        for name in list(os.environ):
            if name.startswith("ROBUSTEXPLAIN_") or name in ISOLATED_ENV:
                patch.delenv(name)
        code = cli.main(["run", "--model", ",".join(MODELS), "--host", fake.url, "--protocol", "paper",
                         "--users", "3", "--severities", "1,3,5", "--progress", "off", "-q",
                         "--min-combined", "0.3", "--min-metric", "0.1", "--guard", "warn",
                         "--cache-dir", str(directory / "cache"), "--json", str(directory / "two.json")])
    assert code == 0
    return directory / "two.json"


@pytest.fixture(scope="module")
def light_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small two-model run (two kinds: cheap to render in every format)."""
    directory = tmp_path_factory.mktemp("light")
    with pytest.MonkeyPatch.context() as patch, FakeOllamaServer(models=MODELS) as fake:
        for name in list(os.environ):
            if name.startswith("ROBUSTEXPLAIN_") or name in ISOLATED_ENV:
                patch.delenv(name)
        code = cli.main(["run", "--model", ",".join(MODELS), "--host", fake.url, *SMALL, "-q",
                         "--cache-dir", str(directory / "cache"), "--json", str(directory / "light.json")])
    assert code == 0
    return directory / "light.json"


def test_report_paper_tables_for_a_two_model_run(two_model_report: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run("report", str(two_model_report), "--tables", "paper") == 0
    out = capsys.readouterr().out
    positions = [out.index(f"Table {n}") for n in range(1, 7)]
    assert positions == sorted(positions)
    for model in MODELS:
        assert model in out.split("Table 2")[0]


def test_report_formats(light_report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("report", str(light_report)) == 0
    out = capsys.readouterr().out
    assert "Overall robustness ρ" in out and "Model comparison" in out
    assert run("report", str(light_report), "-q") == 0
    assert capsys.readouterr().out.count("robustexplain: fake-") == 2
    assert run("report", str(light_report), "--format", "markdown", "-o", "r.md") == 0
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("## robustexplain — model fake-a:7b")
    assert "wrote r.md" in capsys.readouterr().err
    assert run("report", str(light_report), "--format", "html", "-o", "r.html") == 0
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "fake-b:14b" in html
    capsys.readouterr()
    assert run("report", str(light_report), "--tables", "paper", "--format", "pr-comment") == 2
    assert "cannot be combined with --format pr-comment" in one_error_line(capsys.readouterr().err)


def test_report_of_a_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("report", "nowhere.json") == 2
    assert "nowhere.json" in one_error_line(capsys.readouterr().err)
    (tmp_path / "bad.json").write_text('{"schema": "something else"}', encoding="utf-8")
    assert run("report", "bad.json") == 2
    assert "not a pytest-robustexplain report" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------- compare
def test_compare_two_runs_of_one_model(server: FakeOllamaServer, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert fake_run(server, *SMALL, "--json", "stable.json", "--cache", "off") == 0
    server.mode = "fragile"
    assert fake_run(server, *SMALL, "--json", "fragile.json", "--cache", "off") == 1
    capsys.readouterr()
    assert run("compare", "stable.json", "fragile.json", "--unit", "pair") == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # notes are wrapped to the terminal width
    assert "Model comparison — fake-a:7b (fragile) relative to fake-a:7b (stable)" in out
    assert re.search(r"^Overall ρ\s+0\.\d{3} \[", out, re.M)
    assert f"{SMALL_PAIRS} pairs matched by (user, item, kind, severity, repeat)" in flat
    # The fragile run failed its gate: robustness is not ranked against it, and what failed is said.
    assert "Conclusion: Not ranked: fake-a:7b (fragile)'s gate failed (" in flat
    assert "only fake-a:7b (stable)'s passed" in flat
    assert run("compare", "stable.json", "fragile.json", "--format", "markdown") == 0
    assert "|" in capsys.readouterr().out


def test_compare_two_models_of_one_run(light_report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("compare", str(light_report)) == 0
    out = capsys.readouterr().out
    assert "Model comparison — fake-b:14b relative to fake-a:7b" in out
    assert f"{SMALL_PAIRS} pairs matched" in " ".join(out.split())
    assert run("compare", str(light_report), "--model-a", "nope") == 2
    assert "--model-a nope: no such model" in one_error_line(capsys.readouterr().err)


def test_compare_refuses_a_different_metric_signature_or_seed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("run", "--backend", "template", *SMALL, "--json", "a.json", "-q") == 0
    assert run("run", "--backend", "template", *SMALL, "--json", "b.json", "-q",
               "--weights", "0.4,0.2,0.2,0.2") == 0
    assert run("run", "--backend", "template", *SMALL, "--json", "c.json", "-q", "--seed", "7") == 0
    capsys.readouterr()
    assert run("compare", "a.json", "b.json") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "different metric signatures (w:.25/.25/.25/.25 vs w:.4/.2/.2/.2)" in err
    assert "scores are not comparable" in err
    assert run("compare", "a.json", "c.json") == 2
    assert "a.json has seed 42 and c.json seed 7" in one_error_line(capsys.readouterr().err)
    assert run("compare", "a.json") == 2
    assert "holds 1 model(s)" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------- dataset
def test_dataset_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("dataset", "generate", "--seed", "7", "--users", "30", "--out", "gen") == 0
    assert "30 users" in capsys.readouterr().out
    loaded = load_dataset_dir(tmp_path / "gen")
    expected = generate_synthetic(7, n_users=30)
    assert dict(loaded.histories) == dict(expected.histories)
    assert [c.item_id for c in loaded.cases] == [c.item_id for c in expected.cases]
    assert run("dataset", "generate", "--out", "gen") == 2
    assert "already holds histories.json" in one_error_line(capsys.readouterr().err)
    assert run("dataset", "generate", "--out", "gen", "--force") == 0
    assert run("dataset", "generate", "--out", "x", "--users", "5") == 2  # 20 cases need 20 users
    assert "n_cases=20 is more than n_users=5" in one_error_line(capsys.readouterr().err)


def test_dataset_import_files_with_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = ("--histories", str(SAMPLES / "histories.csv"), "--catalog", str(SAMPLES / "catalog.csv"))
    columns = "user_id=userId,item_id=itemId,category=genre,timestamp=time,rating=stars"
    assert run("dataset", "import", *files, "--cases", str(SAMPLES / "cases.csv"), "--columns", columns,
               "--out", "mine") == 0
    dataset = load_dataset_dir(tmp_path / "mine")
    cases = [(c.user_id, c.item_id) for c in dataset.cases]
    assert cases == [("alice", "E4"), ("bob", "B3"), ("carol", "E2")]
    capsys.readouterr()
    assert run("dataset", "import", *files, "--out", "x") == 2  # the CSV headers need --columns
    assert "unknown column 'userId'" in one_error_line(capsys.readouterr().err)
    assert run("dataset", "import", *files, "--columns", "user_id=userid", "--out", "x") == 2
    assert "no CSV column 'userid'" in one_error_line(capsys.readouterr().err)
    assert run("dataset", "import", *files, "--columns", "colour=c", "--out", "x") == 2
    assert "unknown field 'colour'" in one_error_line(capsys.readouterr().err)
    # Malformed text: the columns setting's grammar and words, under the flag's name.
    for text, said in (("user_id", "expected FIELD=COLUMN pairs"), ("user_id=", "give a field name and a "
                       "column name"), ("user_id=userId,,rating=stars", "empty entry"), ("", "expected "
                       "FIELD=COLUMN pairs")):
        assert run("dataset", "import", *files, "--columns", text, "--out", "x") == 2
        line = one_error_line(capsys.readouterr().err)
        assert f"--columns {text!r}: " in line and said in line, text
    assert run("dataset", "import", "--histories", str(SAMPLES / "histories.json"), "--out", "x") == 2
    assert "needs --catalog" in one_error_line(capsys.readouterr().err)
    # The imported directory is usable as is.
    assert run("run", "--backend", "template", "--dataset", "mine", "--severities", "1", "-q",
               "--progress", "off") == 0


def test_dataset_import_movielens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("dataset", "import", "--movielens", str(SAMPLES / "movielens"), "--min-ratings", "2",
               "--out", "ml") == 0
    dataset = load_dataset_dir(tmp_path / "ml")
    assert dataset.cases and len(dataset.catalog) == 12
    assert "movielens" in capsys.readouterr().out
    assert run("dataset", "import", "--movielens", "nowhere", "--out", "ml2") == 2
    assert "--movielens nowhere: directory not found" in one_error_line(capsys.readouterr().err)
    assert run("dataset", "import", "--movielens", str(SAMPLES / "movielens"), "--histories", "h.csv",
               "--out", "ml3") == 2  # mutually exclusive: argparse usage error


# ---------------------------------------------------------------------------------------------- pieces
def test_progress_bar_lines() -> None:
    import io

    now = [100.0]
    counters = Counters(planned_calls=520, calls_done=130, cached=25, pairs_done=100, pairs_total=500,
                        started=90.0)
    log = io.StringIO()
    bar = cli.ProgressBar(log, in_place=False, interval=10.0, clock=lambda: now[0])
    bar(counters)  # a log gets its first line after one interval: short runs print nothing
    assert log.getvalue() == ""
    now[0] = 105.0
    bar(counters)
    assert log.getvalue() == ""
    now[0] = 110.0
    bar(counters)
    assert log.getvalue() == ("robustexplain: [####----------------] 100/500 pairs · 130/520 calls · "
                              "25 cached · 6.5/s · ETA 60s\n")
    tty = io.StringIO()
    bar = cli.ProgressBar(tty, in_place=True, interval=0.2, clock=lambda: now[0])
    bar(counters)
    bar.close()
    assert tty.getvalue().startswith("\rrobustexplain: [####") and tty.getvalue().endswith("\r")
    off = io.StringIO()
    cli.ProgressBar(off, in_place=True, enabled=False)(counters)
    assert off.getvalue() == ""


def test_resume_hint_depends_on_the_cache_mode(tmp_path: Path) -> None:
    from pytest_robustexplain.settings import Settings

    settings = Settings.defaults()
    assert "rerun the same command to resume" in cli.resume_hint(settings, tmp_path, ["run", "--model", "m"])
    from dataclasses import replace

    assert "starts over" in cli.resume_hint(replace(settings, cache="off"), tmp_path, [])
    assert "--cache read-write to resume" in cli.resume_hint(replace(settings, cache="write"), tmp_path, [])


# ---------------------------------------------------------------------------------------------- CI workflow
def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def test_example_workflow_and_action_use_only_real_options() -> None:
    path = REPO / ".github" / "workflows" / "robustness-gate.yml"
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    steps = workflow["jobs"]["robustness"]["steps"]
    assert [s.get("uses", "").split("@")[0] for s in steps] == ["actions/checkout", "./"]  # the Action
    # Least privilege: read at the workflow level, the comment's write on the one job that posts it.
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["jobs"]["robustness"]["permissions"]["pull-requests"] == "write"
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    assert {"model", "tests", "baseline", "ollama-version", "comment"} <= set(action["inputs"])
    assert set(steps[1]["with"]) <= set(action["inputs"])
    uses = {step.get("uses", "").split("@")[0] for step in action["runs"]["steps"]}
    assert {"actions/cache/restore", "actions/cache/save", "actions/upload-artifact",
            "actions/github-script"} <= uses
    # The model cache is saved even when the gate fails (pinning and the pull's success: test_action_scripts).
    [save] = [s for s in action["runs"]["steps"] if s.get("name") == "Save Ollama and the model"]
    assert save["if"].startswith("always()")
    scripts = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "action").glob("*.[sj]*")))
    text = "\n".join(_strings(action)) + "\n".join(_strings(workflow)) + scripts
    flags = set(re.findall(r"--robustexplain-[a-z-]+", text))
    real = {spec.cli for spec in OPTIONS}
    assert flags and flags <= real, flags - real
    for required in ("--robustexplain-model", "--robustexplain-require-model", "--robustexplain-json",
                     "--robustexplain-html", "--robustexplain-baseline", "--robustexplain-max-regression",
                     "--robustexplain-save-baseline"):
        assert required in flags
    assert "ollama.sh\" pull" in text and 'pip install "${ACTION_PATH}[plots]"' in text
    assert "--format pr-comment" in text and "<!-- robustexplain:pr-comment -->" in text


def test_readme_uses_only_real_options(capsys: pytest.CaptureFixture[str]) -> None:
    """The README and every page of docs/ (where most of the README's detail moved) name real flags."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    doc = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    real = {spec.cli for spec in OPTIONS}
    flags = set(re.findall(r"--robustexplain-[a-z-]+", doc))
    assert flags and flags <= real, flags - real
    assert run("run", "--help") == 0
    run_help = capsys.readouterr().out
    commands = re.findall(r"robustexplain run [^\n`]*", doc)
    assert commands
    for line in commands:
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}\b", run_help), f"{flag} in {line!r}"
