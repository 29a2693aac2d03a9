"""Prompts longer than the model's context: the context is read where the server states it, the users whose
prompts will not fit are named before any call, a refused prompt (llama.cpp, vLLM) is that call's failure
with the server's numbers, a prompt Ollama truncated silently is detected from its token counts, and a
gate with any such pair is not measured (INCONCLUSIVE, naming a user, the tokens and the limit) — with the
report still written. The fake server truncates like Ollama and refuses like llama.cpp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.engine.decide import with_unfit_prompts
from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.explainers.context import (
    ContextWindow,
    PromptSizer,
    overflow_of,
    trained_context,
    window_for_ollama,
    window_from_openai_entry,
)
from pytest_robustexplain.explainers.prompt import PromptTemplate
from pytest_robustexplain.results import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    PairKey,
    PairResult,
    Verdict,
    pair_from_dict,
)
from pytest_robustexplain.testing import FakeOllamaServer

SMALL = ("--perturbations", "noise,drift", "--severities", "1,5", "--progress", "off", "--guard", "warn",
         "--cache", "off", "--inconclusive", "warn")

# llama.cpp b6xxx's reply to a prompt longer than its slot context, as the real server sends it.
LLAMA_CPP_400 = ('{"error":{"code":400,"message":"request (2031 tokens) exceeds the available context size '
                 '(512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2031,'
                 '"n_ctx":512}}')

pytestmark = pytest.mark.usefixtures("isolated")


# --------------------------------------------------------------------------------- the server's words
def test_refusals_are_read_from_every_server_shape() -> None:
    found = overflow_of(400, LLAMA_CPP_400)
    assert found is not None and (found.prompt_tokens, found.limit) == (2031, 512)
    assert found.detail == "prompt of 2,031 tokens exceeds the context of 512 tokens"
    vllm = ('{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you '
            'requested 5120 tokens (4864 in the messages, 256 in the completion).","type":'
            '"BadRequestError","code":400}')
    found = overflow_of(400, vllm)
    assert found is not None and (found.prompt_tokens, found.limit) == (5120, 4096)
    openai = ('{"error":{"message":"too long","type":"invalid_request_error",'
              '"code":"context_length_exceeded"}}')
    assert overflow_of(400, openai) is not None
    # Other 400s stay what they were (the run-stopping "refused a request as invalid"); so does a 500.
    other = '{"error":{"message":"unknown option top_z","type":"invalid_request_error"}}'
    assert overflow_of(400, other) is None
    assert overflow_of(400, "<html>Bad Request</html>") is None
    assert overflow_of(500, LLAMA_CPP_400) is None


def test_the_context_is_read_where_each_server_states_it() -> None:
    assert window_for_ollama(4096, None) == ContextWindow(4096, "num_ctx sent with every request")
    assert window_for_ollama(4096, 131072).tokens == 4096
    capped = window_for_ollama(8192, 2048)  # Ollama gives no model more than it was trained for
    assert capped.tokens == 2048 and "trained context_length" in capped.source
    assert trained_context({"llama.context_length": 8192, "general.architecture": "llama"}) == 8192
    assert trained_context({"x": "y"}) is None and trained_context(None) is None
    llama = {"id": "m", "meta": {"n_ctx": 512, "n_ctx_train": 8192}}
    source = "the server's /models meta.n_ctx (llama.cpp, per slot)"
    assert window_from_openai_entry(llama) == ContextWindow(512, source)
    assert window_from_openai_entry({"id": "m", "max_model_len": 32768}).tokens == 32768  # vLLM
    assert window_from_openai_entry({"id": "m", "meta": None}) is None
    assert window_from_openai_entry({"id": "m", "max_model_len": True}) is None  # not a count


# ------------------------------------------------------------------------------------------ the sizer
def test_the_sizer_flags_truncation_on_evidence_only() -> None:
    window = ContextWindow(1000, "test")
    sizer = PromptSizer()
    short = "x" * 1200  # 300 tokens at 4 characters a token: surely fits, and teaches the sizer
    assert not sizer.truncated(short, 300, window) and sizer.chars_per_token == 4.0
    long = "x" * 8000  # ≈ 2,000 tokens
    assert sizer.truncated(long, 1000, window)  # current Ollama: the whole context read, the rest dropped
    assert sizer.truncated(long, 500, window)  # older Ollama: about half of it
    assert not sizer.truncated("x" * 3000, 750, window)  # 750 tokens, read whole: not truncated
    assert not sizer.truncated("x" * 3960, 990, window)  # fills the context, but fits
    # A prompt cache reports only the tokens it evaluated: a low count on a prompt far from the limit is
    # no truncation.
    assert not sizer.truncated("x" * 2800, 40, window)
    # Nothing said, nothing known: never flagged.
    assert not sizer.truncated(long, None, window) and not sizer.truncated(long, 0, window)
    assert not PromptSizer().truncated(long, 1000, None)
    # This sizer has seen prompts of 3,960 and 8,000 characters read as about 1,000 tokens: two more show
    # the ceiling (the context stated), which it then checks against even when none is passed.
    assert not sizer.truncated("x" * 6000, 1000, None) and sizer.inferred is None
    assert sizer.truncated(long, 1000, None)
    assert sizer.inferred is not None and sizer.inferred.tokens == 1000
    # Learned from the replies: a tokenizer of 3 characters a token moves the estimate.
    dense = PromptSizer()
    for _ in range(3):
        dense.truncated("y" * 900, 300, window)
    assert dense.chars_per_token == 3.0 and dense.estimate("y" * 2700) == 900


def test_counts_that_stop_growing_show_a_context_the_server_never_states() -> None:
    sizer = PromptSizer()
    # A server that truncates every prompt at 400 tokens and states no context: prompts of 500, 600, 800
    # and 1,000 tokens all read as 400. Three are no proof (a prompt cache can coincide); the fourth, twice
    # as long as the first, is.
    for chars in (2000, 2400, 3200):
        assert not sizer.truncated("x" * chars, 400, None) and sizer.inferred is None
    assert sizer.truncated("x" * 4000, 400, None)
    assert sizer.inferred is not None and sizer.inferred.tokens == 400
    assert sizer.inferred.source.startswith("inferred from the server's token counts (4 prompts of 2,000 to "
                                            "4,000 characters all read as 400 tokens)")
    assert sizer.window(None) is sizer.inferred
    assert sizer.window(ContextWindow(8192, "num_ctx sent")) is sizer.inferred  # smaller than the stated
    assert sizer.window(ContextWindow(300, "stated")).tokens == 300  # a smaller stated one stays
    assert sizer.truncated("x" * 5000, 400, None)  # from here on, every prompt read at the ceiling
    assert not sizer.truncated("x" * 600, 150, None)  # a short prompt read whole is not
    assert sizer.chars_per_token == 4.0  # what it learns comes from counts well inside the context


def test_counts_that_grow_or_a_prompt_cache_infer_nothing() -> None:
    honest = PromptSizer()
    for chars in (1000, 1500, 2000, 3000, 4000, 6000):  # every count grows with its prompt
        assert not honest.truncated("x" * chars, chars // 4, None)
    # Two prompts read as the largest count by coincidence, their lengths far apart: no proof yet.
    assert not honest.truncated("x" * 9000, 1500, None) and honest.inferred is None
    # A prompt cache's counts (Ollama before 0.30): four long prompts that happen to read as the largest
    # count, lengths 5,000 to 10,000, are no ceiling while most prompts as long read elsewhere.
    coincidence = PromptSizer()
    for chars, read in ((5000, 1500), (9000, 700), (8000, 300), (8500, 900), (9500, 1200), (7000, 400),
                        (7500, 1490), (9000, 1500), (10000, 1500)):
        coincidence.truncated("x" * chars, read, None)
    assert coincidence.inferred is None
    # Prompt lengths within half again of each other at the same count: a denser tokenizer, not a ceiling.
    dense = PromptSizer()
    for chars in (4000, 4400, 4800, 5200):
        dense.truncated("y" * chars, 1000, None)
    assert dense.inferred is None
    # A prompt cache (Ollama before 0.30 counts only what it evaluated) reads low and varied: nothing
    # inferred, and nothing learned from counts below what any tokenizer gives.
    cached = PromptSizer()
    for chars, read in ((3000, 750), (3100, 40), (3300, 95), (2900, 12), (3500, 60), (3200, 23)):
        cached.calibrate(chars, read, None)
    assert cached.inferred is None and cached.chars_per_token == 4.0


def test_a_count_that_includes_the_cache_shows_truncation_at_once() -> None:
    # A reply that says how many of its prompt tokens were cached counts the whole prompt: 5,000 characters
    # read as 300 tokens (16.7 a token) is more than any tokenizer gives, so the server read a part.
    whole = PromptSizer()
    whole.calibrate(5000, 300, None, whole=True)  # the warm-up, itself truncated
    assert whole.inferred is not None and whole.inferred.tokens == 300
    assert "more characters a token than any tokenizer gives" in whole.inferred.source
    assert whole.chars_per_token == 4.0  # not the impossible 16.7 it would have learned
    assert whole.truncated("x" * 4000, 300, None, whole=True)
    # The same count from a reply that says nothing of a cache may be a cache hit: one is no proof.
    silent = PromptSizer()
    silent.calibrate(5000, 300, None)
    assert silent.inferred is None and silent.chars_per_token == 4.0


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_server_truncating_at_a_context_it_never_states_is_caught(
        backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    sizes = _prompt_tokens(6)
    hidden = 500  # four users' original prompts are longer (537 to 1,074 fake tokens), two fit
    fits = {u for u, n in sizes.items() if n <= 0.9 * hidden}
    # Ollama behind a gateway that drops num_ctx; an OpenAI-compatible endpoint that states no context.
    where = ["--num-ctx", "8192"] if backend == "ollama" else ["--backend", "openai"]
    with FakeOllamaServer(hidden_context=hidden) as fake, pytest.warns(RobustExplainWarning) as said:
        host = fake.url if backend == "ollama" else fake.url + "/v1"
        code = cli.main(["run", *where, "--model", "fake-model:latest", "--host", host, "--users", "6",
                         *SMALL, "--json", "r.json", "--concurrency", "1"])  # replies in the plan's order
        truncated = fake.truncated_prompts
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err  # INCONCLUSIVE under --inconclusive warn
    doc = _report("r.json")
    assert truncated > 0
    told = [str(w.message) for w in said if "truncates prompts at about" in str(w.message)]
    stated = "less than the 8,192 tokens it states" if backend == "ollama" else "a context it does not state"
    assert len(told) == 1 and f"truncates prompts at about {hidden} tokens, {stated}: " in told[0]
    assert "all read as 500 tokens" in told[0] and "lower max-history" in told[0]
    assert doc["models"][0]["extra"]["inferred_context"]["tokens"] == hidden
    flagged = [p for p in doc["pairs"] if p.get("overflow")]
    # Replies before the proof cannot be flagged (in this plan's order, the three before the fourth read at
    # the ceiling); every gate has flagged pairs, so none is measured; a user whose prompt fitted is never
    # flagged for their original.
    assert 0 < truncated - 3 <= doc["calls"]["prompt over the context"] <= truncated
    assert len(flagged) >= 1
    assert not any("original" in p["overflow"] for p in flagged if p["key"]["user_id"] in fits)
    assert [g["verdict"]["outcome"] for g in doc["gates"]] == [INCONCLUSIVE] * len(doc["gates"])
    assert all("did not fit the model's context" in g["verdict"]["message"] for g in doc["gates"])
    assert f"exceeds the context of {hidden} tokens" in flagged[0]["overflow_detail"]


@pytest.mark.parametrize("outcome", [PASS, FAIL])
def test_one_unfit_pair_leaves_the_gate_unmeasured(outcome: str) -> None:
    detail = "original explanation: prompt of ≈ 1,210 tokens exceeds the context of 100 tokens"
    pairs = [PairResult(PairKey("m", f"u{i}", "i", "noise_injection", 1, 0), 0.9, 0.9, 0.9, 0.9, 0.9, "a",
                        "b", overflow=("original",) if i == 7 else (),
                        overflow_detail=detail if i == 7 else "") for i in range(40)]
    verdict = Verdict(outcome, message="ρ 0.90 ≥ 0.5")
    judged = with_unfit_prompts(verdict, pairs)
    assert judged.outcome == INCONCLUSIVE
    assert judged.message.startswith(
        "Not measured: 1 of 40 pairs compare an explanation whose prompt did not fit the model's context (1 "
        "user: u7; user u7's original explanation: prompt of ≈ 1,210 tokens exceeds the context of 100 "
        "tokens)")
    assert "Lower max-history" in judged.message and "ρ 0.90 ≥ 0.5" in judged.message
    assert with_unfit_prompts(verdict, [p for p in pairs if not p.overflow]) == verdict
    data = json.loads(json.dumps(pairs[7].to_dict()))
    assert data["overflow"] == ["original"] and pair_from_dict(data, source="t") == pairs[7]
    assert "overflow" not in pairs[0].to_dict() and "overflow_detail" not in pairs[0].to_dict()


# ------------------------------------------------------------------------------ through the fake server
def _prompt_tokens(users: int) -> dict[str, int]:
    """Each of the run's first users' original prompt in the fake server's tokens (four characters each),
    from the cases the run takes (the bundled set, default seed)."""
    from pytest_robustexplain.engine.setup import load_configured_dataset, take_cases
    from pytest_robustexplain.settings import Settings

    cases, _ = take_cases(load_configured_dataset(Settings.defaults()).cases, users)
    template = PromptTemplate()
    return {c.user_id: -(-len(template.render(c.history, c.item)) // 4) for c in cases}


def _report(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return doc


def test_ollama_truncating_silently_is_caught_pair_by_pair(server: FakeOllamaServer,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    sizes = _prompt_tokens(6)
    ordered = sorted(sizes.values())
    # A context between the users' prompt sizes: the longer histories overflow it, the shorter fit.
    num_ctx = (ordered[2] + ordered[3]) // 2
    long = {u for u, n in sizes.items() if n > num_ctx}
    code = cli.main(["run", "--model", "fake-model", "--host", server.url, "--users", "6", *SMALL,
                     "--num-ctx", str(num_ctx), "--json", "r.json"])
    out, err = capsys.readouterr()
    assert code == 0  # INCONCLUSIVE under --inconclusive warn
    doc = _report("r.json")
    flagged = {p["key"]["user_id"] for p in doc["pairs"] if p.get("overflow")}
    # Every user whose original prompt overflowed is caught; a user whose prompt fitted is never flagged
    # unless a perturbation lengthened theirs beyond the context.
    assert long <= flagged
    for pair in doc["pairs"]:
        assert ("original" in pair.get("overflow", ())) == (pair["key"]["user_id"] in long)
    assert doc["calls"]["prompt over the context"] == server.truncated_prompts > 0
    assert [g["verdict"]["outcome"] for g in doc["gates"]] == [INCONCLUSIVE] * len(doc["gates"])
    assert all("did not fit the model's context" in g["verdict"]["message"] for g in doc["gates"])
    # Said before the calls, with the users and the way out.
    assert f"prompts may not fit the model's context of {num_ctx:,} tokens" in err
    assert "--max-history (now 50)" in err and "--num-ctx for Ollama" in err
    assert "(estimated at 3 characters a token)" in err  # Ollama has no tokenizer to ask
    assert "Prompts longer than the context" in out
    assert doc["models"][0]["extra"]["context"] == {"tokens": num_ctx,
                                                    "source": "num_ctx sent with every request"}
    assert doc["settings"]["num_ctx"] == num_ctx  # applied: the Ollama backend sends it


def test_a_context_that_holds_every_prompt_flags_nothing(server: FakeOllamaServer) -> None:
    assert cli.main(["run", "--model", "fake-model", "--host", server.url, "--users", "6", *SMALL,
                     "--json", "r.json"]) == 0
    doc = _report("r.json")
    assert server.truncated_prompts == 0 and "prompt over the context" not in doc["calls"]
    assert not any(p.get("overflow") for p in doc["pairs"])


def test_a_refused_prompt_names_user_tokens_and_limit_and_the_report_is_written(
        capsys: pytest.CaptureFixture[str]) -> None:
    sizes = _prompt_tokens(4)
    limit = min(sizes.values()) - 1  # every prompt is refused, as a llama.cpp slot too small refuses it
    with FakeOllamaServer(openai_context=limit) as fake:
        code = cli.main(["run", "--backend", "openai", "--model", "fake-model:latest", "--host",
                         fake.url + "/v1", "--users", "4", *SMALL, "--inconclusive", "fail",
                         "--json", "r.json", "--markdown", "r.md"])
        tokenized = fake.calls["/tokenize"]
    err = capsys.readouterr().err
    assert tokenized == 4  # each user's prompt counted once, for the test's two kinds and overall
    assert code == 1 and "Traceback" not in err
    doc = _report("r.json")  # written: a context error is the pairs' failure, not the run's
    first = doc["pairs"][0]
    assert first["failure"] == "context" and first["overflow"] == ["original", "perturbed"]
    user = sorted(doc["pairs"], key=lambda p: p["key"]["user_id"])[0]["key"]["user_id"]
    message = doc["gates"][0]["verdict"]["message"]
    assert message.startswith("Not measured:")
    assert f"user {user}'s original explanation: prompt of " in message
    assert f"exceeds the context of {limit} tokens" in message
    assert doc["models"][0]["extra"]["context"]["tokens"] == limit
    assert "num_ctx" not in doc["settings"]  # not applied: the server keeps its own context
    assert "users' prompts may not fit the model's context" in err
    assert "(counted by the server's tokenizer)" in err  # llama.cpp's /tokenize, asked before any call
    assert "Prompts longer than the context" in Path("r.md").read_text(encoding="utf-8")


def test_the_fake_server_truncates_like_ollama_and_refuses_like_llama_cpp() -> None:
    import httpx

    prompt = "word " * 400  # 500 fake tokens
    with FakeOllamaServer(context_length=300, openai_context=100) as fake:
        native = httpx.post(fake.url + "/api/chat", json={
            "model": "fake-model", "stream": False, "messages": [{"role": "user", "content": prompt}],
            "options": {"num_ctx": 4096}}).json()
        assert native["prompt_eval_count"] == 300  # capped by the trained context, the start dropped
        assert fake.truncated_prompts == 1
        shown = httpx.post(fake.url + "/api/show", json={"model": "fake-model"}).json()
        assert trained_context(shown["model_info"]) == 300
        refused = httpx.post(fake.url + "/v1/chat/completions", json={
            "model": "fake-model", "messages": [{"role": "user", "content": prompt}]})
        assert refused.status_code == 400
        assert overflow_of(400, refused.text) is not None and "(500 tokens)" in refused.text
        listed = httpx.get(fake.url + "/v1/models").json()["data"][0]
        assert window_from_openai_entry(listed) == ContextWindow(
            100, "the server's /models meta.n_ctx (llama.cpp, per slot)")
    # A context never stated: both APIs truncate silently at it, whatever num_ctx was sent.
    with FakeOllamaServer(hidden_context=200) as hidden:
        native = httpx.post(hidden.url + "/api/chat", json={
            "model": "fake-model", "stream": False, "messages": [{"role": "user", "content": prompt}],
            "options": {"num_ctx": 4096}}).json()
        openai = httpx.post(hidden.url + "/v1/chat/completions", json={
            "model": "fake-model", "messages": [{"role": "user", "content": prompt}]}).json()
        assert native["prompt_eval_count"] == openai["usage"]["prompt_tokens"] == 200
        assert hidden.truncated_prompts == 2
        assert window_from_openai_entry(httpx.get(hidden.url + "/v1/models").json()["data"][0]) is None
    for bad in (True, 4, "200", 2.5):
        with pytest.raises(ValueError, match="hidden_context must be an integer above 4 tokens"):
            FakeOllamaServer(hidden_context=bad)  # type: ignore[arg-type]
