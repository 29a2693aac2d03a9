"""The opt-in embedding metric and several model hosts, end to end against fake Ollama servers."""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.explainers.remote import is_warmup_prompt
from pytest_robustexplain.metrics import Scorer, check_weights, cosine, metric_signature
from pytest_robustexplain.results import ANSWERED_BY, EMBEDDING, answered_by
from pytest_robustexplain.settings import resolve_settings
from pytest_robustexplain.testing import FakeOllamaServer, compose_reply
from pytest_robustexplain.testing.embeddings import EMBED_DIMS, embed_text

pytest_plugins = ["pytester"]

EMBED = "fake-embed:latest"
# Three users cannot decide a gate (their intervals span most of the scale: INCONCLUSIVE); these tests are
# about embeddings, hosts and caches, so an undecided gate only warns.
SMALL = ("--users", "3", "--perturbations", "noise,drift", "--severities", "1,5", "--progress", "off",
         "--inconclusive", "warn")
MARKED = """
import pytest

@pytest.mark.robustness(users=3, severities=[1, 5], perturbations=["noise", "drift"], inconclusive="warn")
def test_gate(robustness):
    assert {robustness.intervals_names}
"""


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(models=("fake-model", EMBED)) as fake:
        yield fake


def explanation_calls(server: FakeOllamaServer) -> int:
    return sum(1 for r in server.requests if not is_warmup_prompt(r["prompt"]))


# ------------------------------------------------------------------------------------- the metric
def test_weights_take_an_optional_fifth_for_embedding() -> None:
    assert check_weights([0.25] * 4) == (0.25,) * 4
    assert check_weights([0.2] * 5) == (0.2,) * 5
    # A zero embedding weight is no embedding weight: the paper's four, and their signature.
    assert check_weights({"semantic": 0.25, "keyword": 0.25, "structural": 0.25, "length": 0.25,
                          EMBEDDING: 0}) == (0.25,) * 4
    with pytest.raises(ValueError, match=r"unknown metric name\(s\) 'embedings'"):
        check_weights({"semantic": 1, "keyword": 0, "structural": 0, "length": 0, "embedings": 0})


def test_the_signature_names_the_embedding_model_only_when_it_is_on() -> None:
    plain = metric_signature()
    assert "emb:" not in plain and "|w:.25/.25/.25/.25|" in plain
    on = metric_signature(embedding="nomic-embed-text")
    assert "|emb:cos,nomic-embed-text|w:.25/.25/.25/.25|" in on and on != plain
    assert "|emb:cos,m|w:.2/.2/.2/.2/.2|" in metric_signature([0.2] * 5, embedding="m")


def test_the_scorer_adds_the_embedding_cosine_and_weights_it_only_when_asked() -> None:
    a = "The speaker suits your love of electronics and music."
    b = "The speaker suits your love of music and gadgets."
    vectors = (tuple(embed_text(a)), tuple(embed_text(b)))
    four = Scorer().score(a, b)
    assert four.embedding is None
    with_embedding = Scorer().score(a, b, vectors=vectors)
    assert with_embedding.embedding == pytest.approx(cosine(*vectors))
    assert with_embedding.combined == four.combined  # weight 0 unless the weights name it
    five = Scorer(weights=[0.2] * 5).score(a, b, vectors=vectors)
    expected = 0.2 * sum(four.metric(m) for m in ("semantic", "keyword", "structural", "length"))
    assert five.combined == pytest.approx(expected + 0.2 * with_embedding.embedding)
    with pytest.raises(ConfigError, match="no embeddings"):
        Scorer(weights=[0.2] * 5).score(a, b)
    assert Scorer().score("", b, vectors=((), vectors[1])).embedding == 0.0  # a failure scores 0


