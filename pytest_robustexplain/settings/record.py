"""The :class:`Settings` record: the resolved run-wide settings, one field per entry of the option table (the
checks' own settings in one mapping, read as attributes all the same), with where each value came from
(``sources``), and its JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from ..backends import GenerationOptions, backend_named
from ..results import ALL_METRICS
from ..sanitize import redact_url
from .table import CHECK_OPTIONS, DEFAULT_HOSTS, OPTIONS


def jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


class Declared:
    """The settings the checks declare (``Check.options``) kept in one mapping, ``declared``, beside a
    record's own fields — so that a check's new setting needs no field here — and read, compared,
    constructed and replaced (``dataclasses.replace``) by name like the fields themselves:
    ``settings.max_copy_rate``. A record lists which declared settings it holds in ``DECLARED``."""

    DECLARED: ClassVar[tuple[str, ...]] = ()
    declared: Mapping[str, Any]

    def __init__(self, **values: Any) -> None:
        own = {f.name: f for f in fields(self)}  # type: ignore[arg-type]  # a dataclass's subclass
        given = {**values.pop("declared", {}), **{k: values.pop(k) for k in list(values) if k not in own}}
        wrong = sorted(set(given) ^ set(self.DECLARED))
        if wrong:
            said = "misses" if wrong[0] in self.DECLARED else "takes no"
            raise TypeError(f"{type(self).__name__}() {said} setting {wrong[0]!r}")
        values["declared"] = MappingProxyType({name: given[name] for name in self.DECLARED})
        for name, spec in own.items():
            if name in values:
                object.__setattr__(self, name, values.pop(name))
            elif spec.default_factory is not MISSING:
                object.__setattr__(self, name, spec.default_factory())
            elif spec.default is not MISSING:
                object.__setattr__(self, name, spec.default)
            else:
                raise TypeError(f"{type(self).__name__}() misses setting {name!r}")
        self.__post_init__()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __getattr__(self, name: str) -> Any:
        declared = self.__dict__.get("declared", {})  # empty while an instance is being unpickled
        if name in declared:
            return declared[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def by_name(self) -> dict[str, Any]:
        """Every setting by name, the record's own fields then the declared ones (``sources`` left out)."""
        own = {f.name: getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
               if f.name not in ("declared", "sources")}
        return {**own, **self.declared}


@dataclass(frozen=True, init=False)
class Settings(Declared):
    """The resolved run-wide settings; one field per entry of :data:`OPTIONS` (same order, ``_`` names), the
    checks' own settings (``CHECK_OPTIONS``) in ``declared`` and read as attributes all the same.

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
    columns: Mapping[str, str]  # CSV column names of the histories and catalog files, by field
    catalog_columns: Mapping[str, str]  # the catalog's only, over ``columns``
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
    batch: bool
    shard: str | None  # "i/N": this run measures the i-th of N shards of its users
    noise_floor: str
    guard: str
    judge_model: str | None
    judge_backend: str
    judge_host: str | None
    judge_criteria: Path | None
    judge_labels: Path | None
    judge: str
    check_limits: Mapping[str, float]
    baseline: Path | None
    save_baseline: Path | None
    max_regression: float
    prompt: Path | None
    progress: str
    config: Path | None
    declared: Mapping[str, Any] = field(default_factory=dict)
    # Where a value came from is not part of what the settings are: two runs configured differently
    # but to the same values compare equal.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    DECLARED: ClassVar[tuple[str, ...]] = tuple(spec.field for spec in CHECK_OPTIONS)

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
        values = self.by_name()
        out = {spec.field: jsonable(values[spec.field]) for spec in OPTIONS}
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
