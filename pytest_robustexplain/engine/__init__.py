"""The pytest-free run: what both ``pytest`` and ``robustexplain run`` use to plan, call, score, decide
and report.

``setup`` builds a run's inputs from settings (dataset, cases, explainers behind the cache), ``plan``
turns a gate into sweep slices and prices them, ``decide`` holds every verdict rule, and ``run`` is the
:class:`Run` object that ties them together and writes the reports.
"""

from .decide import (
    Outcome,
    check_baseline,
    decide,
    judge,
    outcome_of,
    regression,
    robustness,
    with_attacks,
    with_guard,
    with_regression,
)
from .interrupt import SweepFailed, SweepInterrupted
from .plan import (
    LARGE_PLAN_CALLS,
    GatedSlice,
    ItemPlan,
    SliceParam,
    SlicePlan,
    expand,
    gate_slices,
    guarded,
    large_plan_note,
    max_calls,
    plan_slices,
    slice_spec,
)
from .reports import RunOutcome, close_explainers, model_record, write_reports
from .run import Run
from .setup import (
    DEFAULT_CACHE_DIR,
    backend_options,
    build_explainer,
    build_scorer,
    cache_directory,
    check_callable,
    configured_models,
    donor_pool,
    load_configured_dataset,
    no_model_reason,
    recent_only,
    seeded_cases,
    take_cases,
    without_model,
)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "LARGE_PLAN_CALLS",
    "GatedSlice",
    "ItemPlan",
    "Outcome",
    "Run",
    "RunOutcome",
    "SliceParam",
    "SlicePlan",
    "SweepFailed",
    "SweepInterrupted",
    "backend_options",
    "build_explainer",
    "build_scorer",
    "cache_directory",
    "check_baseline",
    "check_callable",
    "close_explainers",
    "configured_models",
    "decide",
    "donor_pool",
    "expand",
    "gate_slices",
    "guarded",
    "judge",
    "large_plan_note",
    "load_configured_dataset",
    "max_calls",
    "model_record",
    "no_model_reason",
    "outcome_of",
    "plan_slices",
    "recent_only",
    "regression",
    "robustness",
    "seeded_cases",
    "slice_spec",
    "take_cases",
    "with_attacks",
    "with_guard",
    "with_regression",
    "without_model",
    "write_reports",
]
