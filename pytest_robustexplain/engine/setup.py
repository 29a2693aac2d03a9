"""What a run is made of, from resolved settings: the dataset, its cases, the explainers behind the
response cache, the cache directory and the donor pool of the cross-user controls."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .. import data
from ..backends import BACKENDS
from ..checks.judge.prompt import read_criteria
from ..data import EvalCase, UserHistory
from ..data.ids import lookalike_note, one_form_each
from ..errors import ConfigError, RobustExplainWarning, warn
from ..explainers import make_explainer
from ..explainers.cache import CachedExplainer, ResponseCache, cache_key
from ..explainers.embedding import with_embeddings
from ..explainers.hosts import HostsExplainer
from ..explainers.judge import Judge
from ..explainers.ollama import resolve_host
from ..explainers.prompt import PromptTemplate
from ..perturbations.donors import DonorPool
from ..score_cache import CachedScorer, MetricValueCache, ScoreCache
from ..settings import DEFAULT_HOSTS, Spelling

if TYPE_CHECKING:
    from ..data import Dataset, EvalCase
    from ..explainers.base import Explainer
    from ..explainers.judge import Judge
    from ..perturbations.donors import DonorPool
    from ..score_cache import CachedScorer
    from ..settings import Settings
    from ..store import Store
    from .plan import Call


DEFAULT_CACHE_DIR = ".robustexplain-cache"  # one response cache for `pytest` and `robustexplain run`


def cache_directory(settings: Settings, base: Path | None = None) -> Path:
    """``cache_dir`` when set, else ``<base>/.robustexplain-cache`` (``base``: the pytest rootdir, or the
    directory ``robustexplain run`` is started in)."""
    return settings.cache_dir or Path(os.path.abspath(base or Path.cwd())) / DEFAULT_CACHE_DIR


def load_configured_dataset(settings: Settings) -> Dataset:
    """The dataset the settings name: data files, a dataset directory (MovieLens-style or our own
    histories/catalog/cases files), or the bundled synthetic set.

    Every user's history is loaded (donors for the cross-user controls come from all of them). Cases that
    are drawn rather than listed in a cases file come in a seeded order, so the first ``users`` of them
    (20 by default) are a seeded sample; a cases file keeps its own order, and so does the bundled set
    (its 20 cases are listed: the seed changes its perturbations, not which users are asked).
    """
    if settings.histories is not None:
        if settings.catalog is None:
            raise ConfigError(f"{settings.sources.get('histories', 'histories')}: a histories file needs a "
                              "catalog file too (--robustexplain-catalog)")
        hist_columns, cat_columns = data.csv_column_maps(
            settings.columns, settings.catalog_columns, settings.histories, settings.catalog,
            flags=(settings.sources.get("columns", "columns"), settings.sources.get("catalog_columns",
                                                                                     "catalog-columns")))
        catalog = data.load_catalog(settings.catalog, columns=cat_columns)  # first: load_dataset's order
        histories = data.load_histories(settings.histories, columns=hist_columns)
        loaded = data.load_dataset(histories, catalog, settings.cases, seed=settings.seed)
        if settings.cases is None:
            loaded = seeded_cases(loaded, settings.seed)
    elif isinstance(settings.dataset, Path):
        if (settings.dataset / "ratings.csv").is_file():
            movielens = data.load_movielens(settings.dataset, seed=settings.seed,
                                            max_history=settings.max_history)
            return seeded_cases(movielens, settings.seed)
        loaded = data.load_dataset_dir(settings.dataset, seed=settings.seed)
    else:
        loaded = data.default_dataset()
    _flag_lookalike_ids(loaded)
    return recent_only(loaded, settings.max_history)


def _flag_lookalike_ids(dataset: Dataset) -> None:
    """A warning naming the user and item ids whose letters mix scripts that look alike (homoglyphs): they
    load — an id such as "user_Ω" is legitimate — but two of them may read as one in every report; two ids
    that are one text in two Unicode forms are refused."""
    for ids, what in ((dataset.histories, "user"), (dataset.catalog, "item")):
        one_form_each(ids, what, dataset.name)
        note = lookalike_note(ids, what)
        if note:
            warn(RobustExplainWarning(f"{dataset.name}: {note}"))


def recent_only(dataset: Dataset, max_history: int | None) -> Dataset:
    """Every history cut to its ``max_history`` most recent interactions (what the model is shown)."""
    if max_history is None or all(len(h) <= max_history for h in dataset.histories.values()):
        return dataset
    def cut(history: UserHistory) -> UserHistory:
        return UserHistory(history.user_id, history.interactions[-max_history:])

    histories = {uid: cut(h) for uid, h in dataset.histories.items()}
    cases = tuple(EvalCase(histories.get(c.user_id) or cut(c.history), c.item) for c in dataset.cases)
    return replace(dataset, histories=MappingProxyType(histories), cases=cases)


def take_cases(cases: Sequence[EvalCase], users: int | None) -> tuple[tuple[EvalCase, ...], str | None]:
    """The first ``users`` cases, and a note when the dataset has fewer than asked for."""
    if users is None or users <= len(cases):
        return tuple(cases[:users] if users else cases), None
    return tuple(cases), (f"users={users} asked for, but the dataset has {len(cases)} evaluation cases: "
                          f"running {len(cases)}")


def seeded_cases(dataset: Dataset, seed: int) -> Dataset:
    """The dataset with its cases in a seeded order that does not depend on the file's order."""
    def key(case: EvalCase) -> bytes:
        return hashlib.sha256(f"cases\x1f{seed}\x1f{case.user_id}\x1f{case.item_id}".encode()).digest()

    return replace(dataset, cases=tuple(sorted(dataset.cases, key=key)))


