"""Pieces of a robustness run that do not depend on pytest, shared by the plugin and the CLI.

From resolved :class:`~pytest_robustexplain.settings.Settings`: the dataset, the explainers (with the
response cache), and the metric signature's inputs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .data import Dataset
    from .explainers.base import Explainer
    from .settings import Settings


def load_configured_dataset(settings: Settings) -> Dataset:
    """The dataset the settings name: data files, a dataset directory (MovieLens-style or our own
    histories/catalog/cases files), or the bundled synthetic set."""
    from . import data

    if settings.histories is not None:
        if settings.catalog is None:
            raise ConfigError(f"{settings.sources.get('histories', 'histories')}: a histories file needs a "
                              "catalog file too (--robustexplain-catalog)")
        return data.load_dataset(settings.histories, settings.catalog, settings.cases, seed=settings.seed)
    if isinstance(settings.dataset, Path):
        if (settings.dataset / "ratings.csv").is_file():
            return data.load_movielens(settings.dataset, max_users=settings.users, seed=settings.seed)
        return data.load_dataset_dir(settings.dataset, seed=settings.seed)
    return data.default_dataset()


def backend_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of the configured backend, from the settings."""
    s = settings
    if s.backend == "template":
        return {}
    options: dict[str, Any] = dict(
        host=s.host, temperature=s.temperature, seed=s.seed, num_predict=s.num_predict,
        concurrency=s.concurrency, connect_timeout=s.connect_timeout, read_timeout=s.timeout,
        max_attempts=s.retries + 1)  # --robustexplain-retries counts retries after the first attempt
    if s.backend == "ollama":
        options["num_ctx"] = s.num_ctx
    else:
        options["api_key"] = os.environ.get(s.api_key_env) or None
    if s.prompt is not None:
        from .explainers.prompt import PromptTemplate

        options["prompt"] = PromptTemplate.from_file(s.prompt)
    return options


def build_explainer(settings: Settings, model: str, *, cache_dir: Path, custom: Explainer | None = None,
                    cross_process: bool = False) -> Explainer:
    """The explainer for ``model`` (``custom`` when a hook supplied one), behind the response cache.

    The template explainer is never cached: it is instant, so caching it would only cost disk.
    """
    from .explainers import make_explainer
    from .explainers.cache import CachedExplainer, ResponseCache

    explainer = custom if custom is not None else make_explainer(settings.backend, model,
                                                                 **backend_options(settings))
    if settings.cache == "off" or explainer.backend == "template":
        return explainer
    return CachedExplainer(explainer, ResponseCache(cache_dir, settings.cache), cross_process=cross_process)
