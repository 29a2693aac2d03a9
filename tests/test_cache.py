"""The response cache: keys, modes, corrupt entries, whole entries under concurrency, offline replay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import sqlite3
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_robustexplain.data import Interaction, Item, UserHistory
from pytest_robustexplain.errors import (
    CacheMissError,
    ConfigError,
    RobustExplainWarning,
    WarningQueue,
    routed_to,
)
from pytest_robustexplain.explainers.base import Explainer, Explanation, ModelInfo
from pytest_robustexplain.explainers.cache import (
    CachedExplainer,
    ResponseCache,
    cache_key,
    canonical_json,
)
from pytest_robustexplain.explainers.ollama import OllamaExplainer
from pytest_robustexplain.explainers.retry import RetryPolicy
from pytest_robustexplain.explainers.template import TemplateExplainer
from pytest_robustexplain.store import DB_NAME
from pytest_robustexplain.testing import FakeOllamaServer

T = TypeVar("T")


def _raw(directory: Path, key: str) -> str:
    """An entry's stored text, read with SQLite itself (not through the cache under test)."""
    with contextlib.closing(sqlite3.connect(directory / DB_NAME)) as db:
        [(text,)] = db.execute("SELECT value FROM kept WHERE kind = 'reply' AND key = ?", (key,)).fetchall()
    return str(text)


def _edit(directory: Path, key: str, text: str) -> None:
    """Replace an entry's text by hand, as someone (or a restored cache) could."""
    with contextlib.closing(sqlite3.connect(directory / DB_NAME)) as db, db:
        db.execute("UPDATE kept SET value = ? WHERE kind = 'reply' AND key = ?", (text, key))


def _entries(directory: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(directory / DB_NAME)) as db:
        return [str(v) for (v,) in db.execute("SELECT value FROM kept WHERE kind = 'reply' ORDER BY key")]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def history(user: str = "u1", n: int = 3) -> UserHistory:
    return UserHistory(user, tuple(
        Interaction(f"I{i}", "Books" if i % 2 else "Home", 1_700_000_000 + i, 4.0, f"Title {i}")
        for i in range(n)))


ITEM = Item("I99", "Lamp", "Home", {"brand": "Lux"})


class CountingExplainer:
    """A small in-memory backend with a model digest, counting the calls that reach it."""

    backend = "counting"

    def __init__(self, digest: str = "sha256:aaaa", fail: bool = False) -> None:
        self.model = "counting-model"
        self.digest = digest
        self.fail = fail
        self.calls = 0
        self.preflights = 0

    async def preflight(self) -> ModelInfo:
        self.preflights += 1
        return ModelInfo(name=self.model, backend=self.backend, digest=self.digest)

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        self.calls += 1
        if self.fail:
            return Explanation(text="", model=self.model, failure="error", detail="HTTP 503")
        return Explanation(text=f"{item.title} for {history.user_id} r{repeat} s{seed}", model=self.model)

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model, "digest": self.digest,
                "prompt": f"{history.to_dict()}|{item.to_dict()}", "options": {"t": 0}, "seed": seed,
                "repeat": repeat}

    async def aclose(self) -> None:
        pass


def test_counting_double_implements_the_protocol() -> None:
    assert isinstance(CountingExplainer(), Explainer)
    assert isinstance(CachedExplainer(CountingExplainer(), ResponseCache("x")), Explainer)


def test_keys_are_canonical_and_sensitive_to_everything_that_matters() -> None:
    inner = CountingExplainer()
    base = inner.request_identity(history(), ITEM, seed=1, repeat=0)
    assert cache_key(base) == cache_key(dict(reversed(list(base.items()))))
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    variants = [
        inner.request_identity(history(), ITEM, seed=1, repeat=1),
        inner.request_identity(history(), ITEM, seed=2, repeat=0),
        inner.request_identity(history(n=4), ITEM, seed=1, repeat=0),
        CountingExplainer(digest="sha256:bbbb").request_identity(history(), ITEM, seed=1, repeat=0),
    ]
    keys = {cache_key(v) for v in variants}
    assert len(keys) == 4 and cache_key(base) not in keys


