"""Per-model summary of a run: the numbers every report format shows, computed once, and the helpers the
renderers share so the formats never disagree.

The package face only hands names on, so ``from pytest_robustexplain.report.summary import X`` works for
every public name. From the bottom up: ``gates`` (display order, model facts, gate and threshold look-ups,
verdict texts, failed items and their worst pairs), ``compute`` (:func:`summarize` and the
:class:`Summary` of one model's pairs, every interval cluster-robust by user) and ``findings`` (the rows
every format shows after its tables, the guard's lines). The formatting helpers of :mod:`..formatting`
are handed on here too.
"""

from __future__ import annotations

# Handed on: the renderers and outside code import these from here (they moved to formatting.py).
from ..formatting import (
    describe_changes,
    explanation_text,
    finite,
    finite_dict,
    fmt_d,
    fmt_interval,
    fmt_mean,
    fmt_p,
    fmt_pct,
    interval_dict,
    timings_text,
    trim,
)
from .compute import (
    METRIC_DESCRIPTIONS,
    MIN_PAIRS_PER_KIND,
    FailureRecord,
    ReportModel,
    Summary,
    UserStat,
    guard_settings,
    interval_of,
    recommend,
    summarize,
)
from .findings import (
    facts,
    guard_line,
    guard_properties,
    kind_tests_text,
    security_rows,
    sensitivity_rows,
    spread_text,
)
from .gates import (
    DEFAULT_MIN_COMBINED,
    DEFAULT_MIN_METRIC,
    KIND_ORDER,
    FailedGate,
    check_note,
    failed_gates,
    failed_reason,
    failing_quantity,
    find_gate,
    gate_check,
    gate_pairs,
    gate_thresholds,
    model_info,
    model_names,
    model_outcome,
    ordered_kinds,
    overall_verdict_note,
    slice_text,
    verdict_text,
    worst_pairs,
)

__all__ = [
    "DEFAULT_MIN_COMBINED",
    "DEFAULT_MIN_METRIC",
    "KIND_ORDER",
    "METRIC_DESCRIPTIONS",
    "MIN_PAIRS_PER_KIND",
    "FailedGate",
    "FailureRecord",
    "ReportModel",
    "Summary",
    "UserStat",
    "check_note",
    "describe_changes",
    "explanation_text",
    "facts",
    "failed_gates",
    "failed_reason",
    "failing_quantity",
    "find_gate",
    "finite",
    "finite_dict",
    "fmt_d",
    "fmt_interval",
    "fmt_mean",
    "fmt_p",
    "fmt_pct",
    "gate_check",
    "gate_pairs",
    "gate_thresholds",
    "guard_line",
    "guard_properties",
    "guard_settings",
    "interval_dict",
    "interval_of",
    "kind_tests_text",
    "model_info",
    "model_names",
    "model_outcome",
    "ordered_kinds",
    "overall_verdict_note",
    "recommend",
    "security_rows",
    "sensitivity_rows",
    "slice_text",
    "spread_text",
    "summarize",
    "timings_text",
    "trim",
    "verdict_text",
    "worst_pairs",
]
