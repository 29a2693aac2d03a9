"""Reply fields of other types or ranges than the protocol's (issue 41, item 4): one check every backend's
replies pass (``RemoteExplainer.checked``). Content is text, nothing or text parts joined — a number or an
object fails the call saying so; token counts are finite non-negative integers, anything else is unknown and
said once; an error sent with status 200 is the call's failure with the server's words; the model a reply
names is compared with the one asked."""

from __future__ import annotations

import asyncio
import json
import math
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_robustexplain.data import Item, UserHistory, history_from, item_from
from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.explainers.base import FAILURE_ERROR, Explanation
from pytest_robustexplain.explainers.ollama import OllamaExplainer
from pytest_robustexplain.explainers.openai_compat import OpenAICompatExplainer
from pytest_robustexplain.explainers.reply import MalformedReply, names_the_model, reply_text, token_count
from pytest_robustexplain.explainers.retry import RetryPolicy
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

HISTORY: UserHistory = history_from([{"item_id": "a", "category": "Books", "title": "Dune", "rating": 5}])
ITEM: Item = item_from({"item_id": "b", "category": "Books", "title": "Hyperion"})
INF = math.inf
T = TypeVar("T")


def _no_sleep(_seconds: float) -> None:
    return None


def _explainer(backend: str, url: str) -> Any:
    retry = RetryPolicy(max_attempts=1, sleep=_no_sleep)
    if backend == "ollama":
        return OllamaExplainer("fake-model", host=url, retry=retry)
    return OpenAICompatExplainer("fake-model:latest", base_url=url + "/v1", retry=retry)


def _explain_with(backend: str, **fields: Any) -> tuple[Explanation, list[str]]:
    """One explanation whose reply has ``fields`` set (after a normal one: preflight and warm-up), and the
    RobustExplainWarnings raised meanwhile."""
    async def run(server: FakeOllamaServer) -> Explanation:
        explainer = _explainer(backend, server.url)
        try:
            await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            server.reshape_next(2, **fields)
            first = await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            second = await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            assert (first.text, first.failure) == (second.text, second.failure)
            return first
        finally:
            await explainer.aclose()

    return _against_a_server(run, "token counts")


def _against_a_server(run: Callable[[FakeOllamaServer], Awaitable[T]], *about: str) -> tuple[T, list[str]]:
    """What ``run`` returns against a fresh fake server, and the RobustExplainWarnings raised meanwhile that
    say one of ``about``."""
    with FakeOllamaServer() as server, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = asyncio.run(run(server))
    said = [str(w.message) for w in caught if issubclass(w.category, RobustExplainWarning)
            and any(words in str(w.message) for words in about)]
    return result, said


COUNTS = {
    "ollama": [("eval_count", INF), ("eval_count", "12"), ("eval_count", [1]), ("prompt_eval_count", -3),
               ("eval_count", 1.5), ("eval_count", True), ("prompt_eval_count", math.nan)],
    "openai": [("usage__prompt_tokens", INF), ("usage__completion_tokens", "9"), ("usage__prompt_tokens", -1),
               ("usage__completion_tokens", 2.5), ("usage__prompt_tokens", False)],
}


@pytest.mark.parametrize(("backend", "field", "value"),
                         [(b, f, v) for b, cases in COUNTS.items() for f, v in cases])
def test_a_count_that_is_no_count_is_unknown_and_said_once(backend: str, field: str, value: Any) -> None:
    explanation, said = _explain_with(backend, **{field: value})
    assert explanation.failure is None and explanation.text.startswith("We recommend")  # the text is fine
    prompt = field in ("prompt_eval_count", "usage__prompt_tokens")
    assert (explanation.prompt_tokens is None) is prompt
    assert (explanation.completion_tokens is None) is not prompt
    assert len(said) == 1 and "are recorded as unknown" in said[0]  # two such replies, one warning


def test_a_usage_that_is_no_object_leaves_both_counts_unknown() -> None:
    explanation, said = _explain_with("openai", usage=[])
    assert explanation.failure is None and explanation.text
    assert (explanation.prompt_tokens, explanation.completion_tokens) == (None, None) and len(said) == 1


