"""The ``@pytest.mark.robustness(...)`` marker: its keywords, the line ``pytest --markers`` shows, and
:func:`apply_marker`, which overrides the run's gate settings with a test's keywords and returns that test's
:class:`GateSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from ..checks.controls import RELATIVE_UNGATED
from ..errors import ConfigError
from ..options.parsers import hint
from ..results import METRICS
from .checks import (
    CanonicalKind,
    canonical_kinds,
    check_embedding_weight,
    check_judge,
    default_canonical_kind,
    marker_value,
    parse_gate_weights,
    parse_min_metric,
    parse_per_kind,
)
from .record import Declared, Settings, jsonable
from .table import BY_FIELD, CHECK_OPTIONS, OPTIONS, option

# The per-test gate settings, declared once in the option table (``marker=True``): what the marker takes.
MARKER_KEYWORDS: tuple[str, ...] = tuple(spec.field for spec in OPTIONS if spec.marker)

MARKER_DOC = (
    # The thresholds first: what most tests set (the README's example), then the table's order.
    "robustness(" + ", ".join(f"{k}=..." for k in sorted(MARKER_KEYWORDS, key=lambda k: not k.startswith(
        ("min_combined", "min_metric")))) + "): gate this test on the "
    "robustness of LLM-generated recommendation explanations. Keywords override the run's robustexplain "
    "settings for this test; min_metric may be a number or a dict per metric "
    f"({', '.join(METRICS)}), per_kind a dict kind -> "
    "{'min_combined': x, 'min_metric': y, 'min_relative': z}."
)


@dataclass(frozen=True, init=False)
class GateSettings(Declared):
    """The gate of one test: the run's settings overridden by its ``@pytest.mark.robustness`` keywords.

    ``min_metric`` is one threshold for every metric or a mapping over all four metrics; ``per_kind``
    maps a perturbation kind to overrides (``min_combined`` and/or ``min_metric``) for that kind's slice.
    Use :meth:`combined_threshold` and :meth:`metric_threshold` rather than reading them directly.
    """

    min_combined: float
    min_metric: float | Mapping[str, float]
    per_kind: Mapping[str, Mapping[str, Any]]
    perturbations: tuple[str, ...]
    severities: tuple[int, ...]
    users: int | None
    repeats: int
    weights: tuple[float, ...] | Mapping[str, float]  # by name when a user metric has a share of ρ
    design: str
    decision: str
    alpha: float
    inconclusive: str
    max_users: int | None
    noise_floor: str
    guard: str
    check_limits: Mapping[str, float]
    declared: Mapping[str, Any] = field(default_factory=dict)  # the checks' own per-test settings
    sources: Mapping[str, str] = field(default_factory=dict)

    DECLARED: ClassVar[tuple[str, ...]] = tuple(spec.field for spec in CHECK_OPTIONS if spec.marker)

    def explicit(self, name: str) -> bool:
        """Whether the setting was given (flag, ini, env, YAML, marker), not left at its default."""
        return self.sources.get(name, "default") != "default"

    def combined_threshold(self, kind: str | None = None) -> float:
        """The ρ threshold for ``kind``'s slice (or for all kinds together when ``kind`` is None)."""
        override = self.per_kind.get(kind, {}) if kind is not None else {}
        return float(override.get("min_combined", self.min_combined))

    def relative_threshold(self, kind: str | None = None) -> float | None:
        """The R threshold of ``kind``'s slice (None: R is reported, not gated): per_kind's
        ``min_relative`` when set; else 0 for the adversarial kinds (an attack that moves the explanation
        further than another user's history has taken it over), none for the kinds that change the user's
        taste (``guard.RELATIVE_UNGATED``), the run's ``min_relative`` for the others."""
        from ..perturbations.attacks import ATTACK_KINDS  # lazy: loads numpy

        override = self.per_kind.get(kind, {}) if kind is not None else {}
        if "min_relative" in override:
            return float(override["min_relative"])
        if kind in ATTACK_KINDS:
            return 0.0
        return None if kind in RELATIVE_UNGATED else self.min_relative

    def metric_threshold(self, metric: str, kind: str | None = None) -> float:
        """The threshold of ``metric`` for ``kind``'s slice (or for all kinds when ``kind`` is None)."""
        if metric not in self.gated_metrics(kind):
            raise KeyError(f"unknown metric {metric!r}")
        chosen = self._min_metric(kind)
        return float(chosen[metric] if isinstance(chosen, Mapping) else chosen)

    def gated_metrics(self, kind: str | None = None) -> tuple[str, ...]:
        """The metrics ``kind``'s slice gates: the paper's four, then the user's own that ``min_metric``
        names (a user metric is gated only when named)."""
        chosen = self._min_metric(kind)
        user = sorted(m for m in chosen if m not in METRICS) if isinstance(chosen, Mapping) else []
        return (*METRICS, *user)

    def _min_metric(self, kind: str | None) -> float | Mapping[str, float]:
        override = self.per_kind.get(kind, {}) if kind is not None else {}
        return override.get("min_metric", self.min_metric)

    def thresholds(self, kind: str | None = None) -> dict[str, float]:
        """``{"combined": …, metric: …}`` for one slice: what a GateResult records."""
        return {"combined": self.combined_threshold(kind),
                **{m: self.metric_threshold(m, kind) for m in self.gated_metrics(kind)}}

    def to_dict(self) -> dict[str, Any]:
        return {**{k: jsonable(v) for k, v in self.by_name().items()}, "sources": jsonable(self.sources)}


