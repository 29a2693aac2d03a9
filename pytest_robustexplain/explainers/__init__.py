"""Explainers: the backends that turn (history, item) into an explanation.

Import-light on purpose: the backends (and the ``ollama`` / ``httpx`` clients they use) are imported
inside :func:`make_explainer`, only for the backend actually chosen.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import Explainer, Explanation, ModelInfo

BACKEND_NAMES: tuple[str, ...] = ("ollama", "openai", "openai-compatible", "template")

__all__ = ["BACKEND_NAMES", "Explainer", "Explanation", "ModelInfo", "make_explainer"]


def make_explainer(backend: str, model: str, **options: Any) -> Explainer:
    """Build the explainer for ``backend``.

    ``options`` are the backend's keyword arguments (see OllamaExplainer / OpenAICompatExplainer);
    for the OpenAI-compatible backend ``host`` is accepted as an alias of ``base_url`` and
    ``num_predict`` of ``max_tokens``. The template backend takes no options and ignores ``model``.
    Unknown options raise a ConfigError naming them.
    """
    name = backend.strip().lower()
    if name == "ollama":
        from .ollama import OllamaExplainer

        return _build(OllamaExplainer, name, model, options)
    if name in ("openai", "openai-compatible"):
        from .openai_compat import OpenAICompatExplainer

        options = dict(options)
        if "host" in options:
            host = options.pop("host")
            if host is not None:
                options["base_url"] = host
        if "num_predict" in options:
            options["max_tokens"] = options.pop("num_predict")
        return _build(OpenAICompatExplainer, name, model, options)
    if name == "template":
        from .template import TemplateExplainer

        return TemplateExplainer()
    raise ConfigError(f"unknown explainer backend {backend!r}; valid backends: {', '.join(BACKEND_NAMES)}")


def _build(cls: Any, backend: str, model: str, options: dict[str, Any]) -> Explainer:
    import inspect

    accepted = set(inspect.signature(cls).parameters) - {"model"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(f"unknown option(s) for the {backend} backend: {', '.join(unknown)}; "
                          f"accepted: {', '.join(sorted(accepted))}")
    explainer: Explainer = cls(model, **options)
    return explainer
