"""Each backend fact once: the backends' names, default hosts and factories (:data:`BACKENDS`), and how a
model is asked (:class:`GenerationOptions`: one frozen record from the settings to every backend).

The option table takes its choices and defaults from here, the explainers their defaults and the
``robustexplain`` command its list of backends, so a default changed here changes everywhere (before, a
backend built directly made 4 attempts and one built from the settings 5). Standard library only: the plugin
imports this at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class GenerationOptions:
    """How every explanation of a run is asked for: the defaults of the option table and of the backends.

    ``max_attempts`` counts the first attempt (the ``retries`` option is ``max_attempts - 1``);
    ``read_timeout`` is the ``timeout`` option. A backend uses the fields its :class:`Backend` ``takes``.
    """

    temperature: float = 0.0
    seed: int = 42
    num_predict: int = 256
    num_ctx: int = 4096
    concurrency: int = 4
    connect_timeout: float = 5.0
    read_timeout: float = 120.0
    max_attempts: int = 5


    def with_overrides(self, overrides: Mapping[str, Any], *, who: str) -> GenerationOptions:
        """This record with some fields replaced (the keyword arguments of a backend built by hand);
        a name that is not a field is a TypeError, as an unknown keyword argument is."""
        unknown = sorted(set(overrides) - set(GENERATION_FIELDS))
        if unknown:
            raise TypeError(f"{who} got unexpected keyword argument(s): {', '.join(unknown)}; "
                            f"generation options are {', '.join(GENERATION_FIELDS)}")
        return replace(self, **overrides) if overrides else self


GENERATION_DEFAULTS = GenerationOptions()
GENERATION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GenerationOptions))


@dataclass(frozen=True)
class Backend:
    """One explanation backend.

    ``factory`` is the explainer class as ``module:Class`` inside ``pytest_robustexplain.explainers``
    (imported only when the backend is used); None for ``callable``, whose explainer is the user's fixture.
    ``takes`` names the :class:`GenerationOptions` fields the backend sends or uses; ``host_env`` is the
    environment variable that names its server when ``host`` is unset.
    """

    name: str
    factory: str | None
    default_host: str | None = None
    takes: frozenset[str] = frozenset()
    aliases: tuple[str, ...] = ()
    host_env: str | None = None
    needs_conftest: bool = False  # only pytest can run it (``robustexplain run`` has no conftest)


_REMOTE = frozenset(GENERATION_FIELDS) - {"num_ctx"}
BACKENDS: Mapping[str, Backend] = MappingProxyType({b.name: b for b in (
    Backend("ollama", "ollama:OllamaExplainer", "http://127.0.0.1:11434", _REMOTE | {"num_ctx"},
            host_env="OLLAMA_HOST"),
    # A local OpenAI-compatible server (llama.cpp, vLLM, LM Studio); num_ctx is the server's own setting.
    Backend("openai", "openai_compat:OpenAICompatExplainer", "http://127.0.0.1:8080/v1", _REMOTE,
            aliases=("openai-compatible",)),
    Backend("template", "template:TemplateExplainer"),
    Backend("callable", None, takes=frozenset({"read_timeout"}), needs_conftest=True),
)})
BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)
DEFAULT_HOSTS: Mapping[str, str] = MappingProxyType(
    {b.name: b.default_host for b in BACKENDS.values() if b.default_host is not None})


def backend_named(name: str) -> Backend | None:
    """The backend called ``name`` or one of its aliases (any case, spaces ignored); None if unknown."""
    wanted = name.strip().lower()
    return next((b for b in BACKENDS.values() if wanted == b.name or wanted in b.aliases), None)