@pytest.mark.parametrize("backend", ["ollama", "openai"])
@pytest.mark.parametrize(("value", "said"), [
    (7, "a JSON number, not text"), ({"a": 1}, "a JSON object, not text"),
    ([{"type": "image"}], "a list holding a JSON object, not text parts"),
])
def test_content_that_is_no_text_fails_the_call_saying_so(backend: str, value: Any, said: str) -> None:
    field = "message__content" if backend == "ollama" else "choices__0__message__content"
    explanation, _ = _explain_with(backend, **{field: value})
    assert explanation.failure == FAILURE_ERROR and said in explanation.detail


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_content_as_text_parts_is_joined(backend: str) -> None:
    field = "message__content" if backend == "ollama" else "choices__0__message__content"
    explanation, _ = _explain_with(backend, **{field: [{"type": "text", "text": "Hyperion fits "},
                                                       "your taste for Dune."]})
    assert explanation.failure is None and explanation.text == "Hyperion fits your taste for Dune."


@pytest.mark.parametrize(("backend", "fields", "said"), [
    ("ollama", {"message": None, "error": "model runner crashed"},
     "answered with an error: model runner crashed"),
    ("openai", {"choices": None, "error": {"message": "quota exceeded"}},
     "answered with an error: quota exceeded"),
])
def test_an_error_sent_with_status_200_keeps_the_servers_words(backend: str, fields: dict[str, Any],
                                                              said: str) -> None:
    explanation, _ = _explain_with(backend, **fields)
    assert explanation.failure == FAILURE_ERROR and said in explanation.detail


def test_the_checks_themselves() -> None:
    assert [token_count(v) for v in (0, 12, 12.0, -1, 1.5, INF, math.nan, "3", True, None, [1])] == [
        0, 12, 12, None, None, None, None, None, None, None, None]
    assert reply_text(None) is None and reply_text("x") == "x" and reply_text(["a", {"text": "b"}]) == "ab"
    with pytest.raises(MalformedReply, match="JSON boolean"):
        reply_text(False)


def test_a_model_name_matches_as_servers_vary_it_and_nothing_else() -> None:
    asked = ("gpt-4o", None, "")
    for same in ("gpt-4o", "GPT-4o", "gpt-4o-2024-08-06", "gpt-4o-20240806", "gpt-4o-0613", " gpt-4o "):
        assert names_the_model(same, asked), same
    for other in ("gpt-4o-mini", "gpt-4o-mini-2024-07-18", "gpt-4", "gpt-4o-2024-08-06-evil", "llama3",
                  "gpt-4o-12345"):
        assert not names_the_model(other, asked), other
    assert names_the_model("fake-model:latest", ("fake-model",))  # Ollama's resolved name
    # llama.cpp answers with the alias it loaded whatever is asked: its model list serves that name.
    assert names_the_model("smollm2-135m-instruct", ("smollm2", None, "smollm2-135m-instruct"))
    assert not names_the_model("qwen2.5", ("smollm2", None, "smollm2-135m-instruct"))


def _named(backend: str, name: str) -> tuple[dict[str, int], list[str]]:
    """The names an explainer's replies gave (its record) and what it said about them, when two replies
    (after normal ones: preflight, warm-up, a first explanation) name ``name``, and a last one is normal."""
    async def run(server: FakeOllamaServer) -> dict[str, int]:
        explainer = _explainer(backend, server.url)
        try:
            await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            assert "answered_as" not in explainer.info.extra  # the name asked: nothing to record
            server.reshape_next(2, model=name)
            for _ in range(3):
                explanation = await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
                assert explanation.failure is None  # a name is no reason to fail the call
            answered: dict[str, int] = explainer.info.extra.get("answered_as", {})
            return answered
        finally:
            await explainer.aclose()

    return _against_a_server(run, "names the model", "more than one model")


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_replies_naming_another_model_are_recorded_and_said_once(backend: str) -> None:
    answered, said = _named(backend, "cheap-fallback:1b")
    # The warm-up and two replies named the model asked, two the fallback (the gateway's, say).
    assert answered == {"fake-model:latest": 3, "cheap-fallback:1b": 2}
    assert len(said) == 2
    assert "a reply names the model 'cheap-fallback:1b', which is not the model asked for" in said[0]
    assert "replies named more than one model during the run ('fake-model:latest' (2 replies), " \
           "'cheap-fallback:1b' (1 reply))" in said[1]


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_name_made_of_control_characters_is_shown_not_obeyed(backend: str) -> None:
    answered, said = _named(backend, "x\n::error title=pwned::y")
    shown = "x\u23ce\u2236\u2236error title=pwned\u2236\u2236y"  # ⏎ and ∶∶: seen, not obeyed by a runner
    assert answered == {"fake-model:latest": 3, shown: 2}
    assert len(said) == 2 and all("::" not in s and "\n" not in s for s in said) and shown in said[0]


