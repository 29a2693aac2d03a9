"""Serial and ``-n 2`` give the same verdicts: one session that uses every gate, run both ways.

The end-to-end tests of each gate run serially; the route a verdict takes from a worker to the controller
(execnet's serialisation of every record, the controller's report, baselines, comparisons, the judge, the
guard's donors, the flip) is proved here once, on one file whose tests between them use every verdict mode,
every gate and two models. The reports must agree on everything but the clock and the number of calls
(without the cache each worker generates the originals it needs for itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import read_report, stable_report

from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

SESSION = """
import pytest

@pytest.mark.robustness(perturbations=["noise", "shuffle"], severities=[1, 5], users=6, min_combined=0.3,
                        min_metric=0.1, max_misattributed_rate=0.5, min_faithful_rate=0.5)
def test_fixed(robustness):
    pass

@pytest.mark.robustness(perturbations=["noise"], severities=[3], users=6, min_combined=0.9, min_metric=0.1)
def test_strict(robustness):
    pass

# A per-kind slice decides early and releases pairs the overall slice, planned later on the worker, still
# needs: they are queued again, not left cancelled (which once hung a worker).
@pytest.mark.robustness(perturbations=["noise", "shuffle"], decision="sequential", min_combined=0.5,
                        min_metric=0.3, per_kind={"noise": {"min_combined": 0.1}})
def test_sequential(robustness):
    pass

@pytest.mark.robustness(perturbations=["dilution"], severities=[3], users=6, decision="confident",
                        min_combined=0.62, min_metric=0.0, inconclusive="warn")
def test_confident(robustness):
    pass

@pytest.mark.robustness(perturbations=["noise", "preference_flip"], severities=[1, 3], users=8)
def test_flip(robustness):
    pass

@pytest.mark.robustness(perturbations=["prompt_injection", "shilling"], users=5, severities=[3])
def test_security(robustness):
    pass

def test_unmarked():
    pass
"""

# ``calls`` and the judges' tokens count what each process asked: under xdist two workers that judge the same
# original each ask the judge (a prompt is asked once a process), so both are counted as made and paid for.
VOLATILE = {"started_at", "finished_at", "timings", "calls", "latency_s", "original_latency_s", "time",
            "judge_tokens", "judge_cost"}


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(models=("fake-model:latest", "other-model:latest"), mode="rating-aware") as fake:
        yield fake


def _run(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--robustexplain-model=fake-model,other-model",
                              f"--robustexplain-host={server.url}", "--robustexplain-cache=off",
                              "--robustexplain-judge-model=fake-model", "--robustexplain-guard=fail", "-p",
                              "no:randomly", *args)


def _stable(value: Any) -> Any:
    """The report without what depends on the clock, the worker count or the report's own name; the
    gates in one order (under xdist they are recorded as they finish)."""
    return stable_report(value, VOLATILE, lambda settings: dict(settings, json=None), schema=None)


def _outcomes(result: pytest.RunResult) -> dict[str, int]:
    return {k: v for k, v in result.parseoutcomes().items() if k in ("passed", "failed")}


@pytest.mark.parametrize("mode", ["rating-aware", "fragile"])
def test_every_gate_gives_the_same_report_serial_and_under_xdist(
        pytester: pytest.Pytester, server: FakeOllamaServer, tmp_path: Path, mode: str) -> None:
    pytester.makepyfile(SESSION)
    baseline = tmp_path / "baseline.json"
    _run(pytester, server, f"--robustexplain-save-baseline={baseline}")  # the release before
    server.mode = mode
    against = f"--robustexplain-baseline={baseline}"
    serial = _run(pytester, server, against, "--robustexplain-json=serial.json")
    xdist = _run(pytester, server, against, "--robustexplain-json=xdist.json", "-n", "2")
    one, two = read_report(pytester, "serial.json"), read_report(pytester, "xdist.json")
    assert _stable(one) == _stable(two)
    assert _outcomes(serial) == _outcomes(xdist)
    # 6 marked tests × 2 models: 3+1+3+1+3+3 items each; and the unmarked test.
    assert sum(_outcomes(serial).values()) == 2 * 14 + 1
    outcomes = {g["verdict"]["outcome"] for g in one["gates"]}
    modes = {g["verdict"]["mode"] for g in one["gates"]}
    assert {"mean", "sequential", "confident"} <= modes
    assert len(one["comparisons"]) == 1 and one["pairs"]
    gates = {(g["nodeid"].split("::")[-1], g["slice"]): g["verdict"] for g in one["gates"]
             if g["model"] == "fake-model"}
    assert gates[("test_fixed[fake-model-overall]", "overall")]["details"]["faithfulness"]["judged"] > 0
    assert gates[("test_fixed[fake-model-overall]", "overall")]["details"]["polarity"] is not None
    assert gates[("test_flip[fake-model-preference_flip]", "preference_flip")]["details"]["flip"] is not None
    assert gates[("test_security[fake-model-prompt_injection]", "prompt_injection")]["details"]["attacks"]
    if mode == "rating-aware":  # the release before, again: every gate passes
        assert outcomes == {"PASS"} and _outcomes(serial) == {"passed": 29}
    else:  # a regression against the baseline and fragile explanations
        assert "FAIL" in outcomes and "passed" in _outcomes(serial)


KILLED = """
import os
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("the user's own fixture broke")

