"""A response cache on disk, so reruns (and CI replays) do not pay for the same generation twice.

Key: sha256 of the canonical JSON of the explainer's ``request_identity`` — backend, model digest, full
prompt, options, seed and repeat index — so repeats are distinct entries and a re-pulled model (new
digest) misses. Layout: one file per entry, ``<directory>/<first 2 hex>/<hash>.json``, written to a
temporary file in the same directory and moved into place with ``os.replace``: readers and concurrent
writers (threads, xdist workers) see either no entry or a whole one, never a torn file. Two writers of
the same key write the same content, so the last rename winning is harmless.

Only successful explanations are stored; failures are always regenerated. An unreadable or corrupt
entry is reported with a RobustExplainWarning naming the file, then ignored and overwritten.

Modes: ``off`` (no cache), ``read`` (use hits, write nothing), ``write`` (always generate, store),
``read-write`` (default), ``replay-only`` (never call the model; a miss raises CacheMissError). For
replay without a server, the model facts learned at preflight are stored too
(``<directory>/models/``) and replayed instead of contacting the server.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from ..safe_files import check_inside, make_cache_dir, open_inside
from .base import Explainer, Explanation, ModelInfo, context_check, digest_now
from .context import ContextWindow

CACHE_MODES: tuple[str, ...] = ("off", "read", "write", "read-write", "replay-only")
WRITING_MODES: tuple[str, ...] = ("write", "read-write")  # the modes that store what they fetch
ENTRY_FORMAT = 1
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


def write_atomic(path: Path, text: str, *, root: Path | None = None) -> None:
    """Write ``text`` to ``path`` so that no reader ever sees a partial file; with ``root`` (the cache
    directory it belongs to), only inside it (:func:`~pytest_robustexplain.safe_files.check_inside`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if root is not None:
        check_inside(root, path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        for attempt in range(5):
            try:
                os.replace(tmp, path)
                return
            except PermissionError:  # Windows: the target is open in another process; try again shortly
                if attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


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

    def __init__(self, directory: str | os.PathLike[str], mode: str = "read-write") -> None:
        self.directory = Path(directory)
        self.mode = validate_mode(mode)
        self.stats = CacheStats()
        self._lock = threading.Lock()  # stats are shared by every thread using this cache

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r}, mode={self.mode!r})"

    def check_writable(self) -> None:
        """Before any model call: a cache that will be written must be writable (one ConfigError naming
        the directory and the cause, instead of an error on every item or an INTERNALERROR)."""
        if not self.writes:
            return
        try:
            make_cache_dir(self.directory)
            fd, probe = tempfile.mkstemp(dir=self.directory, prefix=".probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"response cache directory {self.directory}: not writable "
                              f"({exc.strerror or exc}); give a writable one (cache-dir) or turn the cache "
                              "off (cache=off)") from None

    @property
    def reads(self) -> bool:
        return self.mode in ("read", "read-write", "replay-only")

    @property
    def writes(self) -> bool:
        return self.mode in WRITING_MODES

    def path_for(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> Explanation | None:
        """The stored explanation (``cached=True``), or None on a miss or a corrupt entry."""
        path = self.path_for(key)
        try:
            check_inside(self.directory, path)
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self._count("misses")
            return None
        except (OSError, UnicodeDecodeError) as exc:
            return self._corrupt(path, f"cannot be read ({exc})")
        try:
            entry = json.loads(raw)
            if entry.get("key") != key:
                raise ValueError(f"it holds key {entry.get('key')!r}")
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
            return self._corrupt(path, f"is corrupt ({type(exc).__name__}: {exc})")
        self._count("hits")
        return explanation

    def put(self, key: str, identity: dict[str, Any], explanation: Explanation) -> bool:
        """Store a successful explanation; failures and cached copies are not written. True if written."""
        if not self.writes or not explanation.ok or explanation.cached:
            return False
        entry = {
            "format": ENTRY_FORMAT,
            "key": key,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "identity": identity,
            "explanation": {name: getattr(explanation, name)
                            for name in (*_EXPLANATION_FIELDS, *_OPTIONAL_FIELDS)},
        }
        try:
            write_atomic(self.path_for(key), json.dumps(entry, ensure_ascii=False, indent=1, sort_keys=True),
                         root=self.directory)
        except OSError as exc:
            # A full disk or a directory in the way: the explanation is still good, only not cached.
            self._write_failed(self.path_for(key), exc)
            return False
        self._count("writes")
        return True

    def _write_failed(self, path: Path, exc: OSError) -> None:
        self._count("write_errors")
        with self._lock:
            first = self.stats.write_errors == 1
        if first:  # once per cache: the same cause would repeat for every entry
            warn(RobustExplainWarning(
                f"response cache {self.directory}: cannot write {path.name} ({exc.strerror or exc}); "
                "the run goes on without caching what cannot be written"))

    @contextlib.contextmanager
    def key_lock(self, key: str) -> Iterator[None]:
        """Hold an exclusive cross-process lock on one key (xdist workers sharing originals).

        The first worker to miss generates and writes while the others wait on the lock and then read
        the entry it wrote, so a shared explanation costs one model call however many workers need it.
        Where ``fcntl`` does not exist (Windows), this is a no-op and duplicates are merely possible.
        """
        try:
            import fcntl
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
    def _model_path(self, backend: str, model: str) -> Path:
        digest = hashlib.sha256(f"{backend}\0{model}".encode()).hexdigest()[:24]
        return self.directory / "models" / f"{digest}.json"

    def put_model_info(self, info: ModelInfo) -> None:
        """Remember what preflight learned, so replay-only runs can rebuild the same cache keys."""
        if self.writes:
            data = {"requested": info.extra.get("requested", info.name), **asdict(info)}
            path = self._model_path(info.backend, str(data["requested"]))
            try:
                text = json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True, default=str)
                write_atomic(path, text, root=self.directory)
            except OSError as exc:
                self._write_failed(path, exc)

    def get_model_info(self, backend: str, model: str) -> ModelInfo | None:
        """The recorded ModelInfo for (backend, requested model name), or None."""
        path = self._model_path(backend, model)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data.pop("requested", None)
            return ModelInfo(**data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            warn(RobustExplainWarning(f"ignoring unreadable cache file {path}: {exc}"))
            return None

    # ------------------------------------------------------------------ internals
    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _corrupt(self, path: Path, problem: str) -> Explanation | None:
        self._count("corrupt")
        self._count("misses")
        warn(RobustExplainWarning(
            f"response cache entry {path} {problem}; ignoring it, it will be regenerated"))
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


def _with_requested(info: ModelInfo, requested: str) -> ModelInfo:
    # The model is recorded under the name the user asked for ("llama3.1"), which may differ from the
    # resolved one ("llama3.1:latest"); that is the name a replay run will look it up by.
    return ModelInfo(**{**asdict(info), "extra": {**info.extra, "requested": requested}})
