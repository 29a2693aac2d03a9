"""Checks that the run's settings (:mod:`.layers`) and a test's marker (:mod:`.marker`) both make of gate
values: perturbation names made canonical (through the registry, which knows kinds added by the hook),
per-kind and per-metric thresholds completed from the thresholds they override, and an embedding weight
that needs an embedding model. Each raises ConfigError naming where the value came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from ..metrics import check_user_weights, embedding_weighted
from ..options.parsers import PER_KIND_KEYS, THRESHOLD, Invalid, hint, metric_names, name_values, unique
from ..results import ALL_METRICS, EMBEDDING, METRICS
from .table import OptionSpec, option

CanonicalKind = Callable[[str], str]


def default_canonical_kind(name: str) -> str:
    # Imported lazily: the perturbations module pulls in numpy, and custom kinds registered through the
    # hook must be known by the time validation runs.
    from ..perturbations import canonical_kind  # lazy: loads numpy

    return canonical_kind(name)


def canonical_kinds(names: Iterable[str], canon: CanonicalKind, where: str) -> tuple[str, ...]:
    kinds = []
    for name in names:
        try:
            kinds.append(canon(name))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return unique(kinds)


def marker_value(spec: OptionSpec, value: Any, where: str) -> Any:
    try:
        return spec.parse(value)
    except Invalid as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_min_metric(value: Any, base: float | Mapping[str, float], where: str
                      ) -> float | Mapping[str, float]:
    """A float, or a partial per-metric mapping (a dict, or ``semantic=0.5`` text) completed from ``base``
    (the threshold it overrides)."""
    try:
        named = name_values(value, "metric thresholds")
        if named is None:
            return THRESHOLD(value)
        metric_names(named, user=True)
    except Invalid as exc:
        raise ConfigError(f"{where}: {exc}") from None
    full = {m: float(base[m] if isinstance(base, Mapping) else base) for m in METRICS}
    if isinstance(base, Mapping):  # the user's metrics the run gates stay gated
        full.update({m: float(v) for m, v in base.items() if m not in METRICS})
    for metric, threshold in named.items():
        full[metric] = marker_value(option("min-combined"), threshold, f"{where}: {metric}")
    return MappingProxyType(full)


def parse_per_kind(value: Any, gate: Mapping[str, Any], where: str, canon: CanonicalKind
                    ) -> Mapping[str, Mapping[str, Any]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a dict kind -> {{'min_combined': x, 'min_metric': y}}")
    out: dict[str, Mapping[str, Any]] = {}
    for name, overrides in value.items():
        if not isinstance(name, str):
            raise ConfigError(f"{where}: perturbation names must be text, got {name!r}")
        kind = canonical_kinds([name], canon, where)[0]
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"{where}: the value for {name!r} must be a dict with "
                              f"{' and/or '.join(PER_KIND_KEYS)}")
        unknown = [k for k in overrides if k not in PER_KIND_KEYS]
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} for {name!r}"
                              f"{hint(str(unknown[0]), PER_KIND_KEYS)}")
        parsed: dict[str, Any] = {}
        if "min_combined" in overrides:
            parsed["min_combined"] = float(marker_value(option("min-combined"), overrides["min_combined"],
                                                         where))
        if "min_metric" in overrides:
            parsed["min_metric"] = parse_min_metric(overrides["min_metric"], gate["min_metric"], where)
        if "min_relative" in overrides:
            parsed["min_relative"] = float(marker_value(option("min-relative"), overrides["min_relative"],
                                                         where))
        out[kind] = MappingProxyType(parsed)
    return MappingProxyType(out)


def check_judge(min_faithful_rate: float | None, judge_model: str | None, where: str) -> None:
    """A faithfulness gate needs a judge: without one it would be silently ungated."""
    if min_faithful_rate is not None and not judge_model:
        raise ConfigError(f"{where}: gates the faithful rate, but no judge model is set (judge-model: "
                          "--robustexplain-judge-model, ROBUSTEXPLAIN_JUDGE_MODEL)")


def parse_gate_weights(value: Any, where: str) -> Any:
    """A test's weights: any form the run's take, or a mapping that also gives the user's own metrics a share
    of ρ (which metrics the test has is checked once its conftests registered them)."""
    try:
        named = name_values(value, "weights")
    except Invalid as exc:
        raise ConfigError(f"{where}: {exc}") from None
    raw = named if named is not None else value
    if isinstance(raw, Mapping) and any(name not in ALL_METRICS for name in raw):
        try:
            metric_names(raw, ALL_METRICS, user=True)
            return check_user_weights(raw)
        except (Invalid, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return marker_value(option("weights"), value, where)


def check_embedding_weight(weights: Any, embed_model: str | None, where: str) -> None:
    if embedding_weighted(weights) and not embed_model:
        raise ConfigError(f"{where}: gives {EMBEDDING!r} a share of ρ, but no embedding model is set "
                          "(embed-model: --robustexplain-embed-model, ROBUSTEXPLAIN_EMBED_MODEL)")