def test_a_run_answered_by_another_model_says_so_and_records_it(tmp_path: Path) -> None:
    from pytest_robustexplain import cli

    report = tmp_path / "r.json"
    with FakeOllamaServer() as server, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        server.answer_as = "cheap-fallback:1b"  # a gateway answering every request with its fallback
        code = cli.main(["run", "--model", "fake-model", "--host", server.url, "--users", "3",
                         "--perturbations", "noise", "--severities", "1", "--progress", "off", "--cache",
                         "off", "--guard", "off", "--inconclusive", "warn", "--json", str(report)])
        made = server.calls["/api/chat"]
    assert code == 0
    said = [str(w.message) for w in caught if "names the model 'cheap-fallback:1b'" in str(w.message)]
    assert len(said) == 1
    model = json.loads(report.read_text(encoding="utf-8"))["models"][0]
    assert model["extra"]["answered_as"] == {"cheap-fallback:1b": made}  # the warm-up's reply included


MARKED_TWO_KINDS = """
import pytest

@pytest.mark.robustness(perturbations=["noise", "drift"], severities=[1, 5], users=6, guard="off",
                        inconclusive="warn")
def test_gate(robustness):
    pass
"""


def test_what_replies_showed_reaches_the_report_serial_and_under_xdist(
        pytester: pytest.Pytester, xdist_args: tuple[str, ...]) -> None:
    """A context inferred from the counts and the names replies gave are found in whichever process made
    the calls; under xdist the controller's report combines the workers' (the smallest context, every
    name's replies summed)."""
    pytester.makepyfile(MARKED_TWO_KINDS)
    with FakeOllamaServer(hidden_context=500) as server:
        server.answer_as = "cheap-fallback:1b"
        result = pytester.runpytest_subprocess(
            *xdist_args, "-p", "no:randomly", "--robustexplain-model=fake-model",
            f"--robustexplain-host={server.url}", "--robustexplain-num-ctx=8192",
            "--robustexplain-cache=off", "--robustexplain-json=r.json", timeout=300)
        made = server.calls["/api/chat"]
    assert result.ret == 0, result.stdout.str()
    model = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["models"][0]
    assert model["extra"]["inferred_context"]["tokens"] == 500
    assert model["extra"]["answered_as"] == {"cheap-fallback:1b": made}  # each worker's warm-up included


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_replies_naming_the_model_asked_say_nothing(backend: str) -> None:
    answered, said = _named(backend, "fake-model:latest")
    assert answered == {} and said == []


def test_a_run_whose_server_reports_infinite_counts_writes_every_report(pytester: pytest.Pytester) -> None:
    """Before: INTERNALERROR at the session's end, no JSON, HTML or JUnit. Now the counts are unknown, the
    reports are written and the project's own reader reads the JSON back."""
    pytester.makepyfile(test_gate="""
import pytest

@pytest.mark.robustness(perturbations=["noise_injection"], severities=[2], guard="off")
def test_gate(robustness):
    pass
""")
    with FakeOllamaServer() as server:
        server.reshape_next(10_000, eval_count=INF, prompt_eval_count=-1)
        result = pytester.runpytest(f"--robustexplain-host={server.url}", "--robustexplain-model=fake-model",
                                    "--robustexplain-users=3", "--robustexplain-cache=off",
                                    "--robustexplain-json=r.json", "--robustexplain-html=r.html",
                                    "--junitxml=j.xml", "-p", "no:cacheprovider", "-W",
                                    "ignore::pytest_robustexplain.errors.RobustExplainWarning")
    assert result.ret in (0, 1) and "INTERNALERROR" not in result.stdout.str()
    from pytest_robustexplain.report.json_report import read_json

    report = read_json(pytester.path / "r.json")
    assert report.pairs and all(p.failure is None for p in report.pairs)
    assert (pytester.path / "r.html").is_file() and (pytester.path / "j.xml").is_file()
    json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))  # strict JSON: no Infinity in it