def test_fake_embeddings_are_deterministic_and_see_similarity(server: FakeOllamaServer) -> None:
    stable = compose_reply("1. Wireless Earbuds (id E1) — category: Electronics; rating: 5",
                           {"temperature": 0})
    near = stable.replace("Electronics", "Gadgets")
    far = compose_reply("1. Garden Hose (id G1) — category: Garden; rating: 2", {"temperature": 0},
                        mode="fragile")
    with httpx.Client() as http:
        native = http.post(server.url + "/api/embed", json={"model": EMBED, "input": [stable, near, far]})
        openai = http.post(server.url + "/v1/embeddings", json={"model": EMBED, "input": stable})
        missing = http.post(server.url + "/api/embed", json={"model": "nope", "input": "x"})
    vectors = native.json()["embeddings"]
    assert len(vectors[0]) == EMBED_DIMS and math.isclose(sum(x * x for x in vectors[0]), 1.0)
    assert openai.json()["data"][0]["embedding"] == vectors[0] == embed_text(stable)
    assert cosine(vectors[0], vectors[1]) > 0.9 > 0.5 > cosine(vectors[0], vectors[2])
    assert missing.status_code == 404 and "not found" in missing.json()["error"]
    assert server.embedded_texts == 4 and server.calls["/api/embed"] == 2


def test_an_embedding_run_against_the_fake_server_end_to_end(pytester: pytest.Pytester,
                                                            server: FakeOllamaServer) -> None:
    """A marked test with the embedding metric on: reported beside the four, in the signature, cached."""
    pytester.makepyfile(MARKED.replace("{robustness.intervals_names}", "'embedding' in robustness.intervals"))
    args = ("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
            f"--robustexplain-embed-model={EMBED}", "--robustexplain-weights=.2,.2,.2,.2,.2",
            "--robustexplain-json=r.json", "--robustexplain-markdown=r.md", "--robustexplain-html=r.html")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=3)
    assert "embedding  (embedding cosine)" in result.stdout.str()
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert f"|emb:cos,{EMBED}|w:.2/.2/.2/.2/.2|" in doc["signature"]
    pairs = [p for p in doc["pairs"] if p["key"]["kind"] != "swap"]
    assert pairs and all(0.5 < p["embedding"] <= 1.0 for p in pairs)
    for pair in pairs:  # ρ is the five-way mean
        five = sum(pair[m] for m in ("semantic", "keyword", "structural", "length", "embedding")) / 5
        assert pair["combined"] == pytest.approx(five)
    assert "embedding (embedding cosine)" in (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "embedding" in (pytester.path / "r.html").read_text(encoding="utf-8")
    embedded = server.embedded_texts
    assert embedded > 0

    pytester.runpytest(*args).assert_outcomes(passed=3)  # the rerun: replies and vectors from the cache
    assert server.embedded_texts == embedded + 1  # only the preflight's probe


def test_without_an_embedding_model_the_report_is_the_papers(pytester: pytest.Pytester,
                                                             server: FakeOllamaServer) -> None:
    pytester.makepyfile(MARKED.replace("{robustness.intervals_names}",
                                       "'embedding' not in robustness.intervals"))
    result = pytester.runpytest("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
                                "--robustexplain-json=r.json")
    result.assert_outcomes(passed=3)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert "emb:" not in doc["signature"] and all("embedding" not in p for p in doc["pairs"])
    assert server.embedded_texts == 0 and "embedding cosine" not in result.stdout.str()


def test_embeddings_through_the_openai_compatible_api(server: FakeOllamaServer, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--backend", "openai", "--model", "fake-model:latest", "--host",
                     server.url + "/v1", "--embed-model", EMBED, *SMALL, "--json", "r.json", "-q"])
    assert code == cli.EXIT_OK
    assert server.calls["/v1/embeddings"] > 0 and server.calls["/api/embed"] == 0
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert all("embedding" in p for p in doc["pairs"])


