"""History perturbations: the method's five kinds and the registry (``core``, documented there), and the
opt-in adversarial kinds (``attacks``). Importing the package registers every built-in kind."""

from . import attacks as _attacks  # noqa: F401  (registers prompt_injection and shilling)
from .core import (
    DILUTION,
    DRIFT,
    KINDS,
    METADATA_FIELDS,
    MISSING,
    NOISE,
    SEVERITIES,
    SHUFFLE,
    Perturbation,
    PerturbationFn,
    PerturbationResult,
    apply_perturbation,
    available_kinds,
    behavior_dilution,
    canonical_kind,
    category_drift,
    least_engaged_categories,
    missing_values,
    noise_injection,
    perturbation_rng,
    register_perturbation,
    stable_hash,
    temporal_shuffle,
    unregister_perturbation,
    validate_severity,
)

__all__ = [
    "DILUTION", "DRIFT", "KINDS", "METADATA_FIELDS", "MISSING", "NOISE", "SEVERITIES", "SHUFFLE",
    "Perturbation", "PerturbationFn", "PerturbationResult", "apply_perturbation", "available_kinds",
    "behavior_dilution", "canonical_kind", "category_drift", "least_engaged_categories", "missing_values",
    "noise_injection", "perturbation_rng", "register_perturbation", "stable_hash", "temporal_shuffle",
    "unregister_perturbation", "validate_severity",
]
