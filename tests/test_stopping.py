"""Stopping a run from outside (issue 26 item 12): SIGTERM — what CI runners, ``timeout`` and process
managers send — stops a pytest session as Ctrl-C does: a partial report, how to resume, no traceback; under
xdist the workers stop too (the controller's stop file), making no call after the signal. Only a session
that runs robustness tests changes how SIGTERM is handled, and a host program's own handler is kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_robustexplain.engine.interrupt import SigtermGuard, StopFile, Stopper, Terminated
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

GATE = """
import pytest

@pytest.mark.robustness(min_combined=0.5, min_metric=0.3, perturbations=["noise", "drift"],
                        severities=[1, 5], users=2)
def test_gate(robustness):
    pass
"""


@pytest.fixture
def default_sigterm() -> Iterator[None]:
    """SIGTERM at its default for the test (whatever the runner set), restored after."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# A shell that starts the suite in the background (``cmd &`` without job control) leaves SIGINT ignored, and
# a child Python keeps an inherited SIG_IGN: Ctrl-C would never reach it. The child takes it back first.
_PYTEST_WITH_SIGINT = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import pytest
raise SystemExit(pytest.main(sys.argv[1:]))
"""


def _wait_for(condition: object, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)
    assert condition(), f"never happened: {what}"  # type: ignore[operator]


@pytest.mark.parametrize(("sent", "how"), [(signal.SIGTERM, "terminated (SIGTERM)"),
                                           (signal.SIGINT, "interrupted")])
def test_a_signal_stops_a_pytest_session_with_a_partial_report(
        tmp_path: Path, xdist_args: tuple[str, ...], sent: int, how: str) -> None:
    """The signal goes to pytest (the xdist controller) once every process holds a call the server never
    answers, so no call can finish or start after it: the count after the signal is exact."""
    (tmp_path / "test_gate.py").write_text(GATE, encoding="utf-8")
    workers = 2 if xdist_args else 1
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ROBUSTEXPLAIN_") and k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    with FakeOllamaServer() as server:
        server.script(["ok"] * 6)
        server.hang_next(50, seconds=60)
        proc = subprocess.Popen(
            [sys.executable, "-c", _PYTEST_WITH_SIGINT, "-p", "no:cacheprovider",
             f"--robustexplain-host={server.url}", "--robustexplain-model=fake-model",
             "--robustexplain-json=r.json", "--robustexplain-concurrency=1", *xdist_args],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _wait_for(lambda: server.chat_calls >= 6 + workers and server.in_flight >= workers,
                      "every process waits on a hanging call")
            calls = server.chat_calls
            proc.send_signal(sent)
            out, _ = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        after = server.chat_calls - calls
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert after == 0, "no model call after the signal, in any process"
    assert "Traceback" not in out
    assert f"robustexplain: {how} — " in out and "pairs finished" in out
    assert f"partial report (\"partial\": true in its settings) written to {tmp_path / 'r.json'}" in out
    assert "rerun the same command to resume (cache hits are free)" in out
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert doc["settings"]["partial"] is True


@pytest.mark.usefixtures("isolated", "default_sigterm")
def test_sigterm_is_ours_only_in_a_session_that_runs_robustness_tests(pytester: pytest.Pytester) -> None:
    check = """
import signal

def test_sigterm_handler():
    assert (signal.getsignal(signal.SIGTERM) is signal.SIG_DFL) is {default}
"""
    with FakeOllamaServer() as server:
        args = (f"--robustexplain-host={server.url}", "--robustexplain-model=fake-model",
                "--robustexplain-cache=off", "-p", "no:randomly")
        pytester.makepyfile(test_plain=check.format(default=True))
        pytester.runpytest(*args).assert_outcomes(passed=1)  # a model is set, but no robustness test
        pytester.makepyfile(test_plain=check.format(default=False),
                            test_gate=GATE.replace('"drift"', '"noise"'))
        result = pytester.runpytest(*args, "--robustexplain-guard=off", "--robustexplain-inconclusive=warn")
    result.assert_outcomes(passed=2)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "restored at the session's end"


@pytest.mark.usefixtures("default_sigterm")
def test_a_host_programs_own_sigterm_handler_is_kept() -> None:
    def own(signum: int, frame: object) -> None:
        pass

    signal.signal(signal.SIGTERM, own)
    guard = SigtermGuard()
    guard.arm()
    assert not guard.armed and signal.getsignal(signal.SIGTERM) is own
    guard.disarm()
    assert signal.getsignal(signal.SIGTERM) is own


@pytest.mark.usefixtures("default_sigterm")
def test_sigterm_raises_terminated_and_asks_the_workers_to_stop(tmp_path: Path) -> None:
    stop = StopFile(tmp_path / "stop")
    controller, worker = Stopper(stop_file=stop), Stopper(watch=StopFile(tmp_path / "stop"))
    controller.arm()
    worker.check()  # nothing asked yet
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in this thread at the next bytecode; never reached
    assert controller.how == "terminated (SIGTERM)" and stop.path.exists()
    with pytest.raises(Terminated):
        worker.check()
    assert worker.how == "terminated (SIGTERM)"
    controller.disarm()
    controller.remove_stop_file()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and not stop.path.exists()
