"""Weights, the metric signature and combining the metrics into ρ (cheap: no heavy import, so
settings can validate weights and signatures at plugin start-up)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from types import MappingProxyType
from typing import Any

from .. import __version__
from ..errors import ConfigError
from ..results import ALL_METRICS, EMBEDDING, METRICS
from .base import (
    BLEU_MAX_ORDER,
    BLEU_SMOOTH_METHOD,
    DEFAULT_TAGGER,
    DEFAULT_WEIGHTS,
    FAILED,
    TAGGER_DISTRIBUTION,
    TAGGERS,
    TOKENIZER_NAME,
    WEIGHT_TOLERANCE,
    PairScores,
    TextScores,
    Vector,
    Weights,
    clamp,
    cosine,
)


def validate_weights(weights: Mapping[str, Any] | Sequence[Any] | None, *,
                     origin: str = "weights") -> Weights:
    """Check metric weights and return them in metric order: (semantic, keyword, structural, length),
    plus the ``embedding`` weight when it is above 0.

    ``weights`` is None (the default 0.25 each), a mapping with the four metric names as keys (and
    optionally ``embedding``), or a sequence of four (or five, the last for ``embedding``) numbers. Each
    weight must be a finite number ≥ 0 and together they must sum to 1 within 1e-6. ``origin`` names
    where the weights came from (an option, an ini key) and starts every error message, a
    :class:`ConfigError` naming the bad value. This is the one check of weights (settings, markers and
    the scorer all call it).
    """
    try:
        return check_weights(weights)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def check_weights(weights: Mapping[str, Any] | Sequence[Any] | None) -> Weights:
    """:func:`validate_weights` without the origin: a ValueError with the problem only."""
    if weights is None:
        return DEFAULT_WEIGHTS
    if isinstance(weights, Mapping):
        values = _weights_from_mapping(weights)
    elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
        if len(weights) not in (len(METRICS), len(ALL_METRICS)):
            raise ValueError(f"expected {len(METRICS)} weights ({', '.join(METRICS)}), got {len(weights)}: "
                             f"{list(weights)!r} (or {len(ALL_METRICS)}, the last for {EMBEDDING})")
        values = [_weight_value(name, value) for name, value in zip(ALL_METRICS, weights, strict=False)]
    else:
        raise ValueError(f"expected a mapping of metric name to weight or a sequence of "
                         f"{len(METRICS)} numbers, got {type(weights).__name__}: {weights!r}")
    _sum_to_one(dict(zip(ALL_METRICS, values, strict=False)))
    # An embedding weight of 0 is no embedding weight: such weights are the paper's four, signature and all.
    return tuple(values[:len(METRICS)] if len(values) > len(METRICS) and values[-1] == 0 else values)


def _weights_from_mapping(weights: Mapping[str, Any]) -> list[float]:
    unknown = [key for key in weights if key not in ALL_METRICS]
    if unknown:
        raise ValueError(f"unknown metric name(s) {', '.join(map(repr, unknown))}; "
                         f"expected {', '.join(METRICS)} (and optionally {EMBEDDING})")
    _all_four(weights)
    names = ALL_METRICS if EMBEDDING in weights else METRICS
    return [_weight_value(name, weights[name]) for name in names]


def _all_four(weights: Mapping[str, Any]) -> None:
    missing = [name for name in METRICS if name not in weights]
    if missing:
        raise ValueError(f"missing weight(s) for {', '.join(missing)}; give all of "
                         f"{', '.join(METRICS)} (use 0 to leave a metric out)")


def _sum_to_one(weights: Mapping[str, float]) -> None:
    total = math.fsum(weights.values())
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        listed = ", ".join(f"{name}={value:g}" for name, value in weights.items())
        raise ValueError(f"weights must sum to 1 (within {WEIGHT_TOLERANCE:g}), got {total:.9g} ({listed})")


def _weight_value(name: str, value: Any) -> float:
    # bool is an int subclass; True as a weight is almost certainly a mistake.
    if isinstance(value, bool):
        raise ValueError(f"weight for {name!r} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"weight for {name!r} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"weight for {name!r} must be a finite number ≥ 0, got {value!r}")
    return number


def check_user_weights(weights: Mapping[str, Any]) -> Mapping[str, float] | Weights:
    """A test's weights that name the user's own metrics (already known to be user-metric names): the four
    given as always, the embedding optional, the user's each a weight, all summing to 1. Returned as a
    mapping by name (the built-ins in their order, then the user's sorted), or as the plain weights when
    no user metric has a share."""
    user = {name: _weight_value(name, value) for name, value in weights.items() if name not in ALL_METRICS}
    builtin = {name: value for name, value in weights.items() if name in ALL_METRICS}
    _all_four(builtin)
    values = {name: _weight_value(name, builtin[name]) for name in ALL_METRICS if name in builtin}
    _sum_to_one({**values, **user})
    if not any(user.values()):
        return check_weights(builtin)
    if values.get(EMBEDDING) == 0:
        del values[EMBEDDING]
    return MappingProxyType({**values, **{name: user[name] for name in sorted(user) if user[name] > 0}})


def weight_items(weights: Mapping[str, float] | Weights) -> tuple[tuple[str, float], ...]:
    """(metric, weight) of validated weights, whichever form they take."""
    if isinstance(weights, Mapping):
        return tuple(weights.items())
    return tuple(zip(ALL_METRICS, weights, strict=False))


def embedding_weighted(weights: Mapping[str, float] | Weights) -> bool:
    """Whether these (validated) weights give the embedding metric a share of ρ."""
    if isinstance(weights, Mapping):
        return weights.get(EMBEDDING, 0.0) > 0
    return len(weights) == len(ALL_METRICS)


def check_tagger(tagger: str) -> str:
    if tagger not in TAGGERS:
        raise ConfigError(f"unknown keyword tagger {tagger!r}; expected one of {', '.join(TAGGERS)}")
    return tagger


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise ConfigError(f"the {name!r} package is required for the metrics but is not installed "
                          f"(pip install {name})") from None


def _format_weight(weight: float) -> str:
    text = f"{weight:.6g}"
    # sacrebleu-style compactness: .25 rather than 0.25.
    return text[1:] if text.startswith("0.") else text


def metric_signature(weights: Mapping[str, Any] | Sequence[Any] | None = None,
                     tagger: str = DEFAULT_TAGGER, *, embedding: str | None = None) -> str:
    """The reproducibility signature of the metrics, e.g.

    ``tok:nltk-regexp+chars|tag:textblob-pattern@0.20.1|bleu:4,smooth:exp,eff:yes,sacrebleu@2.6.0|``
    ``w:.25/.25/.25/.25|v:0.1.0``

    With the opt-in embedding metric (``embedding`` = the embedding model) an ``emb:cos,MODEL`` part
    follows the BLEU part, and the weights list a fifth number when it has a share of ρ. Scores from two
    runs are comparable only when their signatures are equal. Cheap: versions come from the installed
    distributions' metadata, nothing heavy is imported.
    """
    values = validate_weights(weights)
    tagger = check_tagger(tagger)
    tag_part = f"{TAGGERS[tagger]}@{_distribution_version(TAGGER_DISTRIBUTION[tagger])}"
    bleu_part = (f"{BLEU_MAX_ORDER},smooth:{BLEU_SMOOTH_METHOD},eff:yes,"
                 f"sacrebleu@{_distribution_version('sacrebleu')}")
    emb_part = f"|emb:cos,{embedding}" if embedding else ""
    weight_part = "/".join(_format_weight(w) for w in values)
    return f"tok:{TOKENIZER_NAME}|tag:{tag_part}|bleu:{bleu_part}{emb_part}|w:{weight_part}|v:{__version__}"


def text_signature(tagger: str = DEFAULT_TAGGER) -> str:
    """What the four metric values (:class:`TextScores`) depend on besides the two texts: the
    :func:`metric_signature` without its weights (they only combine the metrics) and without the embedding
    part (that metric is a cosine of vectors that come with the explanations), e.g.
    ``tok:nltk-regexp+chars|tag:textblob-pattern@0.20.1|bleu:4,smooth:exp,eff:yes,sacrebleu@2.6.0|v:0.1.0``.
    Cheap, like :func:`metric_signature`."""
    parts = metric_signature(None, tagger).split("|")
    return "|".join(part for part in parts if not part.startswith("w:"))


def check_embedding(weights: Weights, vectors: tuple[Vector, Vector] | None) -> None:
    """A ConfigError when the weights give the embedding metric a share of ρ but the pair has no vectors."""
    if embedding_weighted(weights) and vectors is None:
        raise ConfigError(f"weights give {EMBEDDING!r} a share of ρ, but the pair has no embeddings "
                          "(set an embedding model: --robustexplain-embed-model)")


def combine(text: TextScores, weights: Weights, vectors: tuple[Vector, Vector] | None = None) -> PairScores:
    """The pair's scores from its four metrics: ρ = Σ αᵢ·metricᵢ under (validated) ``weights``, with the
    embedding cosine of ``vectors`` as the fifth metric when given. The one place ρ is formed, whether
    the metrics were just computed or read from the score cache."""
    if text.failed:
        return FAILED if vectors is None else replace(FAILED, embedding=0.0)
    metrics = [text.semantic, text.keyword, text.structural, text.length]
    embedding = None if vectors is None else cosine(*vectors)
    if embedding is not None:
        metrics.append(embedding)
    combined = clamp(math.fsum(w * m for w, m in zip(weights, metrics, strict=False)))
    return PairScores(text.semantic, text.keyword, text.structural, text.length, combined=combined,
                      generation_failure=False, keyword_empty=text.keyword_empty, embedding=embedding)
