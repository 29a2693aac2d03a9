"""The records of a run and their JSON readers: the bottom layer every other module may use.

``records`` holds plain dataclasses (pairs, verdicts, gates, the run, a decided slice, model facts);
``readers`` turns their JSON form back into them. Nothing here imports a module above it.
"""

from .readers import SCHEMA, SCHEMA_VERSION, gate_from_dict, pair_from_dict, plain, read_json, run_from_dict
from .records import (
    CONTROL_KIND,
    CONTROL_KINDS,
    FAIL,
    GUARD_POLICIES,
    INCONCLUSIVE,
    INSENSITIVE,
    METRICS,
    OUTCOMES,
    OVERALL,
    PASS,
    SWAP_KIND,
    AttackResult,
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
    is_control,
)

__all__ = [
    "CONTROL_KIND", "CONTROL_KINDS", "FAIL", "GUARD_POLICIES", "INCONCLUSIVE", "INSENSITIVE", "METRICS",
    "OUTCOMES", "OVERALL", "PASS", "SCHEMA", "SCHEMA_VERSION", "SWAP_KIND", "AttackResult", "GateCheck",
    "GateResult", "GuardExample", "GuardResult", "Interval", "ModelInfo", "NonInferiorityResult",
    "NonInferiorityRow", "PairKey", "PairResult", "PerturbationResult", "Robustness", "RunResult",
    "Verdict", "gate_from_dict", "is_control", "pair_from_dict", "plain", "read_json", "run_from_dict",
]
