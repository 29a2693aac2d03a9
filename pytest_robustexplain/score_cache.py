"""The score cache: the four metrics of each scored pair on disk, beside the response cache, so a rerun
whose explanations all come from the response cache never builds the scorer (TextBlob's tagger and
lexicon, sacrebleu: about 0.3 s before the first pair; a second and more while it imported nltk).

What is stored. A pair's four metric values (:class:`~pytest_robustexplain.metrics.TextScores`) are a pure
function of the two texts and of :func:`~pytest_robustexplain.metrics.text_signature` (tokenizer, tagger
and its version, BLEU settings and sacrebleu's version, this package's version). The weights only combine
them into ρ and the opt-in embedding metric is a cosine of vectors that come with the explanations, so
neither is stored: :func:`~pytest_robustexplain.metrics.combine` forms ρ from the stored metrics exactly as
from freshly computed ones. A pair's key is the sha256 of (signature, nltk's version, e, e′): a new package,
tagger or sacrebleu version misses and the pair is scored again.

Where. In the cache directory's database (:mod:`pytest_robustexplain.store`), beside the replies: one
entry per pair, grouped by its original explanation (the hash of signature, nltk's version and e), so a
warm run reads an original's ~26 pairs in one query. An entry that cannot be read (a hand edit) is reported
with one RobustExplainWarning, ignored, and its pair scored again; a cache that writes removes it, so the
warning is not repeated on every run.

Modes are the response cache's: ``off`` (none), ``read`` and ``replay-only`` (use hits, write nothing: a
miss is scored, since scoring needs no model), ``write`` (always score, store), ``read-write`` (default).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, RobustExplainWarning, warn
from .metrics import (
    DEFAULT_TAGGER,
    FAILED_TEXT,
    PairScores,
    Scorer,
    TextScores,
    Vector,
    Weights,
    check_embedding,
    combine,
    text_signature,
    validate_weights,
)
from .metrics.user import MetricMeasure
from .results import is_score
from .store import Store

if TYPE_CHECKING:
    from .metrics.user import Metric

__all__ = ["CachedScorer", "MetricValueCache", "ScoreCache", "ScoreCacheStats"]

_MODES = ("off", "read", "write", "read-write", "replay-only")
_READS = ("read", "read-write", "replay-only")
_WRITES = ("write", "read-write")


def _hash(*parts: str) -> str:
    # JSON of the parts: unambiguous whatever the texts contain.
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


def _nltk_version() -> str:
    # The tokenizer is nltk's RegexpTokenizer: its version goes into the key (not into the signature).
    try:
        return metadata.version("nltk")
    except metadata.PackageNotFoundError:  # pragma: no cover - a dependency
        return "none"


@dataclass
class ScoreCacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    corrupt: int = 0  # unreadable entries met (each pair is scored again)
    write_errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ScoreCache:
    """The four metrics of scored pairs, keyed by (signature, e, e′), in ``directory``'s database (see the
    module)."""

    KIND = "score"  # the store's kind of entry

    def __init__(self, directory: str | os.PathLike[str], mode: str = "read-write", *,
                 signature: str | None = None, store: Store | None = None) -> None:
        if mode not in _MODES:
            raise ConfigError(f"unknown cache mode {mode!r}; valid modes: {', '.join(_MODES)}")
        self.directory = Path(directory)
        self.mode = mode
        self.signature = signature if signature is not None else text_signature()
        self._salt = self._salt_of(self.signature)
        self.stats = ScoreCacheStats()
        self.store = store if store is not None else Store(self.directory, writes=self.writes)
        self._groups: dict[str, dict[str, Any]] = {}  # by original text: ~26 pairs each, read once
        self._lock = threading.Lock()
        # Hashes of the texts (a few kB each) are computed once: an original's for its ~26 pairs, a pair's
        # for the sweep asking whether it needs the scorer and then scoring it.
        self._stem = lru_cache(maxsize=4096)(lambda e: _hash(self._salt, e))
        self._pair_key = lru_cache(maxsize=16)(self._compute_key)

    def __repr__(self) -> str:
        return f"ScoreCache({str(self.directory)!r}, mode={self.mode!r})"

    @staticmethod
    def _salt_of(signature: str) -> str:
        return f"{signature}|nltk@{_nltk_version()}"

    @staticmethod
    def _encode(scores: Any) -> dict[str, Any]:
        """A stored entry's JSON fields."""
        return {"metrics": [scores.semantic, scores.keyword, scores.structural, scores.length],
                "keyword_empty": scores.keyword_empty, "failed": scores.failed}

    @staticmethod
    def _decode(entry: dict[str, Any]) -> Any:
        return _parse(entry)

    @property
    def reads(self) -> bool:
        return self.mode in _READS

    @property
    def writes(self) -> bool:
        return self.mode in _WRITES

    def key(self, e: str, e_prime: str) -> str:
        """The pair's key: the hash of its group (which commits to the signature and e) and e′."""
        return self._pair_key(e, e_prime)

    def _compute_key(self, e: str, e_prime: str) -> str:
        return _hash(self._stem(e), e_prime)

    def peek(self, e: str, e_prime: str) -> bool:
        """Whether (e, e′) is stored (and the mode reads it); counts nothing."""
        if not self.reads:
            return False
        key = self.key(e, e_prime)
        with self._lock:
            return key in self._group(e)

    def get(self, e: str, e_prime: str) -> TextScores | None:
        """The stored metrics of (e, e′), or None (a miss, or a mode that does not read)."""
        if not self.reads:
            return None
        key = self.key(e, e_prime)
        with self._lock:
            found = self._group(e).get(key)
            if found is None:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
            return found

    def put(self, e: str, e_prime: str, scores: TextScores) -> bool:
        """Store the metrics of (e, e′); True when written."""
        if not self.writes:
            return False
        key = self.key(e, e_prime)
        record = json.dumps(self._encode(scores), separators=(",", ":"), allow_nan=False)
        with self._lock:
            if not self.store.put(self.KIND, key, record, group=self._stem(e)):
                self.stats.write_errors += 1  # the store said why, once
                return False
            self._group(e)[key] = scores
            self.stats.writes += 1
            return True

    # ------------------------------------------------------------------ internals
    def _group(self, e: str) -> dict[str, Any]:
        entries = self._groups.get(e)
        if entries is None:
            entries = self._groups[e] = self._load(self._stem(e)) if self.reads else {}
        return entries

    def _load(self, stem: str) -> dict[str, Any]:
        entries: dict[str, Any] = {}
        bad: list[str] = []
        problems: list[str] = []
        for key, raw in self.store.group(self.KIND, stem):
            try:
                entries[key] = self._decode(json.loads(raw))
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
                bad.append(key)
        if problems:
            self.stats.corrupt += len(problems)
            what = "1 entry" if len(problems) == 1 else f"{len(problems)} entries"
            warn(RobustExplainWarning(
                f"score cache {self.store.path}: {what} cannot be read ({problems[0]}); ignoring "
                f"{'it' if len(problems) == 1 else 'them'}, those pairs are scored again"))
            if self.writes:
                self.store.delete(self.KIND, bad)
        return entries


