"""Checks: one interface for every finding of a gated item, one registry, one combining rule.

Each module here is one check (``stability``, ``injection``/``hijack``, ``sensitivity``, ``relative``,
``copying``, ``grounding``, ``flip``, ``faithfulness``, ``polarity``) over :class:`Check` (``base``); the
registry (``registry``) orders them and takes the user's own (``register_check``, the hook
``pytest_robustexplain_register_checks``); :mod:`.combine` is the one rule that folds their decisions into
an item's verdict; each check also gives its rows of the report's sections (:mod:`.sections`). This face
only hands names on.
"""

from .base import (
    MEASUREMENT,
    SILENT,
    Check,
    Decision,
    Evidence,
    Gate,
    ModelPart,
    Probe,
    SliceDesign,
    Table,
    originals,
    share_row,
)
from .combine import apply_stage, combine
from .controls import relative_pairs
from .predicate import PredicateCheck, PredicateFound
from .registry import (
    BUILTIN,
    DEFAULT_CHECKS,
    SECTIONED,
    CheckRegistry,
    check_limits_known,
    further,
    metric_names_known,
    register_check,
    register_metric,
    sections,
)
from .sections import FURTHER, SECTIONS, Section

__all__ = [
    "BUILTIN",
    "DEFAULT_CHECKS",
    "FURTHER",
    "MEASUREMENT",
    "SECTIONED",
    "SECTIONS",
    "SILENT",
    "Check",
    "CheckRegistry",
    "Decision",
    "Evidence",
    "Gate",
    "ModelPart",
    "PredicateCheck",
    "PredicateFound",
    "Probe",
    "Section",
    "SliceDesign",
    "Table",
    "apply_stage",
    "check_limits_known",
    "combine",
    "further",
    "metric_names_known",
    "originals",
    "register_check",
    "register_metric",
    "relative_pairs",
    "sections",
    "share_row",
]
