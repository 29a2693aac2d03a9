"""A response cache on disk, so reruns (and CI replays) do not pay for the same generation twice.

Key: sha256 of the canonical JSON of the explainer's ``request_identity`` — backend, model digest, full
prompt, options, seed and repeat index — so repeats are distinct entries and a re-pulled model (new
digest) misses. Entries live in the cache directory's database (:mod:`pytest_robustexplain.store`): a
reader or a concurrent writer (threads, xdist workers) sees no entry or a whole one. Two writers of the same
key write the same content, so the last one winning is harmless.

Only successful explanations are stored; failures are always regenerated. An unreadable or corrupt
entry is reported with a RobustExplainWarning naming it, then ignored and overwritten.

Modes: ``off`` (no cache), ``read`` (use hits, write nothing), ``write`` (always generate, store),
``read-write`` (default), ``replay-only`` (never call the model; a miss raises CacheMissError). For
replay without a server, the model facts learned at preflight are stored too and replayed instead of
contacting the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..data import EvalCase, Item, UserHistory
from ..errors import CacheMissError, ConfigError, RobustExplainWarning, warn
from ..safe_files import make_cache_dir, open_inside
from ..store import DB_NAME, Store
from .base import Explainer, Explanation, ModelInfo, context_check, digest_now
from .context import ContextWindow

CACHE_MODES: tuple[str, ...] = ("off", "read", "write", "read-write", "replay-only")
WRITING_MODES: tuple[str, ...] = ("write", "read-write")  # the modes that store what they fetch
ENTRY_FORMAT = 1
REPLY, MODEL = "reply", "model"  # the store's kinds of entry
_EXPLANATION_FIELDS = ("text", "model", "latency_s", "prompt_tokens", "completion_tokens")
# Newer than the entry format: absent from older entries (None, False, "" then). A truncated prompt's reply
# is stored with its flag and the sentence saying how far the prompt overran the context.
_OPTIONAL_FIELDS = ("stop_reason", "truncated", "detail")


def canonical_json(value: Any) -> str:
    """Key-sorted, whitespace-free JSON: equal identities always serialise to equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(identity: dict[str, Any]) -> str:
    """The sha256 hex digest of an identity's canonical JSON."""
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


def validate_mode(mode: str) -> str:
    """The mode, or a ConfigError listing the valid ones."""
    if mode not in CACHE_MODES:
        raise ConfigError(f"unknown cache mode {mode!r}; valid modes: {', '.join(CACHE_MODES)}")
    return mode


