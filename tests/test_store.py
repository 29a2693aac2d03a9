"""The one store of what a run keeps (issue 60): it survives two concurrent runs on one cache, xdist workers,
a killed writer, a corrupt file, a lock held too long, a read-only and a full disk — each said in one line,
the run going on uncached — and what an older release left in the directory is named once."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import marked

from pytest_robustexplain import store as store_module
from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.explainers.base import Explanation
from pytest_robustexplain.explainers.cache import ResponseCache, cache_key
from pytest_robustexplain.store import DB_NAME, Store
from pytest_robustexplain.testing import FakeOllamaServer


def _said(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RobustExplainWarning)]


def _reply(text: str = "hello") -> Explanation:
    return Explanation(text=text, model="m")


# ----------------------------------------------------------------------------- runs and processes
def _cli(server: FakeOllamaServer, cache: Path, report: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest_robustexplain", "run", "--model", "fake-model", "--host", server.url,
         "--users", "4", "--perturbations", "noise,drift", "--severities", "1,5", "--progress", "off",
         "--inconclusive", "warn", "--cache-dir", str(cache), "--json", str(report)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_concurrent_runs_share_one_cache_and_a_third_makes_no_call(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with FakeOllamaServer() as server:
        runs = [_cli(server, cache, tmp_path / f"r{i}.json") for i in range(2)]
        outs = [run.communicate(timeout=300) for run in runs]
        assert [run.returncode for run in runs] == [0, 0], outs
        assert not any("cache database" in err for _, err in outs)  # no lock, no failure said
        calls = server.chat_calls
        third = _cli(server, cache, tmp_path / "r2.json")
        _, err = third.communicate(timeout=300)
        assert third.returncode == 0, err
        assert server.chat_calls == calls  # every answer and score came from the shared store
    scores = [sorted((json.dumps(p["key"]), p["combined"])
                     for p in json.loads((tmp_path / f"r{i}.json").read_text())["pairs"]) for i in range(3)]
    assert scores[0] == scores[1] == scores[2]


def test_xdist_workers_share_the_store(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    gate = 'perturbations=["noise"], severities=[1, 5], users=4, inconclusive="warn"'
    other = marked(gate.replace("noise", "drift")).replace("test_gate", "test_other")
    pytester.makepyfile(marked(gate) + other)
    args = ["-n", "2", "-p", "no:randomly", "--robustexplain-model=fake-model",
            f"--robustexplain-host={server.url}",
            "-W", "error::pytest_robustexplain.errors.RobustExplainWarning"]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    calls = server.chat_calls
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    assert server.chat_calls == calls
    assert (pytester.path / ".robustexplain-cache" / DB_NAME).is_file()


WRITER = """
import sys
from pytest_robustexplain.store import Store
store = Store(sys.argv[1], writes=True)
n = 0
while True:
    store.put("reply", f"k{n}", "x" * 5000 + str(n))
    n += 1
    if n == 50:
        print("ready", flush=True)
