"""Explainers: the backends that turn (history, item) into an explanation.

Import-light on purpose: the backends (and the ``ollama`` / ``httpx`` clients they use) are imported
inside :func:`make_explainer`, only for the backend actually chosen.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ..backends import BACKEND_NAMES, BACKENDS, GENERATION_FIELDS, backend_named
from ..errors import ConfigError
from .base import Explainer, Explanation, ModelInfo

__all__ = ["BACKEND_NAMES", "Explainer", "Explanation", "ModelInfo", "make_explainer"]


def make_explainer(backend: str, model: str, **options: Any) -> Explainer:
    """Build the explainer for ``backend``, a name or alias of the registry (``backends.BACKENDS``).

    ``options`` are the backend's keyword arguments (see OllamaExplainer / OpenAICompatExplainer): ``host``,
    ``options`` (a :class:`~pytest_robustexplain.backends.GenerationOptions`), ``prompt``, and any
    generation field by name; for the OpenAI-compatible backend ``host`` is accepted as an alias of
    ``base_url``. The template backend takes no options and ignores ``model``. Unknown options raise a
    ConfigError naming them.
    """
    spec = backend_named(backend)
    if spec is None or spec.factory is None:
        usable = ", ".join(b.name + "".join(f" ({a})" for a in b.aliases)
                           for b in BACKENDS.values() if b.factory)
        raise ConfigError(f"unknown explainer backend {backend!r}; valid backends: {usable}")
    module, _, name = spec.factory.partition(":")
    cls = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    if spec.name == "template":
        return cls()
    if spec.name == "openai" and "host" in options:
        options = dict(options)
        host = options.pop("host")
        if host is not None:
            options["base_url"] = host
    return _build(cls, spec.name, model, options)


def _build(cls: Any, backend: str, model: str, options: dict[str, Any]) -> Explainer:
    parameters = inspect.signature(cls).parameters
    accepted = {n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY} | set(GENERATION_FIELDS)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(f"unknown option(s) for the {backend} backend: {', '.join(unknown)}; "
                          f"accepted: {', '.join(sorted(accepted))}")
    explainer: Explainer = cls(model, **options)
    return explainer
