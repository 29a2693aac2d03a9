"""The user's own metrics: a named similarity ``f(e, e′) -> float in [0, 1]`` (or a batch form over many
pairs), with a version string that enters the run's signature and the score cache's key.

A metric is registered like a check (the conftest hook ``pytest_robustexplain_register_checks`` gets a
``register_metric``, the process has :func:`pytest_robustexplain.register_metric`) and measured for the
pairs of the tests it belongs to — its conftest's directory and below. It is reported beside the paper's
four, gated when a test names it in ``min_metric`` and part of ρ only when a test's ``weights`` give it a
share. Its values are computed once per distinct (e, e′): :class:`MetricMeasure` answers from memory, then
from the on-disk cache (``score_cache.MetricValueCache``), and calls the user's function only for what
neither holds, all of a batch at once.

Cheap: nothing here imports more than the standard library.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..errors import ConfigError
from ..results import ALL_METRICS, KIND_NAME, RELATIVE, is_score, user_metric_name

if TYPE_CHECKING:
    from ..results import PairResult

PairFn = Callable[[str, str], float]
BatchFn = Callable[[Sequence[tuple[str, str]]], Sequence[float]]

# Names a user metric cannot take: the built-in metrics and the quantities reported beside them.
RESERVED: frozenset[str] = frozenset({*ALL_METRICS, "combined", RELATIVE})


@dataclass(frozen=True, eq=False)
class Metric:
    """One user metric: ``fn(e, e′)`` and/or ``batch([(e, e′), …])``, each value in [0, 1]. ``version`` is
    the user's promise that equal versions give equal values (change it with the function)."""

    name: str
    version: str
    fn: PairFn | None = None
    batch: BatchFn | None = None
    description: str = ""
    # One of the paper's four (``api.BUILTIN_METRICS``): listed in the registry beside the user's, but a
    # run scores the four together from one tokenisation (``Scorer.text_scores``), never through it.
    builtin: bool = False

    @property
    def tag(self) -> str:
        """``name@version``: what the signature lists and the cache keys on."""
        return f"{self.name}@{self.version}"

    def evaluate(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """The metric of each pair (the batch form when there is one), each value checked."""
        if self.batch is not None:
            raw = list(self._call(self.batch, pairs))
            if len(raw) != len(pairs):
                raise ConfigError(f"metric {self.name!r}: its batch function returned {len(raw)} values for "
                                  f"{len(pairs)} pairs")
        else:
            assert self.fn is not None
            fn = self.fn
            raw = [self._call(fn, e, e_prime) for e, e_prime in pairs]
        return [self._checked(value) for value in raw]

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except ConfigError:
            raise
        except Exception as exc:
            # The user's code: one error naming the metric, not a traceback through the sweep.
            raise ConfigError(f"metric {self.name!r} raised {type(exc).__name__}: {exc}") from exc

    def _checked(self, value: Any) -> float:
        if not is_score(value):
            raise ConfigError(f"metric {self.name!r} returned {value!r}; a metric's value must be a number "
                              "in [0, 1] (1 = the two explanations agree)")
        return float(value)


def make_metric(name: Any, fn: Any = None, *, version: Any = None, batch: Any = None,
                description: str = "") -> Metric:
    """A :class:`Metric`, every argument checked: a usage error names what is wrong."""
    if not isinstance(name, str) or not KIND_NAME.match(name):
        raise ConfigError(f"metric name {name!r}: use lower-case letters, digits and underscores, starting "
                          "with a letter")
    if name in RESERVED:
        raise ConfigError(f"metric name {name!r} is taken by a built-in quantity "
                          f"({', '.join(sorted(RESERVED))})")
    if not user_metric_name(name):
        raise ConfigError(f"metric name {name!r} is one typo away from a built-in metric "
                          f"({', '.join(ALL_METRICS)}), and a test naming it would be taken to mean that "
                          "one; choose a more distinct name")
    if fn is None and batch is None:
        raise ConfigError(f"metric {name!r}: give a function (e, e_prime) -> float, or batch=")
    for label, given in (("function", fn), ("batch", batch)):
        if given is not None and not callable(given):
            raise ConfigError(f"metric {name!r}: the {label} must be callable, got {type(given).__name__}")
    if not isinstance(version, str) or not version.strip() or not version.isprintable() \
            or any(c in version for c in "|,@"):
        # The signature lists name@version tags between "|user:" and the next "|", joined by commas.
        raise ConfigError(f"metric {name!r}: give version='…' (printable, without | , @), got {version!r}; "
                          "it enters the signature and the score cache, so change it when the function "
                          "changes")
    return Metric(name, version.strip(), fn, batch, str(description))


USER_PART = "|user:"


def tags_signature(tags: Iterable[str]) -> str:
    """The signature's part for a run's user metrics (their ``name@version`` tags), ``|user:chars3@1,x@2``
    (sorted), or '' when it measured none — so a run without them keeps the signature it always had."""
    ordered = sorted(set(tags))
    return f"{USER_PART}{','.join(ordered)}" if ordered else ""


def split_signature(signature: str) -> tuple[str, dict[str, str]]:
    """A signature's built-in part and its user metrics by name → version."""
    builtin, _, user = signature.partition(USER_PART)
    versions = dict(tag.rpartition("@")[::2] for tag in user.split(",") if "@" in tag)
    return builtin, versions


MIN_WAIT_S = 5.0  # the least the user's code is waited for under a time budget

T = TypeVar("T")


def within_budget(fn: Callable[[], T], deadline: float, late: str) -> T:
    """``fn()`` — the user's metric or check — run on a thread of its own and waited for until ``deadline``
    (``time.monotonic()``), at least :data:`MIN_WAIT_S`: the slices a budget's end cuts short are decided
    on the users they have, after it. Not returned by then: a ConfigError saying ``late``; the thread,
    which Python cannot stop, is left to end on its own. What ``fn`` raises is raised here."""
    outcome: list[tuple[Any, BaseException | None]] = []

    def run() -> None:
        try:
            outcome.append((fn(), None))
        except BaseException as exc:  # raised again on the caller's thread, as without a budget
            outcome.append((None, exc))

    worker = threading.Thread(target=run, daemon=True, name="robustexplain user code")
    worker.start()
    worker.join(max(MIN_WAIT_S, deadline - time.monotonic()))
    if not outcome:
        raise ConfigError(late)
    value, error = outcome[0]
    if error is not None:
        raise error
    return value


class ValueCache(Protocol):
    """Where measured values are kept across runs (``score_cache.MetricValueCache``)."""

    def get(self, metric: Metric, e: str, e_prime: str) -> float | None: ...

    def put(self, metric: Metric, e: str, e_prime: str, value: float) -> bool: ...


class MetricMeasure:
    """Measures user metrics over pairs: from memory, then ``cache``, then the metric itself (one batch
    per call of :meth:`measure` for what neither holds). ``evaluations`` counts the values computed;
    ``budget_s`` (max-minutes), from now, bounds how long the user's function may take."""

    def __init__(self, cache: ValueCache | None = None, *, budget_s: float | None = None) -> None:
        self.cache = cache
        self.evaluations = 0
        self._deadline = None if budget_s is None else time.monotonic() + budget_s
        self._budget_s = budget_s
        self._memo: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()

    def measure(self, pairs: Sequence[PairResult], metrics: Sequence[Metric]) -> list[PairResult]:
        """``pairs`` with each metric's value in ``user_metrics`` (0.0 for a failed pair, as the paper's
        four: nothing was said to compare)."""
        if not metrics or not pairs:
            return list(pairs)
        values = {m.name: self.values(m, [(p.original, p.perturbed) for p in pairs if p.failure is None])
                  for m in metrics}
        out, index = [], 0
        for pair in pairs:
            if pair.failure is None:
                own = {name: found[index] for name, found in values.items()}
                index += 1
            else:
                own = dict.fromkeys(values, 0.0)
            out.append(replace(pair, user_metrics=dict(sorted({**pair.user_metrics, **own}.items()))))
        return out

    def _evaluated(self, metric: Metric, missing: list[tuple[str, str]]) -> list[float]:
        """The user's function on ``missing``, within the run's budget (:func:`within_budget`): a hanging
        metric held the sweep's loop — the budget's own clock included — for as long as it liked."""
        if self._deadline is None or self._budget_s is None:
            return metric.evaluate(missing)
        said = (f"user metric {metric.name!r} gave no values for {len(missing)} pairs within the run's "
                f"max-minutes ({self._budget_s / 60:g} min, and {MIN_WAIT_S:g} s after it): make it faster, "
                "or give the run more time")
        return within_budget(lambda: metric.evaluate(missing), self._deadline, said)

    def values(self, metric: Metric, texts: Sequence[tuple[str, str]]) -> list[float]:
        with self._lock:
            found: dict[tuple[str, str], float] = {}
            missing: list[tuple[str, str]] = []
            for e, e_prime in texts:
                value = self._memo.get((metric.tag, e, e_prime))
                if value is None and self.cache is not None:
                    value = self.cache.get(metric, e, e_prime)
                if value is None:
                    if (e, e_prime) not in found:
                        missing.append((e, e_prime))
                    found[(e, e_prime)] = math.nan
                else:
                    found[(e, e_prime)] = value
            if missing:
                self.evaluations += len(missing)
                for pair, value in zip(missing, self._evaluated(metric, missing), strict=True):
                    found[pair] = value
                    if self.cache is not None:
                        self.cache.put(metric, *pair, value)
            for (e, e_prime), value in found.items():
                self._memo[(metric.tag, e, e_prime)] = value
            return [found[pair] for pair in texts]