@pytest.mark.robustness(users=3, severities=[1], perturbations=["noise", "drift"], inconclusive="warn")
def test_gate(robustness, request):
    if "category_drift" in request.node.nodeid:
        os._exit(3)  # its worker dies after the gate was decided, before the item's report is sent

@pytest.mark.robustness(users=3, severities=[1], perturbations=["noise"])
def test_set_up_error(robustness, broken):
    pass
"""


def test_an_item_whose_xdist_worker_died_is_reported_as_not_measured(pytester: pytest.Pytester) -> None:
    """A worker killed mid-item left that item's gate out of every report, silently (issue 41, item 7)."""
    pytester.makepyfile(test_killed=KILLED)
    result = pytester.runpytest_subprocess("--robustexplain-backend=template", "--robustexplain-json=r.json",
                                           "--robustexplain-html=r.html", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(failed=1, passed=2, errors=1, warnings=result.parseoutcomes().get("warnings", 0))
    killed = "test_killed.py::test_gate[category_drift]"
    assert f"crashed while running '{killed}'" in result.stdout.str()
    doc = read_report(pytester)
    assert killed not in {gate["nodeid"] for gate in doc["gates"]}
    said = [e for e in doc["settings"]["errors"] if "not measured" in e]
    # Only the killed item: the set-up error was reported (pytest says it), the rest were decided.
    assert said == [f"{killed}: not measured — no result arrived from its xdist worker (it crashed or was "
                    "killed, or the session stopped before it ran)"]
    assert "Not decided: test_killed.py" in result.stdout.str()
    assert "not measured — no result arrived" in pytester.path.joinpath("r.html").read_text(encoding="utf-8")


SHARED = """
import pytest

@pytest.mark.robustness(users=3, severities=[1], perturbations=["noise", "drift"], inconclusive="warn")
def test_gate(robustness):
    pass
"""


def test_calls_two_xdist_workers_both_made_with_the_cache_off_are_counted(pytester: pytest.Pytester) -> None:
    """With the cache off the workers cannot share the originals and the overall item's pairs (issue 41,
    item 7): the controller says how many calls were made again — exactly the server's extra calls over a
    serial run, less the second worker's warm-up."""
    pytester.makepyfile(test_shared=SHARED)
    calls, said = {}, {}
    for name, args in (("serial", ("-p", "no:xdist")), ("xdist", ("-n", "2"))):
        with FakeOllamaServer() as server:
            result = pytester.runpytest_subprocess(
                "--robustexplain-model=fake-model", "--robustexplain-cache=off",
                f"--robustexplain-host={server.url}", "-p", "no:cacheprovider", *args)
            result.assert_outcomes(passed=3, warnings=result.parseoutcomes().get("warnings", 0))
            calls[name] = server.chat_calls
            said[name] = [line for line in result.outlines if "made by more than one xdist worker" in line]
    assert said["serial"] == []
    (line,) = said["xdist"]
    again = int(line.split("robustexplain: ", 1)[1].split()[0])
    assert again > 0 and calls["xdist"] == calls["serial"] + again + 1, (calls, line)
    assert "the default cache=read-write shares them" in line
