"""Per-model summary of a run: the numbers every report format shows, computed once, and the helpers the
renderers share so the formats never disagree.

The package face only hands names on, so ``from pytest_robustexplain.report.summary import X`` works for
every public name. From the bottom up: ``gates`` (display order, model facts, gate and threshold look-ups,
verdict texts, failed items and their worst pairs), ``spend`` (the tokens, time and money of a model's
calls), ``advice`` (the recommendation line), ``compute`` (:func:`summarize` and the
:class:`Summary` of one model's pairs, every interval cluster-robust by user) and ``findings`` (the rows
every format shows after its tables, the guard's lines). The formatting helpers of :mod:`..formatting`
are handed on here too.
"""

from __future__ import annotations

# Handed on: the renderers and outside code import these from here (they moved to formatting.py).
from ..formatting import (
    describe_changes,
    explanation_text,
    fmt_d,
    fmt_interval,
    fmt_mean,
    fmt_p,
    fmt_pct,
    timings_text,
    trim,
)
from .advice import recommend
from .compute import (
    METRIC_DESCRIPTIONS,
    ReportModel,
    Summary,
    interval_of,
    summarize,
)
from .findings import (
    JUDGE_COST_LABEL,
    UNFIT_LABEL,
    blocks,
    facts,
    judge_cost_lines,
    money_text,
    spread_text,
)
from .gates import (
    DEFAULT_MIN_COMBINED,
    DEFAULT_MIN_METRIC,
    ITEM_HEADER,
    OUTCOME_RANK,
    FailedGate,
    also_failed,
    dataset_of,
    failed_gates,
    failed_reason,
    failing_checks,
    find_gate,
    gate_check,
    gate_thresholds,
    headline,
    item_row,
    items_by_test,
    model_info,
    model_names,
    model_outcome,
    named_headline,
    not_decided,
    ordered_kinds,
    overall_verdict_note,
    recent_runs,
    verdict_text,
    worst_pairs,
)

__all__ = [
    "DEFAULT_MIN_COMBINED",
    "DEFAULT_MIN_METRIC",
    "ITEM_HEADER",
    "JUDGE_COST_LABEL",
    "METRIC_DESCRIPTIONS",
    "OUTCOME_RANK",
    "UNFIT_LABEL",
    "FailedGate",
    "ReportModel",
    "Summary",
    "also_failed",
    "blocks",
    "dataset_of",
    "describe_changes",
    "explanation_text",
    "facts",
    "failed_gates",
    "failed_reason",
    "failing_checks",
    "find_gate",
    "fmt_d",
    "fmt_interval",
    "fmt_mean",
    "fmt_p",
    "fmt_pct",
    "gate_check",
    "gate_thresholds",
    "headline",
    "interval_of",
    "item_row",
    "items_by_test",
    "judge_cost_lines",
    "model_info",
    "model_names",
    "model_outcome",
    "money_text",
    "named_headline",
    "not_decided",
    "ordered_kinds",
    "overall_verdict_note",
    "recent_runs",
    "recommend",
    "spread_text",
    "summarize",
    "timings_text",
    "trim",
    "verdict_text",
    "worst_pairs",
]