class ReplayMissError(CacheMissError):
    """A replay-only miss, with what was asked for (so the sweep can add the perturbation it ran)."""

    def __init__(self, message: str, *, user_id: str, item_id: str, key: str, directory: Path) -> None:
        super().__init__(message)
        self.user_id = user_id
        self.item_id = item_id
        self.key = key
        self.directory = directory


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    corrupt: int = 0
    write_errors: int = 0  # entries that could not be written (disk full, a directory in the way)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ResponseCache:
    """Successful explanations on disk, keyed by request identity."""

    def __init__(self, directory: str | os.PathLike[str], mode: str = "read-write", *,
                 store: Store | None = None) -> None:
        """``store``: the run's one store of the directory (its caches share it, so a failure is said
        once); by default a store of its own."""
        self.directory = Path(directory)
        self.mode = validate_mode(mode)
        self.stats = CacheStats()
        self._lock = threading.Lock()  # stats are shared by every thread using this cache
        self.store = store if store is not None else Store(self.directory, writes=self.writes)

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r}, mode={self.mode!r})"

    def check_writable(self) -> None:
        """Before any model call: a cache that will be written must be writable (one ConfigError naming
        the directory and the cause, instead of an error on every item or an INTERNALERROR); what an older
        release left there is named once."""
        try:
            if self.writes:
                make_cache_dir(self.directory)
                fd, probe = tempfile.mkstemp(dir=self.directory, prefix=".probe-")
                os.close(fd)
                os.unlink(probe)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.ENOSPC):
                raise ConfigError(f"response cache directory {self.directory}: not writable "
                                  f"({exc.strerror or exc}); give a writable one (cache-dir) or turn the "
                                  "cache off (cache=off)") from None
            # The disk, not the setting: what is kept is still read, nothing more is kept (said once).
            self.store.unwritable = True
            warn(RobustExplainWarning(
                f"response cache directory {self.directory}: {exc.strerror or exc}; the run goes on "
                "without keeping what it fetches"))
        old = old_layout(self.directory)
        if old:
            warn(RobustExplainWarning(
                f"response cache {self.directory}: {old} of an older pytest-robustexplain (a file per "
                f"entry) are not read any more (the cache is {DB_NAME} now); delete them to free the space"))

    @property
    def reads(self) -> bool:
        return self.mode in ("read", "read-write", "replay-only")

    @property
    def writes(self) -> bool:
        return self.mode in WRITING_MODES

    def has(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (read as it is: counts nothing)."""
        return self.store.get(REPLY, key) is not None

    def get(self, key: str) -> Explanation | None:
        """The stored explanation (``cached=True``), or None on a miss or a corrupt entry."""
        raw = self.store.get(REPLY, key)
        if raw is None:
            self._count("misses")
            return None
        try:
            entry = json.loads(raw)
            # The key names the request; the identity stored beside it must still hash to it, or the entry
            # was edited (or copied from another request) and its text answers something else.
            if not isinstance(entry.get("identity"), dict) or cache_key(entry["identity"]) != key:
                raise ValueError("its stored request identity does not match its key")
            fields = {name: entry["explanation"][name] for name in _EXPLANATION_FIELDS}
            fields.update({name: entry["explanation"].get(name) for name in _OPTIONAL_FIELDS})
            if fields["stop_reason"] is not None and not isinstance(fields["stop_reason"], str):
                raise ValueError("its stop_reason is not text")
            fields["truncated"] = fields["truncated"] or False
            fields["detail"] = fields["detail"] or ""
            if not isinstance(fields["truncated"], bool) or not isinstance(fields["detail"], str):
                raise ValueError("its truncated flag or detail has the wrong type")
            if not isinstance(fields["text"], str) or not fields["text"]:
                raise ValueError("its text is missing or empty")
            explanation = Explanation(**fields, cached=True)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return self._corrupt(key, f"is corrupt ({type(exc).__name__}: {exc})")
        self._count("hits")
        return explanation

    def put(self, key: str, identity: dict[str, Any], explanation: Explanation) -> bool:
        """Store a successful explanation; failures and cached copies are not written. True if written."""
        if not self.writes or not explanation.ok or explanation.cached:
            return False
        entry = {
            "format": ENTRY_FORMAT,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "identity": identity,
            "explanation": {name: getattr(explanation, name)
                            for name in (*_EXPLANATION_FIELDS, *_OPTIONAL_FIELDS)},
        }
        # A full disk or a read-only one: the explanation is still good, only not cached (the store says
        # so once).
        written = self.store.put(REPLY, key, json.dumps(entry, ensure_ascii=False, sort_keys=True))
        self._count("writes" if written else "write_errors")
        return written

    @contextlib.contextmanager
    def key_lock(self, key: str) -> Iterator[None]:
        """Hold an exclusive cross-process lock on one key (xdist workers sharing originals).

        The first worker to miss generates and writes while the others wait on the lock and then read
        the entry it wrote, so a shared explanation costs one model call however many workers need it.
        Where ``fcntl`` does not exist (Windows), this is a no-op and duplicates are merely possible.
        """
        try:
            import fcntl  # optional: not on every platform
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        path = self.directory / "locks" / f"{key[:16]}.lock"
        try:
            handle = os.fdopen(open_inside(self.directory, path, os.O_RDWR | os.O_CREAT), "r+b")
        except OSError:
            yield  # no lock file possible: duplicates across workers become possible, nothing breaks
            return
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # ------------------------------------------------------------------ model facts for offline replay
    def put_model_info(self, info: ModelInfo) -> None:
        """Remember what preflight learned, so replay-only runs can rebuild the same cache keys."""
        if self.writes:
            data = {"requested": info.extra.get("requested", info.name), **asdict(info)}
            self.store.put(MODEL, _model_key(info.backend, str(data["requested"])),
                           json.dumps(data, ensure_ascii=False, sort_keys=True, default=str))

    def get_model_info(self, backend: str, model: str) -> ModelInfo | None:
        """The recorded ModelInfo for (backend, requested model name), or None."""
        raw = self.store.get(MODEL, _model_key(backend, model))
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            data.pop("requested", None)
            return ModelInfo(**data)
        except (ValueError, TypeError, AttributeError) as exc:
            warn(RobustExplainWarning(
                f"response cache {self.store.path}: ignoring the unreadable model facts of {model!r} "
                f"({exc})"))
            return None

    # ------------------------------------------------------------------ internals
    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _corrupt(self, key: str, problem: str) -> Explanation | None:
        self._count("corrupt")
        self._count("misses")
        warn(RobustExplainWarning(
            f"response cache entry {key[:12]}… in {self.store.path} {problem}; ignoring it, it will be "
            "regenerated"))
        return None


class CachedExplainer:
    """An Explainer that answers from a ResponseCache and asks ``inner`` only on misses."""

    def __init__(self, inner: Explainer, cache: ResponseCache, *, cross_process: bool = False) -> None:
        """``cross_process=True`` serialises misses of the same key across processes (file locks)."""
        self.inner = inner
        self.cache = cache
        self.cross_process = cross_process and cache.reads and cache.writes
        self.backend = inner.backend
        self.model = inner.model
        self.info: ModelInfo | None = None
        # Replies this run got from a provider batch (``explainers/batch.py``), by key: calls made, not cache
        # hits (counted and priced as made), a reply that is no explanation included.
        self.fresh: dict[str, Explanation] = {}
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())

    def __repr__(self) -> str:
        return f"CachedExplainer({self.inner!r}, {self.cache!r})"

    @property
    def stats(self) -> dict[str, int]:
        """Cache hits, misses, writes and corrupt entries."""
        return self.cache.stats.as_dict()

    async def preflight(self) -> ModelInfo:
        """The inner preflight; in replay-only mode the recorded model facts instead (no server needed)."""
        adopt = getattr(self.inner, "use_model_info", None)
        if self.cache.mode == "replay-only" and adopt is not None:
            info = self.cache.get_model_info(self.backend, self.model)
            if info is None:
                raise CacheMissError(
                    f"replay-only: no recorded model facts for {self.backend} model {self.model!r} in "
                    f"{self.cache.directory}; run once with --robustexplain-cache=read-write and the "
                    "server up")
            adopt(info)
        else:
            # Local explainers (template, callable) preflight without any server, even when replaying.
            info = await self.inner.preflight()
            self.cache.put_model_info(_with_requested(info, self.model))
        self.info = info
        return info

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int,
                      kind: str | None = None) -> Explanation:
        """A cached explanation (``cached=True``) or a fresh one, stored when it succeeded.

        ``kind`` (the perturbation being run) only makes a replay-only miss message more precise.
        """
        await self._ensure_preflight()
        identity = self.inner.request_identity(history, item, seed=seed, repeat=repeat)
        key = cache_key(identity)
        return await self._answer(key, identity, lambda: self.inner.explain(history, item, seed=seed,
                                                                            repeat=repeat),
                                  lambda: self._miss(history, item, key, seed, repeat, kind))

    async def complete(self, prompt: str, *, seed: int, purpose: str) -> Explanation:
        """The inner explainer's reply to ``prompt`` as it is (the judge's calls), cached like an
        explanation under its :meth:`~.remote.RemoteExplainer.completion_identity`."""
        await self._ensure_preflight()
        identity = self.inner.completion_identity(prompt, seed=seed, purpose=purpose)  # type: ignore[attr-defined]
        key = cache_key(identity)

        def miss() -> CacheMissError:
            return CacheMissError(
                f"replay-only cache miss for a {purpose} call of {self.backend} model {self.model!r} (seed "
                f"{seed}, key {key[:12]}…) in {self.cache.directory}; rerun with "
                "--robustexplain-cache=read-write and the model server running to record it")

        return await self._answer(key, identity, lambda: self.inner.complete(  # type: ignore[attr-defined]
            prompt, seed=seed, purpose=purpose), miss)

    async def _answer(self, key: str, identity: dict[str, Any], make: Callable[[], Awaitable[Explanation]],
                      miss: Callable[[], CacheMissError]) -> Explanation:
        """A hit, or ``make()`` stored when it succeeded; a replay-only miss raises ``miss()``."""
        if key in self.fresh:
            return self.fresh[key]
        if self.cache.reads:
            hit = await asyncio.to_thread(self.cache.get, key)
            if hit is not None:
                return hit
        if self.cache.mode == "replay-only":
            raise miss()
        if not self.cross_process:
            return await self._generate(key, identity, make)
        lock = self.cache.key_lock(key)
        # flock blocks: take it on a worker thread so the event loop keeps serving other pairs.
        await asyncio.to_thread(lock.__enter__)
        try:
            hit = await asyncio.to_thread(self.cache.get, key)  # another process may have written it
            if hit is not None:
                return hit
            return await self._generate(key, identity, make)
        finally:
            await asyncio.to_thread(lock.__exit__, None, None, None)

    async def _generate(self, key: str, identity: dict[str, Any], make: Callable[[], Awaitable[Explanation]]
                        ) -> Explanation:
        explanation = await make()
        if self.cache.writes and explanation.ok:
            await asyncio.to_thread(self.cache.put, key, identity, explanation)
        return explanation

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        return self.inner.request_identity(history, item, seed=seed, repeat=repeat)

    async def aclose(self) -> None:
        await self.inner.aclose()
        self.cache.store.close()

    async def current_digest(self) -> str | None:
        """The inner explainer's (none when replaying: no server is asked)."""
        return None if self.cache.mode == "replay-only" else await digest_now(self.inner)

    async def oversized(self, cases: Sequence[EvalCase]) -> tuple[ContextWindow | None, list[tuple[str, int]],
                                                                  bool]:
        """The inner explainer's context check (none for explainers without a context)."""
        return await context_check(self.inner, cases)

    # ------------------------------------------------------------------ internals
    async def _ensure_preflight(self) -> None:
        # Keys contain the model digest, which only preflight knows: compute none before it ran.
        if self.info is not None:
            return
        loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            if self.info is None:
                await self.preflight()

    def _miss(self, history: UserHistory, item: Item, key: str, seed: int, repeat: int,
              kind: str | None) -> ReplayMissError:
        what = f"user {history.user_id!r}, item {item.item_id!r}, kind {kind or 'not given'}"
        return ReplayMissError(
            f"replay-only cache miss for {what} (seed {seed}, repeat {repeat}, {len(history)} interactions, "
            f"key {key[:12]}…) in {self.cache.directory}; rerun with --robustexplain-cache=read-write and "
            "the model server running to record it",
            user_id=history.user_id, item_id=item.item_id, key=key, directory=self.cache.directory)


def _model_key(backend: str, model: str) -> str:
    return f"{backend}\0{model}"


def old_layout(directory: Path) -> str:
    """What an older release left in a cache directory (its folders of one file per entry), or ""."""
    names = ("scores", "models", "pace", "embeddings")
    try:
        old = sorted(p.name for p in directory.iterdir() if p.is_dir() and not p.is_symlink() and (
            p.name in names or (len(p.name) == 2 and all(c in "0123456789abcdef" for c in p.name))))
    except OSError:
        return ""
    if not old:
        return ""
    shown = ", ".join(old[:4]) + (", …" if len(old) > 4 else "")
    return f"{len(old)} folder{'s' if len(old) > 1 else ''} ({shown})"


def _with_requested(info: ModelInfo, requested: str) -> ModelInfo:
    # The model is recorded under the name the user asked for ("llama3.1"), which may differ from the
    # resolved one ("llama3.1:latest"); that is the name a replay run will look it up by.
    return ModelInfo(**{**asdict(info), "extra": {**info.extra, "requested": requested}})