# ------------------------------------------------------------------------------ embedding vectors
@pytest.mark.parametrize(("body", "said"), [
    ({"embeddings": [[0.1, math.nan, 0.3]]}, "NaN or Infinity"),
    ({"embeddings": [[0.1, INF]]}, "NaN or Infinity"),
    ({"embeddings": [[]]}, "an empty vector"),
    ({"embeddings": [["x"]]}, "did not answer with embeddings"),
])
def test_an_embedding_a_cosine_cannot_read_is_one_error_naming_the_model(body: dict[str, Any],
                                                                        said: str) -> None:
    from pytest_robustexplain.errors import BackendError
    from pytest_robustexplain.explainers.embedding import EmbeddingClient

    client = EmbeddingClient("nomic-embed-text", host="http://127.0.0.1:9")
    with pytest.raises(BackendError, match=f"nomic-embed-text.*{said}|{said}.*nomic-embed-text"):
        client._vectors(body)


def test_vectors_of_another_length_than_the_models_first_are_refused() -> None:
    from pytest_robustexplain.errors import BackendError
    from pytest_robustexplain.explainers.embedding import Embedder

    class Client:
        api, model, host = "ollama", "nomic-embed-text", "http://127.0.0.1:9"
        sizes = iter([3, 3, 4])

        async def embed(self, texts: list[str]) -> list[tuple[float, ...]]:
            return [tuple(1.0 for _ in range(next(self.sizes))) for _ in texts]

    embedder = Embedder(Client())  # type: ignore[arg-type]

    async def go() -> None:
        assert len(await embedder.vector("a")) == 3 and len(await embedder.vector("b")) == 3
        with pytest.raises(BackendError, match="a vector of 4 numbers after vectors of 3"):
            await embedder.vector("c")

    asyncio.run(go())


