"""The :class:`Settings` record: the resolved run-wide settings, one field per entry of the option table, with
where each value came from (``sources``), and its JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..backends import GenerationOptions, backend_named
from ..results import ALL_METRICS
from ..sanitize import redact_url
from .table import DEFAULT_HOSTS, OPTIONS


def jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Settings:
    """The resolved run-wide settings; one field per entry of :data:`OPTIONS` (same order, ``_`` names).

    Paths are absolute. ``None`` means "use the built-in default" (bundled data, the pytest cache dir,
    the backend's default host, all users, no report). ``sources`` maps each field to where its value
    came from.
    """

    model: tuple[str, ...]
    backend: str
    host: str | None
    api_key_env: str
    histories: Path | None
    catalog: Path | None
    cases: Path | None
    dataset: str | Path
    perturbations: tuple[str, ...]
    severities: tuple[int, ...]
    users: int | None
    max_history: int | None
    perturbation_counts: str
    repeats: int
    seed: int
    temperature: float
    num_predict: int
    num_ctx: int
    concurrency: int
    connect_timeout: float
    timeout: float
    retries: int
    cache: str
    cache_dir: Path | None
    json: Path | None
    html: Path | None
    markdown: Path | None
    history: Path | str | None  # "off": no history; None: <cache-dir>/history.jsonl
    require_model: bool
    dry_run: bool
    min_combined: float
    min_metric: float | Mapping[str, float]
    per_kind: Mapping[str, Mapping[str, Any]]
    weights: tuple[float, ...]
    embed_model: str | None
    design: str
    decision: str
    alpha: float
    inconclusive: str
    max_users: int | None
    max_calls: int | None
    max_minutes: float | None
    price: Mapping[str, tuple[float, float]]  # input/output per million tokens, by model ("*": every one)
    max_cost: float | None
    noise_floor: str
    guard: str
    min_sensitivity: float
    max_insensitive_share: float
    max_identical_share: float
    min_relative: float
    max_copy_rate: float
    max_injection_rate: float
    max_hijack_rate: float
    min_history_reference: float | None
    max_unsupported_rate: float
    judge_model: str | None
    judge_backend: str
    judge_host: str | None
    judge_criteria: Path | None
    judge_labels: Path | None
    min_judge_agreement: float | None
    judge: str
    min_faithful_rate: float | None
    max_misattributed_rate: float | None
    min_flip_sensitivity: float
    check_limits: Mapping[str, float]
    baseline: Path | None
    save_baseline: Path | None
    max_regression: float
    prompt: Path | None
    progress: str
    config: Path | None
    # Where a value came from is not part of what the settings are: two runs configured differently
    # but to the same values compare equal.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @classmethod
    def defaults(cls) -> Settings:
        """Every option at its default (handy for tests and for programmatic use)."""
        return cls(**{spec.field: spec.default for spec in OPTIONS},
                   sources={spec.field: "default" for spec in OPTIONS})

    @property
    def weight_map(self) -> dict[str, float]:
        """The weights by metric name (``embedding`` included when it has a share of ρ)."""
        return dict(zip(ALL_METRICS, self.weights, strict=False))

    @property
    def models_to_test(self) -> tuple[str, ...]:
        """The models to test; the template and callable backends need no model name ("" for a callable)."""
        if self.model:
            return self.model
        if self.backend == "template":
            return ("template",)
        if self.backend == "callable":
            return ("",)
        return ()

    @property
    def judge_models(self) -> tuple[str, ...]:
        """The judge models (``judge_model`` may list several, comma-separated); empty without a judge."""
        return tuple(self.judge_model.split(",")) if self.judge_model else ()

    @property
    def hosts(self) -> tuple[str, ...]:
        """The configured hosts (``host`` may list several, comma-separated); empty when unset."""
        return tuple(self.host.split(",")) if self.host else ()

    @property
    def generation(self) -> GenerationOptions:
        """How the backends ask for each explanation (``retries`` counts retries after the first attempt)."""
        return GenerationOptions(temperature=self.temperature, seed=self.seed, num_predict=self.num_predict,
                                 num_ctx=self.num_ctx, concurrency=self.concurrency,
                                 connect_timeout=self.connect_timeout, read_timeout=self.timeout,
                                 max_attempts=self.retries + 1)

    @property
    def effective_host(self) -> str | None:
        """``host`` or, when unset, the backend's default base URL (None for template/callable)."""
        return self.host or DEFAULT_HOSTS.get(self.backend)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: paths as strings, tuples as lists, plus ``sources``."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "sources"}
        out["sources"] = dict(self.sources)
        for name in ("host", "judge_host"):  # credentials in a host URL never reach a report
            if getattr(self, name) is not None:
                out[name] = ",".join(redact_url(h) for h in getattr(self, name).split(","))
        backend = backend_named(self.backend)
        if backend is not None and "num_ctx" not in backend.takes:
            # Recorded only where it was applied: an OpenAI-compatible server keeps its own context, which
            # the run records with the model (models[].extra.context) as the server states it.
            del out["num_ctx"]
        return out
