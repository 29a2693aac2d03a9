"""The method as a Python library: perturb a history, score two explanations — on plain data.

What the method's own examples write, with this package's name::

    from pytest_robustexplain import apply_perturbation, compute_semantic_sim, score_pair

    history = [{"item_id": "B1", "category": "Books", "rating": 5, "timestamp": 1700000000}, ...]
    noisy = apply_perturbation(history, "noise_injection", severity=3, catalog=catalog)  # list of dicts
    compute_semantic_sim(explain(history, item), explain(noisy, item))

Every function also takes the package's records (:class:`~pytest_robustexplain.data.UserHistory`,
:class:`~pytest_robustexplain.data.Catalog`), and then returns records: plain data in, plain data out.
Imported lazily from the package face (``pytest_robustexplain.__getattr__``), so the plugin stays cheap.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .checks import Check, register_check, register_metric
from .data import (
    Catalog,
    Interaction,
    Item,
    UserHistory,
    catalog_from,
    default_dataset,
    history_from,
    is_frame,
    item_from,
)
from .data.evalset import eval_fixture, eval_fixture_from, read_eval_fixture
from .data.io import Where
from .errors import BackendError, ConfigError, WarningQueue
from .metrics import (
    PairScores,
    compute_keyword_stability,
    compute_length_stability,
    compute_semantic_sim,
    compute_structural_consistency,
    score_pair,
)
from .options import suggest
from .perturbations import PerturbationResult, available_kinds, counted
from .perturbations import apply_perturbation as _apply
from .results import COUNTS_PROPORTIONAL, PERTURBATION_COUNTS
from .settings import OPTIONS, Spelling, settings_from_project

if TYPE_CHECKING:
    from .explainers.base import Explainer
    from .settings import Settings
    from .sweep.loop import LoopThread

__all__ = [
    "Check",
    "PairScores",
    "PerturbationResult",
    "apply_perturbation",
    "available_kinds",
    "behavior_dilution",
    "catalog_from",
    "category_drift",
    "compute_keyword_stability",
    "compute_length_stability",
    "compute_semantic_sim",
    "compute_structural_consistency",
    "explanation_model",
    "generate_explanation",
    "history_from",
    "item_from",
    "load_test_fixture",
    "missing_values",
    "noise_injection",
    "register_check",
    "register_metric",
    "score_pair",
    "temporal_shuffle",
]


def _catalog_of(history: UserHistory) -> Catalog:
    """The items a history mentions, when no catalog is given (noise and drift then draw from them)."""
    seen: dict[str, Item] = {}
    for i in history:
        seen.setdefault(i.item_id, Item(i.item_id, i.title, i.category, i.features))
    return Catalog(seen.values())


def apply_perturbation(history: UserHistory | Iterable[Any], kind: str, severity: int = 3, *,
                       catalog: Catalog | Mapping[str, Any] | Iterable[Any] | None = None, seed: int = 42,
                       item_id: str = "", repeat: int = 0, user_id: str = "user",
                       counts: str = COUNTS_PROPORTIONAL) -> PerturbationResult | list[dict[str, Any]]:
    """Perturb a history with ``kind`` (``noise_injection``, ``temporal_shuffle``, ``behavior_dilution``,
    ``category_drift``, ``missing_values`` or an alias such as ``noise``) at ``severity`` 1–5.

    Plain data (a list of interaction dicts) in: the perturbed history as a list of dicts out; a pandas
    DataFrame in (one user's interactions, a column per field, other columns features): a DataFrame of the
    same class out, features as columns again. A :class:`UserHistory` in: the full
    :class:`PerturbationResult` (``perturbed``, ``changes``, …). Without
    ``catalog`` the kinds that insert items draw from the history's own items. ``counts="paper"``: noise and
    dilution insert exactly ``severity`` items, as the paper writes it (default: ``round(0.1·s·n)``).
    Deterministic in (seed, user, item_id, kind, severity, repeat).
    """
    plain = not isinstance(history, UserHistory)
    record = history_from(history, user_id)
    catalog = getattr(history, "catalog", None) if catalog is None else catalog  # a fixture's History
    items = _catalog_of(record) if catalog is None else catalog_from(catalog)
    if counts not in PERTURBATION_COUNTS:
        raise ConfigError(f"counts must be one of {', '.join(PERTURBATION_COUNTS)}, got {counts!r}")
    result = _apply(record, kind, severity, catalog=items, seed=seed, item_id=item_id, repeat=repeat,
                    kinds=counted(None, counts))
    if is_frame(history):
        return _frame_like(history, record.user_id, result.perturbed.interactions)
    if plain:
        return History((_plain(i) for i in result.perturbed), catalog=catalog)
    return result


def _plain(interaction: Interaction) -> dict[str, Any]:
    return interaction.to_dict()


def _frame_like(frame: Any, user_id: str, interactions: Iterable[Interaction]) -> Any:
    """A DataFrame of ``frame``'s class with the interactions, features as columns again (and the user's
    id in a ``user_id`` column when ``frame`` had one)."""
    who = {"user_id": user_id} if "user_id" in [str(c) for c in frame.columns] else {}
    rows = [{**who, **{k: v for k, v in _plain(i).items() if k != "features"}, **dict(i.features)}
            for i in interactions]
    return type(frame)(rows)


def plain_data_explainer(fn: Callable[[list[dict[str, Any]], dict[str, Any]], Any]
                         ) -> Callable[[UserHistory, Item], Any]:
    """An explainer for the plugin from one written for plain data: ``fn(history, item)`` gets the history
    as a list of interaction dicts (:meth:`UserHistory.to_dicts`) and the item as a dict
    (:meth:`Item.to_dict`), as in the Python API's examples. Return it from an ``explainer`` fixture::

        @pytest.fixture
        def explainer():
            return plain_data_explainer(my_explainer)
    """
    def explain(history: UserHistory, item: Item) -> Any:
        return fn(history.to_dicts(), item.to_dict())

    explain.__qualname__ = f"plain_data_explainer({getattr(fn, '__qualname__', repr(fn))})"
    explain.__module__ = getattr(fn, "__module__", __name__)  # the cache key names the user's function
    return explain


# ------------------------------------------------------------------------------------- the guide's CI example
class History(list[dict[str, Any]]):
    """A history as plain data — a list of interaction dicts, oldest first — that remembers the catalog it
    came with: :func:`apply_perturbation` (and the five kind functions) draw the items they insert from it
    when no ``catalog`` is given, and a perturbed history remembers it too."""

    def __init__(self, interactions: Iterable[dict[str, Any]] = (), *,
                 catalog: Catalog | Mapping[str, Any] | Iterable[Any] | None = None) -> None:
        super().__init__(interactions)
        self.catalog = catalog


class EvalUser(NamedTuple):
    """A user of an evaluation fixture: ``user.history`` is what :func:`apply_perturbation` and
    :func:`generate_explanation` take."""

    user_id: str
    history: History


DEFAULT_FIXTURE = "fixtures/robustness_eval.json"  # the guide's fixture, from a checkout's root


def load_test_fixture(path: str | os.PathLike[str] | None = None) -> list[tuple[EvalUser, dict[str, Any]]]:
    """The ``(user, item)`` pairs of an evaluation fixture (format ``robustexplain-eval/1``: users, each with
    a history and recommended items, and the catalog), one pair per recommended item. ``user.history`` is a
    :class:`History` (plain dicts, knowing the fixture's catalog); ``item`` a dict.

    Without ``path``: the guide's fixture, ``fixtures/robustness_eval.json`` where it is (a checkout's root),
    else the same fixture made from the bundled synthetic dataset it was written from — so the guide's
    examples run from any directory of an installed package. A path given that is not there is an error
    that says so."""
    if path is None and not Path(DEFAULT_FIXTURE).is_file():
        bundled = eval_fixture(default_dataset())
        catalog, users = eval_fixture_from(bundled, Where("the bundled evaluation fixture"))
    else:
        catalog, users = read_eval_fixture(DEFAULT_FIXTURE if path is None else path)
    pairs = []
    for history, items in users:
        user = EvalUser(history.user_id, History(history.to_dicts(), catalog=catalog))
        pairs += [(user, item.to_dict()) for item in items]
    return pairs


def _kind_function(kind: str, what: str) -> Callable[..., Any]:
    def perturb(history: UserHistory | Iterable[Any], severity: int = 3, *,
                catalog: Catalog | Mapping[str, Any] | Iterable[Any] | None = None,
                seed: int | None = None, counts: str = COUNTS_PROPORTIONAL
                ) -> PerturbationResult | list[dict[str, Any]]:
        return apply_perturbation(history, kind, severity, catalog=catalog, seed=42 if seed is None else seed,
                                  counts=counts)

    perturb.__name__ = perturb.__qualname__ = kind
    perturb.__doc__ = (f"{what} (``apply_perturbation(history, {kind!r}, severity)``): severity 1–5; plain "
                       "data in, plain data out; ``seed`` defaults to apply_perturbation's.")
    return perturb


noise_injection = _kind_function("noise_injection", "Insert random catalog items at random positions")
temporal_shuffle = _kind_function("temporal_shuffle", "Permute the items among a fraction s/5 of positions")
behavior_dilution = _kind_function("behavior_dilution", "Insert items of the user's least-engaged categories")
category_drift = _kind_function("category_drift", "Replace the latest items with rarely-engaged categories'")
missing_values = _kind_function("missing_values", "Blank a fraction 0.1·s of the rating, timestamp, category")


def generate_explanation(history: UserHistory | Iterable[Any], item: Item | Mapping[str, Any], *,
                         model: str | None = None, host: str | None = None, backend: str | None = None,
                         seed: int | None = None, **settings: Any) -> str:
    """Ask the configured model once why ``item`` fits the user of ``history`` (plain data or records) and
    return the explanation's text — the call a run makes, with its retries, response cache and settings.

    ``model``, ``host``, ``backend`` and any other setting by its field name (``temperature=0.0``,
    ``timeout=60``…) override what the environment (``ROBUSTEXPLAIN_MODEL``, ``ROBUSTEXPLAIN_HOST``…),
    ``robustexplain.yaml`` and pytest's ini file say, as for ``robustexplain run`` started here. The
    explainer is built and preflighted once per distinct settings and kept for the process (closed at exit,
    or by :func:`close_explainers`). Without a model it is a ConfigError saying how to name one; a failed
    generation is a BackendError.
    """
    given = {"model": model, "host": host, "backend": backend, **settings}
    session = _session({name: value for name, value in given.items() if value is not None})
    return session.explain(history_from(history), item_from(item), seed)


def explanation_model(**settings: Any) -> str | None:
    """The model :func:`generate_explanation` would call with these keywords (and the environment, the YAML
    and ini files), or None when none is configured — to skip rather than fail where there is none."""
    models = _settings({name: value for name, value in settings.items() if value is not None}).models_to_test
    return models[0] if models else None


def close_explainers() -> None:
    """Close every explainer :func:`generate_explanation` kept (their connections and event loop)."""
    with _SESSIONS_LOCK:
        sessions = list(_SESSIONS.values())
        _SESSIONS.clear()
    for session in sessions:
        session.close()


class _Session:
    """One model's explainer behind the response cache, on its own event loop thread."""

    def __init__(self, settings: Settings, model: str) -> None:
        from .engine import build_explainer, cache_directory  # lazy: loads numpy, sqlite3
        from .sweep.loop import LoopThread  # lazy: loads sqlite3

        self.settings, self.model = settings, model
        self.warnings = WarningQueue()
        self.explainer: Explainer = build_explainer(settings, model, cache_dir=cache_directory(settings),
                                                    cross_process=True)
        self.loop: LoopThread = LoopThread(self.warnings, name="robustexplain-generate")
        self.loop.start(lambda loop: None, self.explainer.aclose)
        try:
            self.loop.run(self.explainer.preflight())  # a dead server or a missing model fails here, once
        except BaseException:
            self.close()
            raise
        finally:
            self.warnings.flush()

    def explain(self, history: UserHistory, item: Item, seed: int | None) -> str:
        try:
            explanation = self.loop.run(self.explainer.explain(
                history, item, seed=self.settings.seed if seed is None else seed, repeat=0))
        finally:
            self.warnings.flush()
        if explanation.failure is not None:
            raise BackendError(f"{self.model}: generation failed ({explanation.failure}) "
                               f"{explanation.detail}".strip())
        return explanation.text

    def close(self) -> None:
        self.loop.close()


