"""The score cache: hits give exactly the scores a fresh Scorer computes, under any weights; a corrupt
entry is one warning and a recomputation; another signature misses; concurrent writers lose nothing;
and a rerun on a warm cache never imports nltk, TextBlob, sacrebleu or scipy.stats."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import sqlite3
import threading
import warnings
from pathlib import Path

import pytest

from pytest_robustexplain.errors import ConfigError, RobustExplainWarning
from pytest_robustexplain.metrics import Scorer, text_signature
from pytest_robustexplain.score_cache import CachedScorer, ScoreCache
from pytest_robustexplain.store import DB_NAME
from pytest_robustexplain.testing import FakeOllamaServer

ORIGINAL = "You will love the Wireless Earbuds Pro because you bought noise-cancelling headphones."
PAIRS = [
    (ORIGINAL, "The Wireless Earbuds Pro suit you: you liked noise-cancelling headphones and a USB-C hub."),
    (ORIGINAL, ORIGINAL),  # identical texts
    (ORIGINAL, "It is good, and so it goes."),  # few keywords
    (ORIGINAL, "..."),  # no word at all: a generation failure, scored 0 after tokenising
    (ORIGINAL, "   "),  # blank: a failure without any tokenising
    ("Quickly, slowly.", "Really quickly."),  # no noun or adjective: keyword_empty
    ("User’s pick: sci-fi at 4.5 stars.", "User's pick: sci-fi, 4.5 stars!"),
]
HEAVY = ("nltk", "textblob", "sacrebleu", "scipy")


def _never() -> Scorer:
    raise AssertionError("the Scorer was built although every pair was in the cache")


def _fill(directory: Path, mode: str = "read-write") -> CachedScorer:
    scorer = CachedScorer(cache=ScoreCache(directory, mode))
    for e, e_prime in PAIRS:
        scorer.score(e, e_prime)
    return scorer


def test_hits_equal_a_fresh_computation_under_any_weights(tmp_path: Path) -> None:
    filled = _fill(tmp_path)
    assert filled.cache is not None and filled.cache.stats.writes == len(PAIRS) - 1  # the blank one: no entry
    fresh = Scorer()
    weights = [0.7, 0.1, 0.1, 0.1]
    for e, e_prime in PAIRS:
        warm = CachedScorer(cache=ScoreCache(tmp_path, "read"), make_scorer=_never)
        assert warm.score(e, e_prime) == fresh.score(e, e_prime)
        reweighted = CachedScorer(weights=weights, cache=ScoreCache(tmp_path, "read"), make_scorer=_never)
        assert reweighted.score(e, e_prime) == fresh.score_with(e, e_prime, weights)
        assert not warm.built and not reweighted.built
    vectors = ((1.0, 0.0, 1.0), (1.0, 1.0, 0.0))  # the embedding metric is never cached: formed as ever
    five = CachedScorer(weights=[0.2] * 5, cache=ScoreCache(tmp_path, "read"), make_scorer=_never)
    expected = Scorer(weights=[0.2] * 5).score(*PAIRS[0], vectors=vectors)
    assert five.score(*PAIRS[0], vectors=vectors) == expected
    with pytest.raises(ConfigError, match="no embeddings"):
        five.score(*PAIRS[0])


def _rows(directory: Path) -> list[tuple[str, str, str]]:
    """(group, key, text) of every score entry, read with SQLite itself."""
    with contextlib.closing(sqlite3.connect(directory / DB_NAME)) as db:
        return list(db.execute("SELECT grp, key, value FROM kept WHERE kind = 'score' ORDER BY grp, key"))


def test_entries_are_grouped_by_their_original(tmp_path: Path) -> None:
    cache = _fill(tmp_path).cache
    assert cache is not None
    rows = _rows(tmp_path)
    by_group = {group: [key for g, key, _ in rows if g == group] for group, _, _ in rows}
    assert len(by_group) == len({e for e, _ in PAIRS})  # one group an original, read in one query
    mine = [key for key in (cache.key(e, e_prime) for e, e_prime in PAIRS if e == ORIGINAL)
            if any(key == k for _, k, _ in rows)]
    assert len(mine) == 4 and sorted(mine) in [sorted(keys) for keys in by_group.values()]  # the blank: none
    assert all(len(json.loads(text)["metrics"]) == 4 for _, _, text in rows)


def test_another_signature_misses(tmp_path: Path) -> None:
    _fill(tmp_path)
    built: list[Scorer] = []

    def make() -> Scorer:
        built.append(Scorer())
        return built[-1]

    other = ScoreCache(tmp_path, signature=text_signature().replace("|v:", "|v:9"))
    scorer = CachedScorer(cache=other, make_scorer=make)
    assert scorer.score(*PAIRS[0]) == Scorer().score(*PAIRS[0])
    assert len(built) == 1 and other.stats.hits == 0 and other.stats.misses == 1
    same = ScoreCache(tmp_path)
    assert CachedScorer(cache=same, make_scorer=_never).score(*PAIRS[0]) == Scorer().score(*PAIRS[0])


def test_corrupt_entry_is_one_warning_then_recomputed_and_dropped(tmp_path: Path) -> None:
    cache = _fill(tmp_path).cache
    assert cache is not None
    cache.store.close()
    keys = [cache.key(*PAIRS[0]), cache.key(*PAIRS[1])]
    first = json.loads(dict((k, t) for _, k, t in _rows(tmp_path))[keys[0]])
    with contextlib.closing(sqlite3.connect(tmp_path / DB_NAME)) as db, db:
        db.execute("UPDATE kept SET value = ? WHERE key = ?",
                   (json.dumps({**first, "metrics": [0.5, 0.5, "x", 0.5]}), keys[0]))  # a hand edit
        db.execute("UPDATE kept SET value = substr(value, 1, 20) WHERE key = ?", (keys[1],))  # cut short

    again = ScoreCache(tmp_path)
    scorer = CachedScorer(cache=again)
    with pytest.warns(RobustExplainWarning, match=r"score cache .*: 2 entries cannot be read") as caught:
        scores = [scorer.score(e, e_prime) for e, e_prime in PAIRS]
    assert len(caught) == 1 and DB_NAME in str(caught[0].message)
    assert scores == [Scorer().score(e, e_prime) for e, e_prime in PAIRS]
    assert again.stats.corrupt == 2 and again.stats.writes == 2 and scorer.built

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # removed and written again: no warning the next time
        third = CachedScorer(cache=ScoreCache(tmp_path), make_scorer=_never)
        assert [third.score(e, e_prime) for e, e_prime in PAIRS] == scores


@pytest.mark.parametrize(("mode", "reads", "writes"), [
    ("read", True, False), ("write", False, True), ("read-write", True, True), ("replay-only", True, False)])
def test_modes(tmp_path: Path, mode: str, reads: bool, writes: bool) -> None:
    _fill(tmp_path / "warm")
    for directory in (tmp_path / "warm", tmp_path / "cold"):
        cache = ScoreCache(directory, mode)
        CachedScorer(cache=cache).score(*PAIRS[0])
        hit = reads and directory.name == "warm"
        assert cache.stats.hits == (1 if hit else 0)
        assert cache.stats.writes == (1 if writes and not hit else 0)
    assert not (tmp_path / "cold").exists() or writes
    with pytest.raises(ConfigError, match="valid modes"):
        ScoreCache(tmp_path, "sometimes")


def test_an_unwritable_cache_warns_once_and_still_scores(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the cache directory should be", encoding="utf-8")
    scorer = CachedScorer(cache=ScoreCache(blocker / "scores"))
    with pytest.warns(RobustExplainWarning, match="scores/robustexplain.sqlite3: cannot be used") as caught:
        scores = [scorer.score(e, e_prime) for e, e_prime in PAIRS]
    assert len(caught) == 1 and scores == [Scorer().score(e, e_prime) for e, e_prime in PAIRS]


def test_failed_pairs_never_build_the_scorer() -> None:
    scorer = CachedScorer(make_scorer=_never)
    assert scorer.score("", ORIGINAL).generation_failure and scorer.score(ORIGINAL, " \n").generation_failure
    assert scorer.score("", ORIGINAL) == Scorer().score("", ORIGINAL)
    assert not scorer.built


def test_the_scorer_is_built_when_asked_for_by_whoever_serves_the_request() -> None:
    built: list[threading.Thread] = []

    def make() -> Scorer:
        built.append(threading.current_thread())
        return Scorer()

    scorer = CachedScorer(make_scorer=make)
    assert not scorer.needs_scorer("", ORIGINAL) and scorer.needs_scorer(*PAIRS[0])
    scorer.build_requested()  # nothing asked for: nothing built
    assert not scorer.built and not scorer.requested
    future = scorer.request()
    assert scorer.request() is future and scorer.requested
    scorer.build_requested()
    assert future.result() is scorer.scorer and built == [threading.current_thread()]
    assert not scorer.needs_scorer(*PAIRS[0]) and not scorer.requested

    def broken() -> Scorer:
        raise ConfigError("the tagger cannot load")

    failing = CachedScorer(make_scorer=broken)
    future = failing.request()
    failing.build_requested()
    with pytest.raises(ConfigError, match="cannot load"):
        future.result()


def _perturbed(worker: int, k: int) -> str:
    return f"Perturbed explanation number {k} of worker {worker}: earbuds and headphones."


def _append(directory: str, worker: int) -> int:
    scorer = CachedScorer(cache=ScoreCache(directory))
    for k in range(40):
        scorer.score(ORIGINAL, _perturbed(worker, k))
    return worker


def test_concurrent_processes_write_without_losing_or_tearing_records(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as procs:
        assert sorted(procs.starmap(_append, [(str(tmp_path), w) for w in range(3)])) == [0, 1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = ScoreCache(tmp_path, "read")
        scorer = CachedScorer(cache=cache, make_scorer=_never)
        for worker in range(3):
            for k in range(40):
                scorer.score(ORIGINAL, _perturbed(worker, k))
    assert cache.stats.hits == 120 and cache.stats.corrupt == 0


# ----------------------------------------------------------------------------- a whole pytest run twice
MARKED = """
import pytest

