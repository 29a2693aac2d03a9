"""End to end against a real small LLM (SmolLM2-135M-Instruct under llama.cpp), when one is running.

Skipped unless a llama.cpp server answers ``/health`` at ``$ROBUSTEXPLAIN_REAL_LLM_URL`` (default
``http://127.0.0.1:8088``); start one as :data:`real_llm.START_HINT` says (the environment variables
work around this machine's CPU: see ``docs/real-model.md``).

A small sweep (3 users, all five kinds at severity 3: up to 15 pairs, 3 originals and 3 cross-user
controls; the guard only warns, the verdicts are not the point here) runs through
pytester twice per backend — cold, then warm on the same response cache — once through the
OpenAI-compatible backend and once through the Ollama backend (the official ``ollama`` client) talking
to a loopback Ollama adapter in front of llama.cpp (:mod:`real_llm`). Both routes pass through the
adapter, which counts the chat requests that reach llama.cpp: the warm run must add none.

The users come from the paper's synthetic generator with short histories (10–12 interactions, prompts
of about 500 tokens): a CPU spends most of the time reading the prompt, and the bundled dataset's
histories of up to 50 interactions would make the module several times slower without testing more.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_llm import START_HINT, OllamaAdapter, health, real_llm_url, wait_until_ready

from pytest_robustexplain.data import generate_synthetic, save_dataset

pytest_plugins = ["pytester"]

LLM_URL = real_llm_url()
_UNAVAILABLE = health(LLM_URL, timeout=1.0)
# "loading model" is a server that will be ready shortly: let the fixture wait for it.
pytestmark = pytest.mark.skipif(
    _UNAVAILABLE is not None and "503" not in _UNAVAILABLE,
    reason=f"no real LLM server: {_UNAVAILABLE}; start one with {START_HINT} or set "
           "ROBUSTEXPLAIN_REAL_LLM_URL")

USERS = 3
MARKED = f"""
import pytest

@pytest.mark.robustness(min_combined=0.0, min_metric=0.0, users={USERS}, severities=[3], guard="warn")
def test_real_model(robustness):
    assert robustness.pairs
"""
# 128 tokens keeps an explanation to a paragraph (SmolLM2-135M otherwise tends to repeat itself to the
# limit) and the module to a few minutes on 2 cores. The server has 4 slots.
# A gate with too many replies cut at 128 tokens is INCONCLUSIVE ("Not measured"): warned, so the items pass
# and the test asserts what the run said about them.
RUN_OPTIONS = ("--robustexplain-num-predict=128", "--robustexplain-concurrency=4",
               "--robustexplain-timeout=300", "--robustexplain-retries=1",
               "--robustexplain-inconclusive=warn", "-p", "no:randomly")

BACKENDS = {
    # backend: (model name, path appended to the adapter's URL)
    "openai": ("smollm2-135m-instruct", "/v1"),
    "ollama": ("smollm2:135m", ""),
}


@pytest.fixture(scope="module")
def llama_url() -> str:
    reason = wait_until_ready(LLM_URL, timeout_s=180)
    if reason is not None:
        pytest.fail(f"the llama.cpp server at {LLM_URL} did not become ready: {reason}")
    return LLM_URL


@pytest.fixture(scope="module")
def short_histories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset directory: the synthetic generator's users with 10–12 interactions each."""
    directory = tmp_path_factory.mktemp("short-histories")
    save_dataset(generate_synthetic(n_users=12, n_cases=USERS, min_len=10, max_len=12), directory)
    return directory


@pytest.fixture
def adapter(llama_url: str) -> Iterator[OllamaAdapter]:
    with OllamaAdapter(llama_url, model=BACKENDS["ollama"][0]) as running:
        yield running
    assert not running.errors, running.errors