def test_round_trip_in_the_directorys_one_database(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    explanation = Explanation(text="hello", model="m", latency_s=0.5, prompt_tokens=3, completion_tokens=1)
    key = cache_key({"a": 1})
    assert cache.put(key, {"a": 1}, explanation)
    assert json.loads(_raw(tmp_path, key))["identity"] == {"a": 1}  # read by another connection
    hit = cache.get(key)
    assert hit is not None and hit.cached and hit.text == "hello" and hit.prompt_tokens == 3
    cache.store.close()
    assert [p.name for p in tmp_path.iterdir()] == [DB_NAME]  # the journal's files go with the last one
    # Failures are never stored.
    failure = Explanation(text="", model="m", failure="error", detail="boom")
    assert not cache.put(cache_key({"b": 2}), {"b": 2}, failure)
    assert cache.stats.as_dict() == {"hits": 1, "misses": 0, "writes": 1, "corrupt": 0,
                                     "write_errors": 0}


def test_warm_cache_skips_the_model_and_failures_are_regenerated(tmp_path: Path) -> None:
    inner = CountingExplainer()
    explainer = CachedExplainer(inner, ResponseCache(tmp_path))
    first = run(explainer.explain(history(), ITEM, seed=1, repeat=0))
    second = run(explainer.explain(history(), ITEM, seed=1, repeat=0))
    assert not first.cached and second.cached and first.text == second.text
    assert inner.calls == 1 and explainer.stats["hits"] == 1 and explainer.stats["writes"] == 1
    other_repeat = run(explainer.explain(history(), ITEM, seed=1, repeat=1))
    assert not other_repeat.cached and inner.calls == 2  # repeats are distinct entries
    failing = CountingExplainer(fail=True)
    cached_failing = CachedExplainer(failing, ResponseCache(tmp_path / "f"))
    for _ in range(2):
        assert run(cached_failing.explain(history(), ITEM, seed=1, repeat=0)).failure == "error"
    assert failing.calls == 2


def test_a_new_model_digest_misses(tmp_path: Path) -> None:
    run(CachedExplainer(CountingExplainer("sha256:aaaa"), ResponseCache(tmp_path)).explain(
        history(), ITEM, seed=1, repeat=0))
    repulled = CountingExplainer("sha256:bbbb")
    cached = CachedExplainer(repulled, ResponseCache(tmp_path))
    result = run(cached.explain(history(), ITEM, seed=1, repeat=0))
    assert not result.cached and repulled.calls == 1


def test_corrupt_entry_is_warned_about_and_regenerated(tmp_path: Path) -> None:
    inner = CountingExplainer()
    cache = ResponseCache(tmp_path)
    explainer = CachedExplainer(inner, cache)
    run(explainer.explain(history(), ITEM, seed=1, repeat=0))
    key = cache_key(inner.request_identity(history(), ITEM, seed=1, repeat=0))
    _edit(tmp_path, key, '{"key": "truncated')
    queue = WarningQueue()
    with pytest.warns(RobustExplainWarning, match=f"entry {key[:12]}… in .*{DB_NAME} is corrupt"):
        with routed_to(queue):  # as the sweep's loop is
            again = run(explainer.explain(history(), ITEM, seed=1, repeat=0))
        queue.flush()  # the read ran on a worker thread; the engine flushes after each wait
    assert not again.cached and inner.calls == 2 and cache.stats.corrupt == 1
    assert json.loads(_raw(tmp_path, key))["explanation"]["text"] == again.text
    assert run(explainer.explain(history(), ITEM, seed=1, repeat=0)).cached


@pytest.mark.parametrize("edit", ["identity", "no identity", "copied"])
def test_an_entry_whose_identity_does_not_match_its_key_is_discarded(tmp_path: Path, edit: str) -> None:
    """A hand-edited entry (another seed in its identity), one without an identity, or another request's
    entry copied under this key: its text answers something else, so it is warned about and regenerated."""
    inner = CountingExplainer()
    cache = ResponseCache(tmp_path)
    explainer = CachedExplainer(inner, cache)
    run(explainer.explain(history(), ITEM, seed=1, repeat=0))
    run(explainer.explain(history(), ITEM, seed=2, repeat=0))
    first, second = (cache_key(inner.request_identity(history(), ITEM, seed=s, repeat=0)) for s in (1, 2))
    entry = json.loads(_raw(tmp_path, first))
    if edit == "identity":
        entry["identity"]["seed"] = 99
    elif edit == "no identity":
        del entry["identity"]
    else:
        entry["identity"] = json.loads(_raw(tmp_path, second))["identity"]
    _edit(tmp_path, first, json.dumps(entry))
    queue = WarningQueue()
    with pytest.warns(RobustExplainWarning, match="identity does not match its key"):
        with routed_to(queue):
            again = run(explainer.explain(history(), ITEM, seed=1, repeat=0))
        queue.flush()
    assert not again.cached and inner.calls == 3 and cache.stats.corrupt == 1
    assert run(explainer.explain(history(), ITEM, seed=2, repeat=0)).cached  # the untouched entry still hits


@pytest.mark.parametrize("mode, reads, writes", [
    ("off", False, False), ("read", True, False), ("write", False, True), ("read-write", True, True),
])
def test_modes(tmp_path: Path, mode: str, reads: bool, writes: bool) -> None:
    seeded = CachedExplainer(CountingExplainer(), ResponseCache(tmp_path / "seed"))
    run(seeded.explain(history(), ITEM, seed=1, repeat=0))
    directory = tmp_path / "seed"
    key = cache_key(CountingExplainer().request_identity(history(), ITEM, seed=1, repeat=0))
    _edit(directory, key, _raw(directory, key).replace('"created": "', '"created": "1999'))  # marked
    [before] = _entries(directory)
    inner = CountingExplainer()
    explainer = CachedExplainer(inner, ResponseCache(directory, mode))
    result = run(explainer.explain(history(), ITEM, seed=1, repeat=0))
    assert result.cached is reads and inner.calls == (0 if reads else 1)
    run(explainer.explain(history("u2"), ITEM, seed=1, repeat=0))
    after = _entries(directory)
    assert (len(after) == 2) is writes
    if mode == "write":  # regenerated and rewritten even though the entry existed (a new "created")
        assert before not in after


def test_unknown_mode_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="off, read, write, read-write, replay-only"):
        ResponseCache(tmp_path, "readwrite")