def test_embeddings_replay_offline_from_the_cache(server: FakeOllamaServer, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors are cached like replies: a replay-only rerun needs no server and scores the same."""
    monkeypatch.chdir(tmp_path)
    base = ["run", "--model", "fake-model", "--embed-model", EMBED, *SMALL, "-q"]
    assert cli.main([*base, "--host", server.url, "--json", "live.json"]) == cli.EXIT_OK
    with socket.socket() as dead:  # nothing answers there
        dead.bind(("127.0.0.1", 0))
        offline = f"http://127.0.0.1:{dead.getsockname()[1]}"
        code = cli.main([*base, "--host", offline, "--cache", "replay-only", "--json", "replay.json"])
    assert code == cli.EXIT_OK
    live, replay = (json.loads((tmp_path / name).read_text(encoding="utf-8")) for name in ("live.json",
                                                                                         "replay.json"))
    assert [p["embedding"] for p in replay["pairs"]] == [p["embedding"] for p in live["pairs"]]
    assert replay["calls"]["made"] == 0


def test_a_new_version_of_the_embedding_model_misses_the_vector_cache(
        server: FakeOllamaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors are keyed by the embedding model's digest: after a pull of a new version under the same
    name every text is embedded again (replies stay cached), and the report names the digest."""
    monkeypatch.chdir(tmp_path)
    base = ["run", "--model", "fake-model", "--host", server.url, "--embed-model", EMBED, *SMALL, "-q"]
    assert cli.main([*base, "--json", "first.json"]) == cli.EXIT_OK
    first_texts, first_calls = server.embedded_texts, explanation_calls(server)
    assert cli.main([*base, "--json", "warm.json"]) == cli.EXIT_OK
    assert server.embedded_texts == first_texts + 1  # only the preflight probe
    new_digest = server.repull(EMBED)
    assert cli.main([*base, "--json", "new.json"]) == cli.EXIT_OK
    assert server.embedded_texts - first_texts - 1 == first_texts  # everything embedded again (+ probe)
    assert explanation_calls(server) == first_calls  # the replies were still cached
    digests = [json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))["models"][0]["extra"]
               ["embed_digest"] for name in ("first", "warm", "new")]
    assert digests[0] == digests[1] != digests[2] == f"sha256:{new_digest}"


def test_replay_only_without_recorded_embedding_facts_is_one_clear_error(
        server: FakeOllamaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["run", "--model", "fake-model", *SMALL, "-q"]
    assert cli.main([*base, "--host", server.url]) == cli.EXIT_OK  # replies cached, no embedding model
    capsys.readouterr()
    code = cli.main([*base, "--embed-model", EMBED, "--host", "http://127.0.0.1:9", "--cache", "replay-only"])
    assert code != cli.EXIT_OK
    err = capsys.readouterr().err
    assert f"replay-only: no recorded facts for embedding model {EMBED!r}" in err and "Traceback" not in err


def test_a_missing_embedding_model_is_one_clear_error(server: FakeOllamaServer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--model", "fake-model", "--host", server.url, "--embed-model", "nomic",
                     *SMALL])
    assert code == cli.EXIT_BACKEND
    err = capsys.readouterr().err
    assert f"embedding model 'nomic' not found on {server.url}; run `ollama pull nomic`" in err


# ------------------------------------------------------------------------------------ several hosts
def test_host_lists_in_every_source(tmp_path: Path) -> None:
    def hosts(**layers: Any) -> tuple[str, ...]:
        kwargs = {"cli": {}, "env": {}, "ini": {}, **layers}
        return resolve_settings(**kwargs, yaml_path=None, rootdir=tmp_path, invocation_dir=tmp_path).hosts

    assert hosts() == ()
    assert hosts(cli={"robustexplain_host": "http://a:1, http://b:2"}) == ("http://a:1", "http://b:2")
    assert hosts(env={"ROBUSTEXPLAIN_HOST": "http://a:1,http://b:2"}) == ("http://a:1", "http://b:2")
    assert hosts(ini={"robustexplain_host": "http://a:1"}) == ("http://a:1",)
    (tmp_path / "robustexplain.yaml").write_text("host: [http://a:1, http://b:2]\n", encoding="utf-8")
    assert hosts() == ("http://a:1", "http://b:2")