def _parse(entry: dict[str, Any]) -> TextScores:
    metrics = entry["metrics"]
    if not isinstance(metrics, list) or len(metrics) != 4:
        raise ValueError(f"expected 4 metrics, got {metrics!r}")
    for value in metrics:
        if not is_score(value):
            raise ValueError(f"metric {value!r} is not a number in [0, 1]")
    flags = entry["keyword_empty"], entry["failed"]
    if not all(isinstance(flag, bool) for flag in flags):
        raise ValueError(f"flags must be true or false, got {flags!r}")
    semantic, keyword, structural, length = (float(v) for v in metrics)
    return TextScores(semantic, keyword, structural, length, keyword_empty=flags[0], failed=flags[1])


class _ValueStore(ScoreCache):
    """One user metric's values, kept as the four's (grouped by original, an entry per e′), keyed by the
    metric's ``name@version``: a new version misses and is measured again."""

    KIND = "value"

    @staticmethod
    def _salt_of(signature: str) -> str:
        return signature  # the user's function, not nltk, decides the value

    @staticmethod
    def _encode(scores: Any) -> dict[str, Any]:
        return {"value": scores}

    @staticmethod
    def _decode(entry: dict[str, Any]) -> Any:
        value = entry["value"]
        if not is_score(value):
            raise ValueError(f"value {value!r} is not a number in [0, 1]")
        return float(value)