def test_replay_only_miss_names_user_item_kind_and_directory(tmp_path: Path) -> None:
    explainer = CachedExplainer(TemplateExplainer(), ResponseCache(tmp_path, "replay-only"))
    with pytest.raises(CacheMissError) as info:
        run(explainer.explain(history("alice"), ITEM, seed=1, repeat=0, kind="noise_injection"))
    message = str(info.value)
    assert "'alice'" in message and "'I99'" in message and "noise_injection" in message
    assert str(tmp_path) in message


# ------------------------------------------------------------------------ with the fake Ollama server
def _fast() -> RetryPolicy:
    async def no_sleep(_s: float) -> None:
        await asyncio.sleep(0)
    return RetryPolicy(sleep=no_sleep)


async def _explain_all(explainer: CachedExplainer, users: list[str]) -> list[Explanation]:
    try:
        # Each user gets a different history length: the prompt (and so the key) differs per user.
        return list(await asyncio.gather(*(explainer.explain(history(u, n=2 + len(u)), ITEM, seed=3, repeat=0)
                                           for u in users)))
    finally:
        await explainer.aclose()


def test_rerun_with_warm_cache_makes_zero_model_calls_and_replays_offline(tmp_path: Path) -> None:
    users = ["u" * i for i in range(1, 7)]
    with FakeOllamaServer() as server:
        cold = CachedExplainer(OllamaExplainer("fake-model", host=server.url, retry=_fast()),
                               ResponseCache(tmp_path))
        first = run(_explain_all(cold, users))
        assert all(e.ok and not e.cached for e in first)
        chat_before = server.chat_calls
        warm = CachedExplainer(OllamaExplainer("fake-model", host=server.url, retry=_fast()),
                               ResponseCache(tmp_path))
        second = run(_explain_all(warm, users))
        assert all(e.cached for e in second) and [e.text for e in second] == [e.text for e in first]
        assert server.chat_calls == chat_before  # not even a warm-up
        url = server.url
    # The server is gone: replay-only still answers every recorded request, without any network.
    offline = CachedExplainer(OllamaExplainer("fake-model", host=url), ResponseCache(tmp_path, "replay-only"))
    replayed = run(_explain_all(offline, users))
    assert [e.text for e in replayed] == [e.text for e in first] and all(e.cached for e in replayed)
    assert offline.info is not None and offline.info.digest == cold.info.digest  # type: ignore[union-attr]
    with pytest.raises(CacheMissError, match="'new-user'"):
        run(_explain_all(offline, ["new-user"]))


