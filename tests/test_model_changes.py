"""What the server says about the model over a run (issue 26 item 12): a model pulled again mid-run (a new
digest under the same name) is said at the end and the run marked, from both doors and under xdist; a
thinking model whose every reply is empty says so in one line."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.testing import FakeOllamaServer, compose_reply

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated")

SMALL = ("--users", "3", "--perturbations", "noise", "--severities", "1,5", "--progress", "off",
         "--cache", "off", "--guard", "off")
GATE = """
import pytest

@pytest.mark.robustness(min_combined=0.5, min_metric=0.3, perturbations=["noise"], severities=[1, 5], users=3)
def test_gate(robustness):
    pass
"""


def repulling(after: int) -> tuple[FakeOllamaServer, Callable[[], str]]:
    """A fake server that serves a new build of its model once ``after`` chat calls were answered (an
    ``ollama pull`` of an updated tag while the run goes on), and a way to read the new digest."""
    lock, seen, digests = threading.Lock(), [0], [""]
    server: FakeOllamaServer

    def reply(prompt: str, options: dict[str, Any]) -> str:
        with lock:
            seen[0] += 1
            if seen[0] == after:
                digests[0] = server.repull("fake-model:latest")
        return compose_reply(prompt, options)

    server = FakeOllamaServer(reply=reply)
    return server, lambda: digests[0]


def test_a_model_pulled_again_mid_run_is_said_and_the_run_marked(tmp_path: Path) -> None:
    server, new_digest = repulling(after=4)
    with server, pytest.warns(RobustExplainWarning, match="changed during the run") as said:
        code = cli.main(["run", "--model", "fake-model:latest", "--host", server.url, *SMALL,
                         "--json", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    [warning] = [str(w.message) for w in said if "changed during" in str(w.message)]
    assert code in (cli.EXIT_OK, cli.EXIT_GATE_FAILED)
    assert warning.startswith("model fake-model:latest changed during the run")
    assert f"is sha256:{new_digest()[:12]}… now" in warning
    assert doc["settings"]["models_changed"] == ["fake-model:latest"]
    [model] = doc["models"]
    assert model["extra"]["digest_at_end"] == f"sha256:{new_digest()}" != model["digest"]


@pytest.mark.filterwarnings("error::pytest_robustexplain.errors.RobustExplainWarning")
def test_a_model_that_stays_the_same_is_not_marked_and_a_cached_run_asks_nothing(tmp_path: Path) -> None:
    argv = ["run", "--model", "fake-model:latest", *SMALL[:-4], "--progress", "off", "--guard", "off",
            "--cache", "read-write", "--json", str(tmp_path / "r.json")]
    with FakeOllamaServer() as server:
        assert cli.main([*argv, "--host", server.url]) in (cli.EXIT_OK, cli.EXIT_GATE_FAILED)
        first = server.calls["/api/tags"]
        server.reset_stats()
        assert cli.main([*argv, "--host", server.url]) in (cli.EXIT_OK, cli.EXIT_GATE_FAILED)
        warm = server.calls["/api/tags"]
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert "models_changed" not in doc["settings"]
    assert first == 2, "preflight and the check at the end"
    assert warm == 1, "every reply from the cache: nothing could mix two versions, so nothing is asked again"


def test_a_model_pulled_again_mid_run_is_said_under_pytest_and_xdist(
        pytester: pytest.Pytester, xdist_args: tuple[str, ...]) -> None:
    server, new_digest = repulling(after=4)
    pytester.makepyfile(GATE)
    with server:
        result = pytester.runpytest(f"--robustexplain-host={server.url}", "--robustexplain-model=fake-model",
                                    "--robustexplain-cache=off", "--robustexplain-json=r.json",
                                    "--robustexplain-guard=off", *xdist_args)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    said = result.stdout.str() + result.stderr.str()
    assert doc["settings"]["models_changed"] == ["fake-model"]
    assert doc["models"][0]["extra"]["digest_at_end"] == f"sha256:{new_digest()}"
    assert "model fake-model changed during the run" in said


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_thinking_model_that_never_answers_says_so_in_one_sentence(backend: str, tmp_path: Path) -> None:
    """A model that reasons whatever it is told and spends its token limit before the answer: every reply
    is empty. The verdict's first sentence says so and why, not "ρ 0.000 with 12 generation failures"."""
    with FakeOllamaServer(think_capable=True, thinks_only=True) as server:
        host = server.url + ("/v1" if backend == "openai" else "")
        code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host, *SMALL,
                         "--json", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    [gate] = doc["gates"]
    assert code == cli.EXIT_GATE_FAILED and gate["verdict"]["outcome"] == "FAIL"
    assert gate["verdict"]["message"].startswith("Every reply was empty (6 pairs, their originals included): "
                                                 "nothing was explained; the model answered only in its "
                                                 "reasoning (thinking): raise num-predict")
    assert all("answered only in its reasoning" in p["failure_detail"] for p in doc["pairs"])


def test_empty_replies_without_reasoning_name_the_other_cause(tmp_path: Path) -> None:
    with FakeOllamaServer() as server:
        server.empty_next(100)
        cli.main(["run", "--model", "fake-model:latest", "--host", server.url, *SMALL,
                  "--json", str(tmp_path / "r.json")])
    [gate] = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["gates"]
    assert gate["verdict"]["message"].startswith("Every reply was empty (6 pairs")
    assert "check that the model answers this prompt at all" in gate["verdict"]["message"]


def test_a_gate_with_one_real_reply_is_not_called_empty(tmp_path: Path) -> None:
    with FakeOllamaServer() as server:
        server.script(["ok"] * 5 + ["empty"] * 100)  # the warm-up, the originals and one perturbed reply
        cli.main(["run", "--model", "fake-model:latest", "--host", server.url, *SMALL, "--concurrency", "1",
                  "--json", str(tmp_path / "r.json")])
    [gate] = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["gates"]
    assert not gate["verdict"]["message"].startswith("Every reply was empty")