class MetricValueCache:
    """The user's metrics' values on disk, beside the four's, one store per metric version, in the score
    cache's mode: a warm rerun measures nothing again."""

    def __init__(self, directory: str | os.PathLike[str], mode: str = "read-write", *,
                 store: Store | None = None) -> None:
        if mode not in _MODES:
            raise ConfigError(f"unknown cache mode {mode!r}; valid modes: {', '.join(_MODES)}")
        self.directory = Path(directory)
        self.mode = mode
        self.store = store if store is not None else Store(self.directory, writes=mode in _WRITES)
        self._stores: dict[str, _ValueStore] = {}

    def _store(self, metric: Metric) -> _ValueStore:
        store = self._stores.get(metric.tag)
        if store is None:
            store = self._stores[metric.tag] = _ValueStore(self.directory, self.mode,
                                                           signature=f"user:{metric.tag}", store=self.store)
        return store

    def close(self) -> None:
        self.store.close()

    def get(self, metric: Metric, e: str, e_prime: str) -> float | None:
        found: Any = self._store(metric).get(e, e_prime)  # a value: _ValueStore decodes floats
        return None if found is None else float(found)

    def put(self, metric: Metric, e: str, e_prime: str, value: float) -> bool:
        return self._store(metric).put(e, e_prime, value)  # type: ignore[arg-type]