def test_replay_only_without_recorded_model_facts_says_so(tmp_path: Path) -> None:
    explainer = CachedExplainer(OllamaExplainer("fake-model", host="http://127.0.0.1:9"),
                                ResponseCache(tmp_path, "replay-only"))
    with pytest.raises(CacheMissError, match="no recorded model facts"):
        run(explainer.preflight())


# ------------------------------------------------------------------------------ concurrent writers
_BIG = "word " * 40_000  # ~200 kB: a non-atomic write would be visibly torn by a concurrent reader


def _write_entries(directory: str, worker: int) -> int:
    cache = ResponseCache(directory)
    for round_ in range(3):
        for k in range(8):
            identity = {"k": k}
            text = f"{k}:{_BIG}"  # same key → same content, as real concurrent writers produce
            cache.put(cache_key(identity), identity, Explanation(text=text, model=f"w{worker}.{round_}"))
    return worker


def _check_entries(directory: Path) -> None:
    entries = _entries(directory)
    assert len(entries) == 8
    for raw in entries:
        assert json.loads(raw)["explanation"]["text"].endswith(_BIG)


def test_concurrent_threads_and_processes_never_tear_entries(tmp_path: Path) -> None:
    stop = threading.Event()
    torn: list[str] = []
    reader_cache = ResponseCache(tmp_path, "read")

    def reader() -> None:
        # Reads while the writers write: every entry seen must be whole (a torn one would count as
        # corrupt, or come back with a short text).
        while not stop.is_set():
            for k in range(8):
                hit = reader_cache.get(cache_key({"k": k}))
                if hit is not None and not hit.text.endswith(_BIG):
                    torn.append(f"short text for key {k}")

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            assert sorted(pool.map(lambda w: _write_entries(str(tmp_path), w), range(6))) == list(range(6))
        context = multiprocessing.get_context("spawn")
        with context.Pool(3) as procs:
            assert sorted(procs.starmap(_write_entries, [(str(tmp_path), w) for w in range(3)])) == [0, 1, 2]
    finally:
        stop.set()
        watcher.join()
    assert torn == [] and reader_cache.stats.corrupt == 0
    assert reader_cache.stats.hits > 0  # the reader really overlapped with the writers
    _check_entries(tmp_path)


def test_a_warning_from_a_sweep_thread_waits_for_the_main_thread_in_its_runs_queue() -> None:
    """pytest records warnings per phase on the main thread: a worker thread's warning is held in its run's
    queue until the main thread flushes it (the engine does after each wait), so it lands in a report, never
    in between; two runs' queues never say each other's warnings; a thread no run routes warns at once."""
    import contextvars
    import threading
    import warnings

    from pytest_robustexplain.errors import warn

    def on_a_thread(message: str, context: contextvars.Context | None = None) -> None:
        call = (context or contextvars.Context()).run
        worker = threading.Thread(target=call, args=(warn, RobustExplainWarning(message)))
        worker.start()
        worker.join()

    mine, theirs = WarningQueue(), WarningQueue()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with routed_to(mine):
            on_a_thread("disk full", contextvars.copy_context())
        with routed_to(theirs):
            on_a_thread("their disk", contextvars.copy_context())
        assert seen == []  # not raised on the workers, where no phase may be recording
        mine.flush()
        warn(RobustExplainWarning("main"))  # on the main thread: at once
        on_a_thread("stray")  # no run routes this thread: said where it is
    assert [str(w.message) for w in seen] == ["disk full", "main", "stray"]
    with pytest.warns(RobustExplainWarning, match="their disk"):
        theirs.flush()  # the other run's, said by that run only
    mine.flush()  # nothing left over: each warning said once
