"""What a run keeps for the next one — replies and model facts, scores and the user's metric values,
embeddings, the pace of calls — in one SQLite database, ``<cache dir>/robustexplain.sqlite3``.

Why SQLite (issue 60): a cache directory is read and written at once by threads, xdist workers and
concurrent runs, and restored by CI caches. SQLite's transactions keep every entry whole or absent (a killed
run loses at most what it had not committed) and its locks work across processes: what five hand-written
file stores did with fcntl locks, atomic renames and torn-line repair. The WAL journal lets readers go on
while one process writes; ``synchronous=NORMAL`` keeps a commit through a killed process (a power cut may
lose the last ones: a cache can afford that).

A store never fails a run: a database that is corrupt, locked past ``BUSY_S``, a symbolic link, or on a
disk that is read-only or full is said in one RobustExplainWarning; after a failure to read the store
answers nothing, after a failure to write it keeps nothing more, and the run goes on (uncached). The
caches of a run each hold a store of the one database and word a failure alike, so a warning shown once per
place and text (Python's default) is shown once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .errors import RobustExplainWarning, warn
from .safe_files import check_inside, make_cache_dir

DB_NAME = "robustexplain.sqlite3"
# How long a statement waits for another process's write to finish before the store gives up (a run
# writing thousands of entries holds the lock for milliseconds at a time).
BUSY_S = 30.0
_SCHEMA = (
    # kind: what the entry is ("reply", "score", …); grp: entries read together (a score cache's original).
    "CREATE TABLE IF NOT EXISTS kept (kind TEXT NOT NULL, key TEXT NOT NULL, grp TEXT NOT NULL DEFAULT '', "
    "value TEXT NOT NULL, PRIMARY KEY (kind, key)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS kept_group ON kept (kind, grp)",
)
# Files SQLite opens beside the database: none may be a link planted to make it write elsewhere.
_SIDE_FILES = ("", "-wal", "-shm", "-journal")


class Store:
    """Entries ``(kind, key) -> text`` in the cache directory's database, opened on first use.

    ``writes=False`` opens the database read-only and never creates it. Thread-safe: one connection,
    one statement at a time (the stores' statements take microseconds)."""

    def __init__(self, directory: str | Path, *, writes: bool) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.writes = writes
        self.unreadable = False  # set by a failure to open or read: the store answers nothing more
        self.unwritable = not writes  # set by a failure to write: the store keeps nothing more
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, writes={self.writes})"

    def get(self, kind: str, key: str) -> str | None:
        """The entry's text, or None (absent, or the store cannot be read)."""
        rows = self._read("SELECT value FROM kept WHERE kind = ? AND key = ?", (kind, key))
        return str(rows[0][0]) if rows else None

    def group(self, kind: str, group: str) -> list[tuple[str, str]]:
        """Every ``(key, text)`` of ``kind`` stored with ``group``."""
        return [(str(k), str(v)) for k, v in
                self._read("SELECT key, value FROM kept WHERE kind = ? AND grp = ?", (kind, group))]

    def put(self, kind: str, key: str, value: str, *, group: str = "") -> bool:
        """Store (or replace) one entry; True when it was written."""
        return self._write("INSERT OR REPLACE INTO kept (kind, key, grp, value) VALUES (?, ?, ?, ?)",
                           [(kind, key, group, value)])

    def delete(self, kind: str, keys: Iterable[str]) -> bool:
        """Remove entries (ones found unreadable); True when done."""
        return self._write("DELETE FROM kept WHERE kind = ? AND key = ?", [(kind, key) for key in keys])

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # ------------------------------------------------------------------ internals
    def _read(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            connection = self._connect(create=False)
            if connection is None:
                return []
            try:
                return connection.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                self._cannot_read(exc)
                return []

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> bool:
        with self._lock:
            connection = None if self.unwritable else self._connect(create=True)
            if connection is None:
                return False
            try:
                # One transaction, every row or none (the connection commits each statement by itself
                # otherwise); IMMEDIATE takes the write lock first, waiting for it up to BUSY_S.
                connection.execute("BEGIN IMMEDIATE")
                try:
                    connection.executemany(sql, rows)
                except BaseException:
                    connection.rollback()
                    raise
                connection.commit()
            except sqlite3.Error as exc:
                self.unwritable = True
                warn(RobustExplainWarning(
                    f"cache database {self.path}: cannot write ({_reason(exc)}); the run goes on without "
                    "keeping what it cannot write"))
                return False
            return True

    def _connect(self, *, create: bool) -> sqlite3.Connection | None:
        """The connection, opened on first use; only a write creates the database (a dry run that reads
        the pace leaves no cache directory behind)."""
        if self._connection is not None or self.unreadable:
            return self._connection
        if not create and not self.path.is_file():
            return None  # nothing kept yet; looked for again next time (another process may write it)
        try:
            for suffix in _SIDE_FILES:
                check_inside(self.directory, self.path.with_name(DB_NAME + suffix))
            if self.writes:
                make_cache_dir(self.directory)
            self._connection = self._open()
        except (OSError, sqlite3.Error) as exc:
            self._cannot_read(exc)
        return self._connection

    def _open(self) -> sqlite3.Connection:
        mode = "rwc" if self.writes else "ro"
        uri = f"file:{urllib.parse.quote(str(self.path))}?mode={mode}"
        connection = sqlite3.connect(uri, uri=True, timeout=BUSY_S, check_same_thread=False,
                                     isolation_level=None)
        try:
            self._configure_when_free(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _configure_when_free(self, connection: sqlite3.Connection) -> None:
        """Configure, trying again while another process holds the lock. Processes that create the
        database at once can deadlock on the switch to WAL (each holds the read lock the other's write
        waits for); SQLite then answers "database is locked" at once instead of waiting ``BUSY_S``."""
        deadline = time.monotonic() + BUSY_S
        while True:
            try:
                self._configure(connection)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)  # the winner's switch takes a millisecond

    def _configure(self, connection: sqlite3.Connection) -> None:
        """The journal and the table (a read-only store only checks that it reads a database)."""
        if not self.writes:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchall()
            return
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            connection.execute(statement)

    def _cannot_read(self, exc: BaseException) -> None:
        if "no such table" in str(exc):
            return  # a database a reader opened before any writer made the table: nothing kept yet
        self.unreadable = self.unwritable = True
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        warn(RobustExplainWarning(
            f"cache database {self.path}: cannot be used ({_reason(exc)}); the run goes on without it "
            f"(delete the file if it is damaged)"))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__