class CachedScorer:
    """Scores pairs as :class:`~pytest_robustexplain.metrics.Scorer` does (same numbers: ρ is formed by
    :func:`~pytest_robustexplain.metrics.combine` in both cases), answering from a :class:`ScoreCache`
    when it can. The Scorer itself is built on the first pair that needs it, so a run whose pairs are all
    in the cache (or all failed) never imports nltk, TextBlob or sacrebleu.

    Which thread builds it matters: loading TextBlob's lexicon must silence its ResourceWarnings with
    ``warnings.catch_warnings``, which swaps process-wide state and is not thread-safe — on another thread
    it races pytest's own per-test ``catch_warnings`` and can leave a finished test's warning recorder in
    place (later warnings vanish). So the sweep's event loop never builds it: a pair that needs it asks
    for it (:meth:`request`), and the thread waiting for results (pytest's, or ``robustexplain run``'s)
    builds it in :meth:`build_requested`, while the loop goes on with the other pairs' model calls."""

    def __init__(self, *, weights: Mapping[str, Any] | Sequence[Any] | None = None,
                 cache: ScoreCache | None = None, tagger: str = DEFAULT_TAGGER,
                 make_scorer: Callable[[], Scorer] | None = None,
                 user_cache: MetricValueCache | None = None, budget_s: float | None = None) -> None:
        self._weights: Weights = validate_weights(weights)
        self.cache = cache
        # The user's own metrics, measured per test (the sweep's books ask), behind their own cache.
        self.user = MetricMeasure(user_cache, budget_s=budget_s)
        self._make = make_scorer or (lambda: Scorer(weights=self._weights, tagger=tagger))
        self._scorer: Scorer | None = None
        self._requested: Future[Scorer] | None = None
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()

    def close(self) -> None:
        """Close the caches' databases (a later use opens them again)."""
        if self.cache is not None:
            self.cache.store.close()
        if isinstance(self.user.cache, MetricValueCache):
            self.user.cache.close()

    def __repr__(self) -> str:
        return f"CachedScorer(cache={self.cache!r}, built={self.built})"

    @classmethod
    def around(cls, scorer: CachedScorer | Scorer) -> CachedScorer:
        """``scorer`` as a CachedScorer: itself, or a built Scorer behind no cache (ready at once)."""
        if isinstance(scorer, CachedScorer):
            return scorer
        cached = cls(weights=scorer.weights, make_scorer=lambda: scorer)
        cached._scorer = scorer
        return cached

    def readiness(self, e: str, e_prime: str) -> Future[Scorer] | None:
        """None when (e, e′) can be scored now; else the future of the Scorer, asked for (:meth:`request`)
        and built by the waiting thread in :meth:`build_requested`."""
        return self.request() if self.needs_scorer(e, e_prime) else None

    def needs_scorer(self, e: str, e_prime: str) -> bool:
        """Whether scoring (e, e′) needs the Scorer and it is not built yet."""
        if self._scorer is not None or not isinstance(e, str) or not isinstance(e_prime, str):
            return False
        if not e.strip() or not e_prime.strip():
            return False
        return self.cache is None or not self.cache.peek(e, e_prime)

    def request(self) -> Future[Scorer]:
        """Ask for the Scorer to be built by :meth:`build_requested` (once); the future is its result."""
        with self._lock:
            if self._requested is None:
                self._requested = Future()
                if self._scorer is not None:
                    self._requested.set_result(self._scorer)
            return self._requested

    @property
    def requested(self) -> bool:
        """Whether a pair waits for the Scorer to be built."""
        future = self._requested
        return future is not None and not future.done()

    def build_requested(self) -> None:
        """Build the Scorer when a pair asked for it (on the calling thread) and hand it over; a failure
        to build is raised to the pairs that wait."""
        future = self._requested
        if future is None or future.done():
            return
        try:
            scorer = self.scorer
        except Exception as exc:
            future.set_exception(exc)
        except BaseException:
            # Ctrl-C or SIGTERM during the build: the waiting pairs are cancelled (the loop goes on with the
            # stop), never handed a KeyboardInterrupt of another thread to raise in the loop's.
            future.cancel()
            raise
        else:
            future.set_result(scorer)

    @property
    def weights(self) -> Weights:
        return self._weights

    @property
    def built(self) -> bool:
        """Whether the Scorer (and with it nltk, TextBlob, sacrebleu) has been needed."""
        return self._scorer is not None

    @property
    def scorer(self) -> Scorer:
        """The Scorer, built on first use — under a lock of its own: the sweep's loop thread takes
        ``_lock`` for every finished pair (:meth:`request`), and held through the build (about a second of
        imports) it stopped every model call of the run meanwhile."""
        if self._scorer is not None:
            return self._scorer
        with self._build_lock:
            if self._scorer is None:
                built = self._make()
                with self._lock:
                    self._scorer = built
        return self._scorer

    def score(self, e: str, e_prime: str, *, vectors: tuple[Vector, Vector] | None = None) -> PairScores:
        """All four metrics and ρ (with these weights); with ``vectors`` the embedding metric too."""
        check_embedding(self._weights, vectors)
        return combine(self.text_scores(e, e_prime), self._weights, vectors)

    def text_scores(self, e: str, e_prime: str) -> TextScores:
        """The pair's four metrics: from the cache, or computed (and stored)."""
        if not isinstance(e, str) or not isinstance(e_prime, str):
            return self.scorer.text_scores(e, e_prime)  # the Scorer's TypeError
        if not e.strip() or not e_prime.strip():
            return FAILED_TEXT  # what the Scorer says of an empty text, without building it
        if self.cache is None:
            return self.scorer.text_scores(e, e_prime)
        found = self.cache.get(e, e_prime)
        if found is not None:
            return found
        scores = self.scorer.text_scores(e, e_prime)
        self.cache.put(e, e_prime, scores)
        return scores