# GateSettings is written out for the type checker; which settings it has is the option table's to say
# (the checks' own in ``declared``).
_EVERY = GateSettings(**dict.fromkeys(MARKER_KEYWORDS))
if set(_EVERY.by_name()) != set(MARKER_KEYWORDS):  # pragma: no cover
    raise TypeError("GateSettings' fields are not the option table's marker=True settings")


def _marker_where(nodeid: str, key: str, value: Any) -> str:
    return f"{nodeid}: @pytest.mark.robustness({key}={value!r})"


def _unknown_keyword(key: str, nodeid: str) -> ConfigError:
    if key.replace("-", "_") in BY_FIELD:
        spec = option(key)
        return ConfigError(f"{nodeid}: {key!r} in @pytest.mark.robustness is a run-wide setting, not a "
                           f"per-test keyword (use {spec.cli}, {spec.env} or ini {spec.ini}). "
                           f"Valid: {', '.join(MARKER_KEYWORDS)}")
    return ConfigError(f"{nodeid}: unknown keyword {key!r} in @pytest.mark.robustness"
                       f"{hint(key, MARKER_KEYWORDS)}")


def apply_marker(settings: Settings, kwargs: Mapping[str, Any], *, nodeid: str, args: Sequence[Any] = (),
                 canonical_kind: CanonicalKind | None = None) -> GateSettings:
    """The gate of one test: marker keywords > run settings. Raises ConfigError naming the test.

    ``args`` are the marker's positional arguments (an error: every setting is a keyword). A keyword
    set to None is ignored (the run's setting applies), as a blank YAML value is.
    """
    if args:
        raise ConfigError(f"{nodeid}: @pytest.mark.robustness takes keywords only, got positional "
                          f"{list(args)!r}. Valid: {', '.join(MARKER_KEYWORDS)}")
    for key in kwargs:
        if key not in MARKER_KEYWORDS:
            raise _unknown_keyword(key, nodeid)
    canon = canonical_kind or default_canonical_kind
    gate: dict[str, Any] = {k: getattr(settings, k) for k in MARKER_KEYWORDS}
    sources = {k: settings.sources.get(k, "default") for k in gate}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    for key, value in kwargs.items():
        if key == "per_kind":
            continue  # needs the final min_metric, below
        where = _marker_where(nodeid, key, value)
        if key == "min_metric":
            gate[key] = parse_min_metric(value, settings.min_metric, where)
        elif key == "perturbations":
            gate[key] = canonical_kinds(marker_value(option(key), value, where), canon, where)
        elif key == "weights":
            gate[key] = parse_gate_weights(value, where)
        else:
            gate[key] = marker_value(option(key), value, where)
        if key == "weights":
            check_embedding_weight(gate[key], settings.embed_model, where)
        if key == "min_faithful_rate":
            check_judge(gate[key], settings.judge_model, where)
        sources[key] = f"@pytest.mark.robustness on {nodeid}"
    if "per_kind" in kwargs:
        where = _marker_where(nodeid, "per_kind", kwargs["per_kind"])
        # The marker's kinds replace the run's thresholds for those kinds; the run's others stay.
        gate["per_kind"] = MappingProxyType({**settings.per_kind,
                                             **parse_per_kind(kwargs["per_kind"], gate, where, canon)})
        sources["per_kind"] = f"@pytest.mark.robustness on {nodeid}"
        if "perturbations" in kwargs:
            # Both set in the same marker: thresholds for a kind the test does not run are a typo.
            stray = [k for k in gate["per_kind"] if k not in gate["perturbations"]]
            if stray:
                raise ConfigError(f"{where}: per_kind names {stray[0]!r}, which is not among this test's "
                                  f"perturbations ({', '.join(gate['perturbations'])})")
    if gate["decision"] == "sequential" and "preference_flip" in gate["perturbations"]:
        # The sequential test stops on the stability thresholds, which the flip kind must not meet.
        raise ConfigError(f"{nodeid}: the preference_flip kind is decided by its own rule on all its users; "
                          "use decision=mean or confident with it (sequential stops on the stability "
                          "thresholds, which a faithful explainer should not meet there)")
    return GateSettings(**gate, sources=MappingProxyType(sources))