"""


def test_a_killed_writer_leaves_every_entry_whole(tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = Store(tmp_path, writes=True)  # the next run: recovers the journal, says nothing
        with contextlib.closing(sqlite3.connect(tmp_path / DB_NAME)) as db:
            keys = [k for (k,) in db.execute("SELECT key FROM kept")]
        assert len(keys) >= 50
        assert all(store.get("reply", k) == "x" * 5000 + k[1:] for k in keys)
        assert store.put("reply", "after", "fine") and store.get("reply", "after") == "fine"
        store.close()


# ----------------------------------------------------------------------------- failures said once
def test_a_corrupt_database_is_one_line_and_the_run_goes_on_uncached(pytester: pytest.Pytester,
                                                                      server: FakeOllamaServer) -> None:
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 5], users=3, inconclusive="warn"'))
    cache = pytester.path / "cache"
    cache.mkdir()
    (cache / DB_NAME).write_bytes(b"not a database at all " * 200)
    args = ["-p", "no:randomly", "--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
            "--robustexplain-cache-dir=cache"]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*cache database *{DB_NAME}: cannot be used (file is not a database); "
                                 "the run goes on without it*"])
    assert result.stdout.str().count("cannot be used") == 1
    calls = server.chat_calls
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    assert server.chat_calls == 2 * calls  # nothing was kept: every call made again


def test_a_database_cut_short_is_said_and_not_read(tmp_path: Path) -> None:
    whole = Store(tmp_path, writes=True)
    for n in range(200):
        whole.put("reply", f"k{n}", "y" * 3000)
    whole.close()
    data = (tmp_path / DB_NAME).read_bytes()
    (tmp_path / DB_NAME).write_bytes(data[: len(data) // 3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cut = Store(tmp_path, writes=True)
        found = [cut.get("reply", f"k{n}") for n in range(200)]
        cut.put("reply", "new", "z")
    said = _said(caught)
    assert len(said) == 1 and "cannot be used" in said[0] and "the run goes on without it" in said[0]
    assert found[:1] in ([None], ["y" * 3000]) and None in found  # what could be read, then nothing more


def _configured(monkeypatch: pytest.MonkeyPatch, *pragmas: str) -> None:
    configure = Store._configure

    def with_pragmas(self: Store, connection: Any) -> None:
        configure(self, connection)
        for pragma in pragmas:
            connection.execute(pragma)

    monkeypatch.setattr(Store, "_configure", with_pragmas)


@pytest.mark.parametrize(("pragma", "reason"), [
    ("PRAGMA query_only = ON", "attempt to write a readonly database"),  # SQLite's error on a read-only disk
    ("PRAGMA max_page_count = 8", "database or disk is full"),  # and on a full one
])
def test_a_read_only_or_full_disk_is_one_line_and_reads_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              pragma: str, reason: str) -> None:
    seeded = ResponseCache(tmp_path)
    key = cache_key({"seeded": 1})
    assert seeded.put(key, {"seeded": 1}, _reply("kept before"))
    seeded.store.close()
    _configured(monkeypatch, pragma)
    cache = ResponseCache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = [cache.put(cache_key({"n": n}), {"n": n}, _reply("x" * 4000)) for n in range(20)]
        hit = cache.get(key)
    said = _said(caught)
    assert len(said) == 1 and f"cannot write ({reason}); the run goes on without keeping" in said[0]
    assert not all(written) and cache.stats.write_errors == written.count(False)
    assert hit is not None and hit.text == "kept before"  # what was kept is still read


def test_a_lock_held_too_long_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "BUSY_S", 0.05)
    store = Store(tmp_path, writes=True)
    assert store.put("reply", "a", "1")
    with contextlib.closing(sqlite3.connect(tmp_path / DB_NAME, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process writing and not letting go
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not store.put("reply", "b", "2") and not store.put("reply", "c", "3")
            assert store.get("reply", "a") == "1"  # readers are not held up by a writer
        other.execute("ROLLBACK")
    said = _said(caught)
    assert len(said) == 1 and "cannot write (database is locked)" in said[0]
    store.close()


def test_processes_creating_the_database_at_once_wait_for_each_other(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes switching a new database to WAL at once deadlock, and SQLite answers the loser "database
    is locked" without waiting (on CI an xdist worker ran uncached and said so). The loser tries again."""
    configure, tries = Store._configure, []

    def locked_twice(self: Store, connection: Any) -> None:
        tries.append(1)
        if len(tries) <= 2:
            raise sqlite3.OperationalError("database is locked")
        configure(self, connection)

    monkeypatch.setattr(Store, "_configure", locked_twice)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = Store(tmp_path, writes=True)
        assert store.put("reply", "k", "v") and store.get("reply", "k") == "v"
    assert len(tries) == 3
    store.close()


def test_a_database_locked_past_the_wait_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def locked(self: Store, connection: Any) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store_module, "BUSY_S", 0.05)
    monkeypatch.setattr(Store, "_configure", locked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = Store(tmp_path, writes=True)
        assert not store.put("reply", "k", "v") and store.get("reply", "k") is None
    said = _said(caught)
    assert len(said) == 1 and "cannot be used (database is locked)" in said[0]


def test_a_reader_creates_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "absent", writes=False)
    assert store.get("reply", "k") is None and not store.put("reply", "k", "v")
    assert not (tmp_path / "absent").exists()


def test_what_an_older_release_left_is_named_once(tmp_path: Path) -> None:
    for old in ("ab", "scores", "pace"):
        (tmp_path / old).mkdir()
    (tmp_path / "notes").mkdir()  # the user's own folder: not named
    with pytest.warns(RobustExplainWarning, match=r"3 folders \(ab, pace, scores\) of an older "
                                                  r"pytest-robustexplain .* not read any more") as caught:
        ResponseCache(tmp_path).check_writable()
    assert len(caught) == 1


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_a_cache_directory_on_a_read_only_or_full_disk_is_read_and_said_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    from pytest_robustexplain.explainers import cache as cache_module

    seeded = ResponseCache(tmp_path)
    key = cache_key({"seeded": 1})
    assert seeded.put(key, {"seeded": 1}, _reply("kept before"))
    seeded.store.close()

    def refused(**_: Any) -> Any:  # the probe file, on a disk that refuses new files
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(cache_module.tempfile, "mkstemp", refused)
    cache = ResponseCache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.check_writable()  # no usage error: the run goes on
        assert not cache.put(cache_key({"new": 1}), {"new": 1}, _reply())
        hit = cache.get(key)
    assert _said(caught) == [f"response cache directory {tmp_path}: {os.strerror(code)}; the run goes on "
                             "without keeping what it fetches"]
    assert hit is not None and hit.text == "kept before"