def test_two_hosts_share_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeOllamaServer() as a, FakeOllamaServer() as b:
        code = cli.main(["run", "--model", "fake-model", "--host", f"{a.url},{b.url}", *SMALL,
                         "--cache", "off", "--json", "two.json", "-q"])
        urls = sorted([a.url, b.url])
        counts = {a.url: explanation_calls(a), b.url: explanation_calls(b)}
    assert code == cli.EXIT_OK
    doc = json.loads((tmp_path / "two.json").read_text(encoding="utf-8"))
    assert all(n > 0 for n in counts.values())  # both hosts answered
    assert answered_by(doc["calls"]) == counts  # the report names which host answered how many
    assert sum(counts.values()) == doc["calls"]["made"]  # and they add up
    assert sorted(doc["models"][0]["extra"]["hosts"]) == urls
    out = capsys.readouterr().out
    assert f"robustexplain: calls by host: {urls[0]} {counts[urls[0]]} · {urls[1]} {counts[urls[1]]}" in out


def test_two_hosts_under_pytest_and_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED.replace("{robustness.intervals_names}", "True"))
    with FakeOllamaServer() as a, FakeOllamaServer() as b:
        result = pytester.runpytest("--robustexplain-model=fake-model",
                                    f"--robustexplain-host={a.url},{b.url}", "--robustexplain-cache=off",
                                    "--robustexplain-json=r.json", "-n", "2")
        first = a.url
        counts = {first: explanation_calls(a), b.url: explanation_calls(b)}
    result.assert_outcomes(passed=3)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert all(n > 0 for n in counts.values())
    assert answered_by(doc["calls"]) == counts and sum(counts.values()) == doc["calls"]["made"]
    assert f"{ANSWERED_BY}{first}" in result.stdout.str()


def test_a_dead_host_is_one_error_naming_it(server: FakeOllamaServer, pytester: pytest.Pytester,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(MARKED.replace("{robustness.intervals_names}", "True"))
    with socket.socket() as dead:  # bound, never listening: every connection is refused
        dead.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{dead.getsockname()[1]}"
        code = cli.main(["run", "--model", "fake-model", "--host", f"{server.url},{dead_url}", *SMALL])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        result = pytester.runpytest("--robustexplain-model=fake-model",
                                    f"--robustexplain-host={server.url},{dead_url}")
    assert code == cli.EXIT_BACKEND
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert f"cannot reach Ollama at {dead_url}" in lines[0]
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"robustexplain: cannot reach Ollama at {dead_url}" in result.stderr.str()
    assert explanation_calls(server) == 0  # preflight decided before any explanation was asked for


# ------------------------------------------------------------------------------------ README examples
def _readme_block(language: str) -> str:
    """The first ``language`` code block under the README's "Settings to copy"."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Settings to copy", 1)[1]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_the_readme_settings_examples_are_accepted(tmp_path: Path) -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest's own dependency
        import tomli as tomllib  # type: ignore[no-redef]

    ini = tomllib.loads(_readme_block("toml"))["tool"]["pytest"]["ini_options"]
    yaml_file = tmp_path / "robustexplain.yaml"
    yaml_file.write_text(_readme_block("yaml"), encoding="utf-8")

    from_yaml = resolve_settings(cli={}, env={}, ini={}, yaml_path=yaml_file, rootdir=tmp_path,
                                 invocation_dir=tmp_path)
    assert from_yaml.model == ("qwen2.5:7b", "llama3.1:8b")
    assert from_yaml.hosts == ("http://gpu-a:11434", "http://gpu-b:11434")
    assert from_yaml.embed_model == "nomic-embed-text" and from_yaml.weights == (0.2,) * 5
    assert from_yaml.per_kind["category_drift"]["min_combined"] == 0.4

    both = resolve_settings(cli={}, env={}, ini=ini, yaml_path=yaml_file, rootdir=tmp_path,
                            invocation_dir=tmp_path)
    assert both.model == ("qwen2.5:7b",) and both.sources["model"].startswith("ini")  # ini > YAML
    assert both.perturbations == ("noise_injection", "temporal_shuffle", "category_drift")
    assert dict(both.min_metric) == {"semantic": 0.5, "keyword": 0.35, "structural": 0.35, "length": 0.35}
    assert both.cache == "read-write"
