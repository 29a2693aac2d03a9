"""The records of a run and their JSON readers: the bottom layer every other module may use.

``records`` holds plain dataclasses (pairs, verdicts, gates, the run, a decided slice, model facts);
``readers`` turns their JSON form back into them. Nothing here imports a module above it.
"""

from typing import TYPE_CHECKING

from .readers import SCHEMA, SCHEMA_VERSION, gate_from_dict, pair_from_dict, plain, read_json, run_from_dict
from .records import (
    ALL_METRICS,
    ANSWERED_BY,
    CONTROL_KIND,
    CONTROL_KINDS,
    CUT_REPLIES,
    DEFAULT_MIN_COMBINED,
    DEFAULT_MIN_METRIC,
    EMBEDDING,
    FAIL,
    GUARD_POLICIES,
    INCONCLUSIVE,
    INSENSITIVE,
    JUDGE_SCOPES,
    KIND_NAME,
    MAX_CUT_SHARE,
    METRICS,
    ORIGINAL,
    ORIGINAL_FAILED,
    OUTCOMES,
    OVERALL,
    PASS,
    RELATIVE,
    SEVERITY_RANGE,
    SWAP_KIND,
    TYPO_CUTOFF,
    AttackResult,
    Finding,
    GateCheck,
    GateResult,
    GuardExample,
    GuardResult,
    Interval,
    ModelInfo,
    NonInferiorityResult,
    NonInferiorityRow,
    PairKey,
    PairResult,
    PerturbationResult,
    Robustness,
    RunResult,
    Verdict,
    answered_by,
    gate_scope,
    is_control,
    is_score,
    merge_pairs,
    metrics_of,
    too_many_cut,
    user_metric_name,
)

__all__ = [
    "ALL_METRICS",
    "ANSWERED_BY",
    "CONTROL_KIND",
    "CONTROL_KINDS",
    "CUT_REPLIES",
    "DEFAULT_MIN_COMBINED",
    "DEFAULT_MIN_METRIC",
    "EMBEDDING",
    "FAIL",
    "GUARD_POLICIES",
    "INCONCLUSIVE",
    "INSENSITIVE",
    "JUDGE_SCOPES",
    "KIND_NAME",
    "MAX_CUT_SHARE",
    "METRICS",
    "ORIGINAL",
    "ORIGINAL_FAILED",
    "OUTCOMES",
    "OVERALL",
    "PASS",
    "RELATIVE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SEVERITY_RANGE",
    "SWAP_KIND",
    "TYPO_CUTOFF",
    "AttackResult",
    "FaithfulnessResult",
    "Finding",
    "FlipResult",
    "GateCheck",
    "GateResult",
    "GuardExample",
    "GuardResult",
    "Interval",
    "JudgedText",
    "MisattributionCase",
    "ModelInfo",
    "NonInferiorityResult",
    "NonInferiorityRow",
    "PairKey",
    "PairResult",
    "PerturbationResult",
    "PolarityResult",
    "Robustness",
    "RunResult",
    "Verdict",
    "answered_by",
    "gate_from_dict",
    "gate_scope",
    "is_control",
    "is_score",
    "merge_pairs",
    "metrics_of",
    "pair_from_dict",
    "plain",
    "read_json",
    "run_from_dict",
    "too_many_cut",
    "user_metric_name",
]

# The records of the checks beyond stability, built when first asked for (faithful.py says why).
if TYPE_CHECKING:
    from .faithful import FaithfulnessResult, FlipResult, JudgedText, MisattributionCase, PolarityResult

_FAITHFUL = ("FaithfulnessResult", "FlipResult", "JudgedText", "MisattributionCase", "PolarityResult")


def __getattr__(name: str) -> object:
    if name in _FAITHFUL:
        from . import faithful

        return getattr(faithful, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