def _run(pytester: pytest.Pytester, backend: str, host: str, dataset: Path, cache: Path,
         report: Path) -> dict[str, Any]:
    model = BACKENDS[backend][0]
    result = pytester.runpytest(f"--robustexplain-backend={backend}", f"--robustexplain-host={host}",
                                f"--robustexplain-model={model}", f"--robustexplain-dataset={dataset}",
                                f"--robustexplain-cache-dir={cache}", f"--robustexplain-json={report}",
                                *RUN_OPTIONS)
    result.assert_outcomes(passed=6)  # five kinds + overall, thresholds 0: the verdicts are not the point
    assert report.is_file(), "no JSON report written"
    doc: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_real_model_sweep_cold_then_warm(pytester: pytest.Pytester, adapter: OllamaAdapter,
                                         short_histories: Path, tmp_path: Path, backend: str) -> None:
    pytester.makepyfile(MARKED)
    host = adapter.url + BACKENDS[backend][1]
    cold = _run(pytester, backend, host, short_histories, tmp_path / "cache", tmp_path / "cold.json")

    pairs = cold["pairs"]
    users = {p["key"]["user_id"] for p in pairs}
    assert len(users) == USERS and len(pairs) >= 12  # a severity-3 perturbation rarely changes nothing
    assert all(p["failure"] is None for p in pairs), [p["failure_detail"] for p in pairs if p["failure"]]
    assert all(p["original"].strip() and p["perturbed"].strip() for p in pairs)
    # Real text: not identical on every pair, not unrelated on every pair.
    assert any(0.0 < p["combined"] < 1.0 for p in pairs)
    assert {p["key"]["kind"] for p in pairs} == {"noise_injection", "temporal_shuffle", "behavior_dilution",
                                                  "category_drift", "missing_values", "swap"}
    assert sum(p["key"]["kind"] == "swap" for p in pairs) == USERS  # one cross-user control per user
    # Every original and every perturbed explanation was one request to llama.cpp, plus the warm-up.
    assert cold["calls"]["made"] == len(users) + len(pairs)
    assert adapter.chat_calls == cold["calls"]["made"] + 1
    (model,) = cold["models"]
    assert model["backend"] == backend and model["digest"]
    # What the server said about each reply: cut ones flagged on their pairs, counted, and gating.
    cut = [p for p in pairs if p.get("cut")]
    assert (cold["calls"].get("cut at num_predict", 0) > 0) == bool(cut)
    assert cold["aggregates"][model["name"]]["cut_pairs"] == len(cut)
    # What the model took, call by call: every reply timed, each original once.
    time = cold["aggregates"][model["name"]]["time"]
    assert time["calls"] == cold["calls"]["made"] and time["seconds"] > 0 and time["median"] > 0
    assert all(p["original_latency_s"] > 0 and p["latency_s"] > 0 for p in pairs)
    assert time["per_verdict"][2] == len(cold["gates"])
    for gate in cold["gates"]:
        gated = [p for p in pairs
                 if gate["slice"] == "overall" or p["key"]["kind"] in (gate["slice"], "swap")]
        if sum(bool(p.get("cut")) for p in gated) > 0.05 * len(gated):
            assert gate["verdict"]["outcome"] == "INCONCLUSIVE", gate["verdict"]["message"]
            assert gate["verdict"]["message"].startswith("Not measured: ")

    adapter.reset()
    warm = _run(pytester, backend, host, short_histories, tmp_path / "cache", tmp_path / "warm.json")
    assert adapter.chat_calls == 0
    assert warm["calls"]["made"] == 0 and warm["calls"]["cached"] == len(users) + len(pairs)
    assert [(p["key"], p["combined"]) for p in warm["pairs"]] == [(p["key"], p["combined"]) for p in pairs]
    assert warm["aggregates"][model["name"]]["time"] == time  # cached replies keep what their calls took


LONG_USERS = 2
LONG_MARKED = f"""
import pytest

@pytest.mark.robustness(min_combined=0.0, min_metric=0.0, users={LONG_USERS}, perturbations=["noise"],
                        severities=[1], guard="off")
def test_long_prompts(robustness):
    assert robustness.pairs
"""