# Resolved settings -> its explainer: one preflight a model, not one a call. A cache of connections (as an
# HTTP library's default session), not run state: each run still builds its own explainers.
_SESSIONS: dict[str, _Session] = {}
_SESSIONS_LOCK = threading.Lock()
atexit.register(close_explainers)


def _session(given: Mapping[str, Any]) -> _Session:
    settings = _settings(given)
    models = settings.models_to_test
    if not models:
        from .engine import no_model_reason  # lazy: loads numpy, sqlite3
        raise ConfigError(f"generate_explanation: {no_model_reason(Spelling(prefix=''))}")
    if len(models) > 1:
        raise ConfigError(f"generate_explanation asks one model; {', '.join(models)} are configured "
                          f"({settings.sources.get('model', 'model')}): pass model=NAME")
    key = repr(replace(settings, sources={}))
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            session = _SESSIONS[key] = _Session(settings, models[0])
    return session


def _settings(given: Mapping[str, Any]) -> Settings:
    """The settings a run started here would use, with ``given`` (field names) over every other layer."""
    by_field = {spec.field: spec for spec in OPTIONS}
    unknown = [name for name in given if name not in by_field]
    if unknown:
        near = suggest(unknown[0], by_field)
        raise ConfigError(f"generate_explanation: unknown setting {unknown[0]!r}{near}")
    cli = {by_field[name].dest: _as_text(value) for name, value in given.items()}
    return settings_from_project(cli=cli, env=os.environ, invocation_dir=Path(os.path.abspath(Path.cwd())))


def _as_text(value: Any) -> str:
    """A keyword's value as the option table reads a flag's."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