# ------------------------------------------------------------------------------ compressed bodies
@pytest.mark.parametrize("backend", ["ollama", "openai"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity"])
def test_a_compressed_reply_is_read(backend: str, encoding: str) -> None:
    async def run(server: FakeOllamaServer) -> Explanation:
        explainer = _explainer(backend, server.url)
        try:
            plain = await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            server.compress_next(1, encoding)
            packed = await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            assert packed.text == plain.text and packed.completion_tokens == plain.completion_tokens
            return packed
        finally:
            await explainer.aclose()

    with FakeOllamaServer() as server:
        assert asyncio.run(run(server)).failure is None


def test_a_reply_in_an_encoding_the_client_does_not_read_is_one_sentence() -> None:
    async def run(server: FakeOllamaServer) -> Explanation:
        explainer = _explainer("ollama", server.url)
        try:
            await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            server.compress_next(1, "br")
            return await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
        finally:
            await explainer.aclose()

    with FakeOllamaServer() as server:
        explanation = asyncio.run(run(server))
    assert explanation.failure == FAILURE_ERROR
    assert "compressed with 'br', which this client does not read" in explanation.detail


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_small_gzip_that_expands_past_the_limit_is_refused_as_it_inflates(backend: str) -> None:
    """Issues 60 and 61: a 20 KB gzip body that inflates to 20 MB is refused by what it inflates to, on
    every backend (httpx inflated a whole chunk before any bound saw it: 730 MB at 4 requests in flight)."""
    import gzip

    from pytest_robustexplain.explainers.reply import MAX_REPLY_BYTES
    from pytest_robustexplain.testing.handler import bomb_body

    assert len(bomb_body()) < MAX_REPLY_BYTES // 100 and len(gzip.decompress(bomb_body())) > MAX_REPLY_BYTES

    async def run(server: FakeOllamaServer) -> Explanation:
        explainer = _explainer(backend, server.url)
        try:
            await explainer.explain(HISTORY, ITEM, seed=1, repeat=0)
            server.bomb_next(1)
            return await explainer.explain(HISTORY, ITEM, seed=2, repeat=0)
        finally:
            await explainer.aclose()

    with FakeOllamaServer() as server:
        explanation = asyncio.run(run(server))
    assert explanation.failure == FAILURE_ERROR and "longer than 8 MiB" in explanation.detail


def test_the_transport_inflates_never_past_its_bound() -> None:
    import zlib

    from pytest_robustexplain.explainers.transport import _inflate, inflater_for

    packed = zlib.compress(b"\0" * 1_000_000, 9)
    out = _inflate(inflater_for("deflate", packed), packed, 1000)
    assert sum(map(len, out)) <= 1000  # what lies past the bound is never inflated
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # deflate without its zlib header, as some servers send
    body = raw.compress(b'{"a": 1}') + raw.flush()
    assert b"".join(_inflate(inflater_for("deflate", body), body, 100)) == b'{"a": 1}'


def test_one_vector_for_every_text_is_said_and_huge_vectors_keep_their_cosine() -> None:
    """A model that gives every text the same vector — here ±1e200, whose squares overflow — is said once, and
    the cosine of such vectors is read at their scale (1.0 for equal vectors), not as 0 from an overflow."""
    from pytest_robustexplain.errors import RobustExplainWarning
    from pytest_robustexplain.explainers.embedding import SAME_VECTOR_TEXTS, Embedder
    from pytest_robustexplain.metrics.base import cosine

    class Client:
        api, model, host = "ollama", "flat-embed", "http://127.0.0.1:9"

        async def embed(self, texts: list[str]) -> list[tuple[float, ...]]:
            return [(1e200, -1e200, 1e200) for _ in texts]

    embedder = Embedder(Client())  # type: ignore[arg-type]

    async def go() -> list[tuple[float, ...]]:
        return [await embedder.vector(f"text {n}") for n in range(SAME_VECTOR_TEXTS + 3)]

    with pytest.warns(RobustExplainWarning, match=f"'flat-embed' gave one vector for {SAME_VECTOR_TEXTS} "
                                                  "different explanations") as caught:
        vectors = asyncio.run(go())
    assert len(caught) == 1
    assert cosine(vectors[0], vectors[1]) == 1.0
    assert cosine((1e200, 0.0), (0.0, 1e200)) == 0.0
    assert cosine((1e-200, 1e-200), (1e-200, 0.0)) == pytest.approx(math.sqrt(0.5))
    assert cosine((0.6, 0.8), (0.8, 0.6)) == 0.96  # the usual vectors: as before, to the last digit


@pytest.mark.parametrize(("fields", "reused"), [
    ({"usage.prompt_tokens_details.cached_tokens": 7}, 7),  # OpenAI, vLLM, recent llama.cpp
    ({"timings.cache_n": 5}, 5),  # llama.cpp's own timings
    ({"timings.cache_n": 0}, 0),  # said, and nothing reused: still said
    ({"usage.prompt_tokens_details.cached_tokens": "many"}, None),  # not a count: not said
    ({"system_fingerprint": "fp"}, None),  # a server that does not say (Ollama's /v1 before 0.30)
])
def test_what_the_server_says_it_took_from_its_prompt_cache_is_kept(fields: dict[str, Any],
                                                                     reused: int | None) -> None:
    """Issue 64 item 5: the prompt tokens a server says it reused from its prompt cache (``cached_tokens``,
    ``cache_n``) are each reply's ``reused_tokens`` — what a run's counters add up for the calls it made."""
    from pytest_robustexplain.results import REUSED_TOKENS
    from pytest_robustexplain.sweep.records import Counters

    explanation, _ = _explain_with("openai", **fields)
    assert explanation.ok and explanation.reused_tokens == reused
    counters = Counters()
    counters.count(explanation)
    counters.count(replace(explanation, cached=True))  # a response-cache hit reads no prompt at all
    said = counters.to_dict()
    assert said.get(REUSED_TOKENS) == (reused or None)  # a count of 0 is not listed, as no other is