@pytest.fixture(scope="module")
def long_histories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Users with 130–140 interactions: prompts of ~6,000 tokens, past a 4,096-token slot."""
    directory = tmp_path_factory.mktemp("long-histories")
    save_dataset(generate_synthetic(n_users=12, n_cases=LONG_USERS, min_len=130, max_len=140), directory)
    return directory


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_prompts_longer_than_the_context_are_never_scored(pytester: pytest.Pytester, adapter: OllamaAdapter,
                                                          long_histories: Path, tmp_path: Path,
                                                          backend: str) -> None:
    """llama.cpp refuses a prompt longer than its slot; Ollama (the adapter, as Ollama does) truncates it
    silently. Either way the users are named before the calls and no gate takes such a pair as measured."""
    pytester.makepyfile(LONG_MARKED)
    report = tmp_path / "long.json"
    result = pytester.runpytest(
        f"--robustexplain-backend={backend}", f"--robustexplain-host={adapter.url + BACKENDS[backend][1]}",
        f"--robustexplain-model={BACKENDS[backend][0]}", f"--robustexplain-dataset={long_histories}",
        "--robustexplain-max-history=all", "--robustexplain-cache=off", f"--robustexplain-json={report}",
        *RUN_OPTIONS)
    result.assert_outcomes(passed=1)  # one kind, one item: INCONCLUSIVE, warned
    doc: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    (model,) = doc["models"]
    window = model["extra"]["context"]["tokens"]
    assert window == 4096  # the slot's context (llama.cpp), or num_ctx sent (Ollama)
    if backend == "openai":  # llama.cpp's /tokenize counts them before any call
        result.stdout.fnmatch_lines([f"*{LONG_USERS} of {LONG_USERS} users' prompts may not fit the model's "
                                     f"context of {window:,} tokens*(counted by the server's tokenizer*"])
    # Ollama has no tokenizer to ask, and SmolLM2 reads these histories at about 2 characters a token:
    # the warning's 3 misses them; the token counts of the replies catch every one (below).
    pairs = doc["pairs"]
    assert pairs and all(p.get("overflow") == ["original", "perturbed"] for p in pairs)
    if backend == "openai":  # refused by llama.cpp, with its numbers
        assert all(p["failure"] == "context" for p in pairs)
        assert "exceeds the context of 4,096 tokens" in pairs[0]["failure_detail"]
        assert doc["calls"]["made"] == doc["calls"]["prompt over the context"]
    else:  # answered from the history's tail: real text, flagged from the token counts alone
        assert all(p["failure"] is None and p["original"].strip() for p in pairs)
        assert adapter.truncated == doc["calls"]["prompt over the context"] == doc["calls"]["made"]
        assert "the server read" in pairs[0]["overflow_detail"]
    for gate in doc["gates"]:
        assert gate["verdict"]["outcome"] == "INCONCLUSIVE"
        message = gate["verdict"]["message"]
        assert message.startswith("Not measured: ") and message.count("Not measured") == 1
        assert "did not fit the model's context" in message


JUDGED = f"""
import pytest

@pytest.mark.robustness(min_combined=0.0, min_metric=0.0, users={USERS}, perturbations=["noise"],
                        severities=[3], guard="warn", min_faithful_rate=0.5)
def test_judged(robustness):
    assert robustness.verdict.faithfulness is not None
"""


def test_a_real_model_as_its_own_judge_is_read_strictly_and_cached(
        pytester: pytest.Pytester, adapter: OllamaAdapter, short_histories: Path, tmp_path: Path) -> None:
    """SmolLM2 explains and judges: every original gets two judge calls (the history as shown and reversed),
    every reply is either a verdict in the fixed shape or a counted judge failure, a gate resting on more
    than 5 % failures is not measured (never a PASS), and a warm rerun asks nothing."""
    pytester.makepyfile(JUDGED)
    model, path = BACKENDS["openai"]
    args = ("--robustexplain-backend=openai", f"--robustexplain-host={adapter.url}{path}",
            f"--robustexplain-model={model}", f"--robustexplain-judge-model={model}",
            f"--robustexplain-dataset={short_histories}", f"--robustexplain-cache-dir={tmp_path / 'cache'}",
            f"--robustexplain-json={tmp_path / 'r.json'}", *RUN_OPTIONS)
    pytester.runpytest(*args).assert_outcomes(passed=1)  # inconclusive=warn: the item passes, warned
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert doc["calls"]["judge calls made"] == 2 * USERS and doc["calls"]["judge calls cached"] == 0
    assert doc["settings"]["judge_signature"].startswith(f"{model}@")
    for gate in doc["gates"]:
        found = gate["verdict"]["details"]["faithfulness"]
        texts = found["texts"]
        assert len(texts) == USERS and found["judged"] + found["failures"] == USERS
        assert all((t["faithful"] is None) == bool(t["failure"]) for t in texts)
        if found["failures"] > 0.05 * USERS:
            assert found["outcome"] == "INCONCLUSIVE" and gate["verdict"]["outcome"] != "PASS"
    adapter.reset()
    pytester.runpytest(*args).assert_outcomes(passed=1)
    assert adapter.chat_calls == 0
