"""Statistics: cluster-robust intervals, verdicts, sequential tests, comparisons, the paper's analyses.

Pairs that share a user are not independent (same history, same original explanation), so every
interval here is cluster-robust by user and every test whose sampling unit matters uses per-user means.
scipy is imported lazily inside functions: this package is imported by reports that may run where only
the tables are wanted. This face only hands names on; the work lives in the modules beside it.

Gated quantities are ``"combined"`` (ρ) and the metric names of :data:`METRICS`. Control pairs
(``kind == CONTROL_KIND``) measure the model's own noise floor and are left out of everything but
:func:`noise_floor`; cross-user swap pairs feed only :mod:`pytest_robustexplain.checks.controls`.
Generation-failure pairs stay in with their 0 scores (the method's rule).

Verdicts: :func:`gate` with ``mode="mean"`` (the method's rule, plus a fragility flag) or
``mode="confident"`` (PASS / FAIL only when the data say so, one-sided bounds with Hall's 1992 skewness
correction and an allowance for a user the sample did not draw); :class:`SequentialGate` tests by betting
(Waudby-Smith & Ramdas 2023) after every user and stops early on clear cases. :func:`simulate_confident`
and :func:`simulate_sequential` run the same rules vectorised over many simulated runs (tests, benchmarks).
"""

from .analyses import (
    AnovaResult,
    KindDifferences,
    MetricCorrelations,
    SeverityTest,
    Stratum,
    TukeyRow,
    UserSpread,
    kind_differences,
    metric_correlations,
    noise_floor,
    severity_degradation,
    severity_test,
    user_spread,
)
from .compare import (
    Comparison,
    ComparisonRow,
    NonInferiorityResult,
    NonInferiorityRow,
    compare_models,
    holm,
    non_inferiority,
)
from .confident import ABOVE, BELOW, simulate_confident, users_to_catch
from .intervals import (
    GATED,
    cluster_interval,
    fieller_interval,
    free_lower_bound,
    free_lower_bounds,
    free_users_needed,
    ratio_interval,
    share_lower_bound,
    share_upper_bound,
    t_quantile,
    user_share,
    user_share_bounds,
)
from .sequential import (
    DEFAULT_FALLBACK_SHARE,
    OneSidedTest,
    SequentialGate,
    Stopped,
    StopRule,
    check_alphas,
    pass_key,
    simulate_one_sided,
    simulate_sequential,
    user_order,
)
from .verdicts import apply_policy, gate

__all__ = [
    "ABOVE",
    "BELOW",
    "DEFAULT_FALLBACK_SHARE",
    "GATED",
    "AnovaResult",
    "Comparison",
    "ComparisonRow",
    "KindDifferences",
    "MetricCorrelations",
    "NonInferiorityResult",
    "NonInferiorityRow",
    "OneSidedTest",
    "SequentialGate",
    "SeverityTest",
    "StopRule",
    "Stopped",
    "Stratum",
    "TukeyRow",
    "UserSpread",
    "apply_policy",
    "check_alphas",
    "cluster_interval",
    "compare_models",
    "fieller_interval",
    "free_lower_bound",
    "free_lower_bounds",
    "free_users_needed",
    "gate",
    "holm",
    "kind_differences",
    "metric_correlations",
    "noise_floor",
    "non_inferiority",
    "pass_key",
    "ratio_interval",
    "severity_degradation",
    "severity_test",
    "share_lower_bound",
    "share_upper_bound",
    "simulate_confident",
    "simulate_one_sided",
    "simulate_sequential",
    "t_quantile",
    "user_order",
    "user_share",
    "user_share_bounds",
    "user_spread",
    "users_to_catch",
]
