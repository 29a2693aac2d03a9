"""The pytest-free run: what both ``pytest`` and ``robustexplain run`` use to plan, call, score, decide
and report.

``setup`` builds a run's inputs from settings (dataset, cases, explainers behind the cache), ``plan``
turns a gate into sweep slices and prices them, ``decide`` holds every verdict rule, and ``run`` is the
:class:`Run` object that ties them together and writes the reports.
"""

from .decide import (
    Outcome,
    decide,
    judge,
    outcome_of,
    regression,
    robustness,
    with_regression,
)
from .interrupt import SweepFailed, SweepInterrupted
from .plan import (
    GatedSlice,
    SliceParam,
    expand,
    gate_slices,
    max_calls,
)
from .reports import RunOutcome, write_reports
from .run import Run
from .setup import (
    DEFAULT_CACHE_DIR,
    backend_options,
    build_explainer,
    cache_directory,
    configured_models,
    load_configured_dataset,
    no_model_reason,
    take_cases,
)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "GatedSlice",
    "Outcome",
    "Run",
    "RunOutcome",
    "SliceParam",
    "SweepFailed",
    "SweepInterrupted",
    "backend_options",
    "build_explainer",
    "cache_directory",
    "configured_models",
    "decide",
    "expand",
    "gate_slices",
    "judge",
    "load_configured_dataset",
    "max_calls",
    "no_model_reason",
    "outcome_of",
    "regression",
    "robustness",
    "take_cases",
    "with_regression",
    "write_reports",
]