@pytest.mark.robustness(perturbations=["noise", "drift"], severities=[1, 5], users=4, min_combined=0.0,
                        min_metric=0.0)
def test_gate(robustness):
    assert robustness.pairs
"""
MODULES_SEEN = """
import json, os, sys

def pytest_unconfigure(config):
    with open(os.environ["MODULES_SEEN"], "w", encoding="utf-8") as handle:
        json.dump([name for name in {heavy!r} if name in sys.modules], handle)
"""


def test_a_warm_rerun_imports_no_scorer_and_gives_the_same_scores(pytester: pytest.Pytester,
                                                                   server: FakeOllamaServer,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(MARKED)
    pytester.makeconftest(MODULES_SEEN.format(heavy=HEAVY))
    seen = tmp_path / "modules.json"
    monkeypatch.setenv("MODULES_SEEN", str(seen))
    args = ["-q", "-p", "no:randomly", "--robustexplain-model=fake-model",
            f"--robustexplain-host={server.url}", f"--robustexplain-cache-dir={tmp_path / 'cache'}"]

    def run(report: Path) -> list[dict[str, object]]:
        result = pytester.runpytest_subprocess(*args, f"--robustexplain-json={report}", timeout=300)
        result.assert_outcomes(passed=3)
        pairs = json.loads(report.read_text(encoding="utf-8"))["pairs"]
        return [{k: p[k] for k in ("key", "semantic", "keyword", "structural", "length", "combined")}
                for p in pairs]

    cold = run(tmp_path / "cold.json")
    # The cold run builds the scorer: sacrebleu, nltk's tokenizer and TextBlob's tagger (metrics/text.py).
    assert set(json.loads(seen.read_text(encoding="utf-8"))) >= {"sacrebleu", "nltk", "textblob"}
    assert _rows(tmp_path / "cache")
    calls = server.chat_calls
    warm = run(tmp_path / "warm.json")
    # The warm run without the JSON report: none of the scorer's modules. scipy is the gate's (its share
    # bounds and t quantiles are scipy.special's: issue 60).
    result = pytester.runpytest_subprocess(*args, timeout=300)
    result.assert_outcomes(passed=3)
    assert set(json.loads(seen.read_text(encoding="utf-8"))) <= {"scipy"}
    assert warm == cold and server.chat_calls == calls


def test_the_loop_can_ask_for_the_scorer_while_it_is_being_built() -> None:
    # The sweep's loop thread asks (request / readiness) for every finished pair; the waiting thread builds
    # the Scorer (a second of imports). Asking must never wait for the build: under the old single lock every
    # model call of the run stopped until the build was done (issue 44: the overhead benchmark).
    started, release = threading.Event(), threading.Event()

    def slow() -> Scorer:
        started.set()
        release.wait()
        return Scorer()

    scorer = CachedScorer(make_scorer=slow)
    future = scorer.request()
    builder = threading.Thread(target=scorer.build_requested)
    builder.start()
    assert started.wait(30)
    asker = threading.Thread(target=lambda: (scorer.request(), scorer.readiness(*PAIRS[0])))
    asker.start()
    asker.join(30)  # a bound for the failure only: without the fix it waits for ``release``, set below
    stuck = asker.is_alive()
    release.set()
    builder.join()
    asker.join()
    assert not stuck, "asking for the scorer waited for its build"
    assert future.result() is scorer.scorer
