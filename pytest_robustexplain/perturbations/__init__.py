"""History perturbations: the method's five kinds (``core``, documented there), the registry of kinds and
payload families (``registry``), and the opt-in adversarial kinds (``attacks``). Importing the package
registers every built-in kind and payload family."""

from . import attacks as _attacks  # noqa: F401  (registers prompt_injection and shilling)
from . import flip as _flip  # noqa: F401  (registers preference_flip)
from .core import (
    DILUTION,
    DRIFT,
    KINDS,
    METADATA_FIELDS,
    MISSING,
    NOISE,
    SEVERITIES,
    SHUFFLE,
    PerturbationResult,
    apply_perturbation,
    behavior_dilution,
    category_drift,
    least_engaged_categories,
    missing_values,
    noise_injection,
    perturbation_rng,
    stable_hash,
    temporal_shuffle,
    validate_severity,
)
from .registry import (
    DEFAULT_REGISTRY,
    KindRegistry,
    Perturbation,
    PerturbationFn,
    available_kinds,
    canonical_kind,
    register_payload,
    register_perturbation,
    unregister_perturbation,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "DILUTION",
    "DRIFT",
    "KINDS",
    "METADATA_FIELDS",
    "MISSING",
    "NOISE",
    "SEVERITIES",
    "SHUFFLE",
    "KindRegistry",
    "Perturbation",
    "PerturbationFn",
    "PerturbationResult",
    "apply_perturbation",
    "available_kinds",
    "behavior_dilution",
    "canonical_kind",
    "category_drift",
    "least_engaged_categories",
    "missing_values",
    "noise_injection",
    "perturbation_rng",
    "register_payload",
    "register_perturbation",
    "stable_hash",
    "temporal_shuffle",
    "unregister_perturbation",
    "validate_severity",
]