def backend_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of the configured backend, from the settings."""
    s = settings
    if s.backend == "template":
        return {}
    options: dict[str, Any] = {"host": s.host, "options": s.generation}
    if s.backend == "openai":
        options["api_key"] = os.environ.get(s.api_key_env) or None
    if s.prompt is not None:

        options["prompt"] = PromptTemplate.from_file(s.prompt)
    return options


def build_explainer(settings: Settings, model: str, *, cache_dir: Path, custom: Explainer | None = None,
                    cross_process: bool = False, kept: Store | None = None) -> Explainer:
    """The explainer for ``model`` (``custom`` when a hook supplied one), behind the response cache, spread
    over the hosts when several are configured, and adding embeddings when an embedding model is set.

    The template explainer is never cached: it is instant, so caching it would only cost disk.
    """
    explainer = custom if custom is not None else _backend_explainer(settings, model)
    if settings.cache != "off" and explainer.backend != "template":
        cache = ResponseCache(cache_dir, settings.cache, store=kept)
        cache.check_writable()  # before a single model call is spent
        explainer = CachedExplainer(explainer, cache, cross_process=cross_process)
    if settings.embed_model is None:
        return explainer
    return _with_embeddings(settings, explainer, cache_dir, settings.embed_model, kept)


# The judge reasons before its verdict (preferences, reasons, then the JSON): at least this many tokens.
JUDGE_NUM_PREDICT = 512


def judge_backend(settings: Settings) -> str:
    """The judge's backend: ``judge-backend``, or ('auto') the run's when it is a model server's, else
    ollama (a template or callable run still needs a language model to judge it)."""
    if settings.judge_backend != "auto":
        return settings.judge_backend
    return settings.backend if BACKENDS[settings.backend].default_host else "ollama"


def build_judge(settings: Settings, *, cache_dir: Path, cross_process: bool = False, model: str | None = None,
                kept: Store | None = None) -> Judge | None:
    """The faithfulness judge (None without ``judge-model``): its model on its backend and host, asked at
    temperature 0 with room to reason, behind the response cache like the explanations."""
    if settings.judge_model is None:
        return None
    backend = judge_backend(settings)
    host = settings.judge_host or (settings.hosts[0] if backend == settings.backend and settings.hosts
                                   else None)
    options: dict[str, Any] = {"host": host, "options": replace(
        settings.generation, temperature=0.0, num_predict=max(settings.num_predict, JUDGE_NUM_PREDICT))}
    if backend == "openai":
        options["api_key"] = os.environ.get(settings.api_key_env) or None
    explainer: Any = make_explainer(backend, model or settings.judge_models[0], **options)
    if settings.cache != "off":
        cache = ResponseCache(cache_dir, settings.cache, store=kept)
        cache.check_writable()
        explainer = CachedExplainer(explainer, cache, cross_process=cross_process)
    criteria = read_criteria(settings.judge_criteria) if settings.judge_criteria is not None else ""
    return Judge(explainer, seed=settings.seed, criteria=criteria)


def build_scorer(settings: Settings, *, cache_dir: Path | None = None, kept: Store | None = None
                 ) -> CachedScorer:
    """The run's scorer, with the run's weights: behind the score cache in ``cache_dir`` (the
    response cache's directory and mode) when the response cache is on, so a rerun on cached explanations
    never builds the metrics' Scorer (nltk, TextBlob, sacrebleu). Like the response cache, none for the
    template backend (its runs are throwaway) or with ``cache=off``; the Scorer is then built on the first
    pair, not here. The user's own metrics' values are cached beside the four's, in the same mode."""
    cache = user_cache = None
    if cache_dir is not None and settings.cache != "off" and settings.backend != "template":
        cache = ScoreCache(cache_dir, settings.cache, store=kept)
        user_cache = MetricValueCache(cache_dir, settings.cache, store=kept)
    budget = None if settings.max_minutes is None else 60 * settings.max_minutes
    return CachedScorer(weights=settings.weights, cache=cache, user_cache=user_cache, budget_s=budget)


def cached_count(settings: Settings, model: str, cache_dir: Path, calls: Iterable[Call]) -> int | None:
    """How many of ``calls`` the response cache would answer — each call's cache key built as the run
    builds it, at the model facts the cache recorded when it last ran the model — without a model call or
    a connection; None when the cache cannot tell (off, write-only, the template explainer, never run)."""
    if settings.cache in ("off", "write") or settings.backend in ("template", "callable"):
        return None
    cache = ResponseCache(cache_dir, "read")
    explainer = _backend_explainer(settings, model)
    try:
        info = cache.get_model_info(explainer.backend, model)
        adopt = getattr(explainer, "use_model_info", None)
        if info is None or adopt is None:
            return None
        adopt(info)  # the digest and resolved name the keys carry (a re-pulled model will miss)
        return sum(cache.has(cache_key(explainer.request_identity(h, i, seed=s, repeat=r)))
                   for h, i, s, r in calls)
    finally:
        cache.store.close()
        asyncio.run(explainer.aclose())


def _backend_explainer(settings: Settings, model: str) -> Explainer:
    """The backend's explainer; one per host behind a :class:`HostsExplainer` when there are several."""
    options = backend_options(settings)
    if len(settings.hosts) < 2 or settings.backend == "template":
        return make_explainer(settings.backend, model, **options)

    per_host = [make_explainer(settings.backend, model, **{**options, "host": h}) for h in settings.hosts]
    return HostsExplainer(per_host, settings.hosts)


def _with_embeddings(settings: Settings, explainer: Explainer, cache_dir: Path,
                     embed_model: str, kept: Store | None) -> Explainer:
    """The opt-in fifth metric: explanations carry vectors from the embedding model on the first host."""
    api = "openai" if settings.backend == "openai" else "ollama"
    host = settings.hosts[0] if settings.hosts else (DEFAULT_HOSTS["openai"] if api == "openai"
                                                     else resolve_host(None))
    return with_embeddings(explainer, embed_model, host=host, api=api, cache_dir=cache_dir,
                           cache_mode=settings.cache, store=kept,
                           api_key=os.environ.get(settings.api_key_env) or None,
                           timeout=settings.timeout, connect_timeout=settings.connect_timeout,
                           max_attempts=settings.retries + 1, seed=settings.seed)


def context_note(model: str, n_cases: int, tokens: int, source: str, over: list[tuple[str, int]],
                 counted: bool, *, max_history: int | None, spelling: Spelling) -> str:
    """What to say before the calls when users' prompts may not fit the model's context."""
    how = "counted by the server's tokenizer" if counted else "estimated at 3 characters a token"
    over = sorted(over, key=lambda found: -found[1])
    shown = ", ".join(f"{user} (≈ {n:,})" for user, n in over[:5])
    more = f" and {len(over) - 5} more" if len(over) > 5 else ""
    flag = spelling.flag
    return (f"{model}: {len(over)} of {n_cases} users' prompts may not fit the model's context of "
            f"{tokens:,} tokens ({source}): {shown}{more} tokens ({how}); "
            "perturbations that add interactions lengthen more. Gates with such pairs are not measured "
            f"(INCONCLUSIVE): lower {flag('max-history')} (now {max_history}) or raise "
            f"the context ({flag('num-ctx')} for Ollama, the server's context size otherwise).")


def donor_pool(dataset: Dataset) -> DonorPool:
    """Every user of the dataset as a potential donor for the cross-user controls."""
    return DonorPool(dataset.histories, dataset.catalog)


def configured_models(settings: Settings) -> tuple[str, ...]:
    """The models to test (:attr:`Settings.models_to_test`)."""
    return settings.models_to_test


def no_model_reason(spelling: Spelling, env: str = "ROBUSTEXPLAIN_MODEL") -> str:
    """Why nothing can run without a model, and the ways to name one."""
    return (f"no model configured for robustness tests: pass {spelling.flag('model')}=NAME (e.g. "
            f"llama3.1:8b served by Ollama), set {env}, or use {spelling.flag('backend')}=template for the "
            "built-in non-LLM explainer")


def without_model(settings: Settings, spelling: Spelling) -> tuple[str, bool]:
    """A test that needs the configured model, when none is: why, and whether that is an error (the
    ``require-model`` setting) rather than a skip."""
    reason = no_model_reason(spelling)
    if settings.require_model:
        return (f"{reason} ({spelling.flag('require-model')} is set, so robustness tests may not be "
                "skipped)"), True
    return reason, False


def check_callable(settings: Settings, without_explainer: Sequence[str],
                   spelling: Spelling) -> None:
    """The ``callable`` backend is the user's ``explainer`` fixture: tests without one cannot run
    (one ConfigError before anything runs, naming the first)."""
    if BACKENDS[settings.backend].needs_conftest and without_explainer:
        raise ConfigError(f"{spelling.flag('backend')}={settings.backend} needs the `explainer` fixture "
                          f"overridden in a conftest.py; {len(without_explainer)} marked item(s) have none, "
                          f"e.g. {without_explainer[0]}")
