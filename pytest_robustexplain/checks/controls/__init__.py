"""The cross-user control's room — the guard: robustness relative to the user, and only on evidence.

ρ measures stability, and an explainer that ignores the user is perfectly stable: a constant text scores
ρ = 1 under every perturbation. So each evaluation case (user ``u``, item ``i``) also gets a *content-only
cross-user control* — the same item explained with a donor's interactions shown under ``u``'s identity
(``perturbations/donors.py``: ``u``'s id, length and timestamps, another user's behaviour) — scored with the
same four metrics and weights: ρ_swap. From it, per case and with cluster-robust intervals by user:

- sensitivity ``S = ρ_floor − ρ_swap`` (ρ_floor = 1 at temperature 0, the measured noise floor
  otherwise): how far another user's behaviour moves the explanation;
- discrimination ``Δ = ρ_pert − ρ_swap`` (paired per case);
- relative robustness ``R = Δ / S``: R ≈ 1, the perturbation moved the explanation no more than
  resampling; R ≈ 0, as far as another user's history.

The decisions, each one-sided at ``alpha`` (:func:`.evaluate.evaluate`):

1. INSENSITIVE when the share of users with ``S_u < min_sensitivity`` (and ρ_pert meeting the gate) is
   confidently above ``max_insensitive_share``, or the share of cases whose explanation is word for word
   the control's is confidently above ``max_identical_share`` — exact Clopper–Pearson bounds, each at
   alpha / 2 (``SHARE_RULES``), so the false INSENSITIVE rate stays at or below alpha whatever the number of
   users, even with both shares at their limits;
2. otherwise PASS only when the users' mean S is confidently above ``min_sensitivity`` by a bound that
   assumes nothing of their shape (``stats.free_lower_bound``) and no more users are insensitive than
   ``max_insensitive_share`` allows; without that evidence the guard is INCONCLUSIVE (a run that shows
   neither dependence nor its absence is undecided, never a PASS);
3. ``relative_robustness.outcome`` FAIL when R's upper bound (Fieller's, at ``FIELLER_SHARE`` of alpha) is
   below ``min_relative``;
4. ``copying.outcome`` FAIL when the share of explanations copying their prompt back is confidently above
   ``max_copy_rate`` (``copying.py``; ``metrics/copies.py`` says what a copy is);
5. ``grounding.outcome`` FAIL when history references are confidently below ``min_history_reference`` or
   unsupported mentions confidently above ``max_unsupported_rate`` (``grounding.py``; ``metrics/mentions.py``
   says what a text mentions), each at alpha / 2 (under ``decision=sequential`` their own tests take part of
   it: :func:`.grounding.grounding_decision`).

Every share is bounded with users as the unit (:func:`~.stats.user_share`): a user's cases are not
independent. A failed reply, perturbed or control, leaves its case: it measures neither side of Δ and R.

Why S and not Δ per user: for an explainer that ignores the history the perturbed explanation sits at the
noise floor (ρ_pert = ρ_floor), so S = Δ exactly; for one that reads it Δ depends on the kind (category drift
*is* a change of taste). S depends only on the cases, so every item of a test gets the same finding; R is
gated per kind, with drift left ungated by default (``RELATIVE_UNGATED``).

Why the defaults: see ``docs/guard.md``; the error rates they give at 3–100 users are reproduced by
``benchmarks/bench_guard.py``.

The room, bottom to top: ``cases`` (the control's cases and settings), one module for each thing it measures
(``copying``, ``grounding``, ``sensitivity``, ``relative``: each quantity, its fixed rule, each user's value
for the check's anytime test, its sentence), ``evaluate`` (the slice's one record), ``report`` (its report
section) and ``check`` (what the four checks over it share). The checks themselves are
``checks/{sensitivity,relative,copying,grounding}.py``.
This face only hands names on; ``pytest_robustexplain.guard`` is this package under its old name.
"""

from __future__ import annotations

from .cases import (
    RELATIVE_UNGATED,
    SHARE_RULES,
    UNSUPPORTED_RULE,
    GuardSettings,
    share_lower_bound,
    share_upper_bound,
    user_share,
    user_share_bounds,
)
from .check import (
    ControlCheck,
    enforced_by_guard,
    relative_pairs,
    stop_alpha,
)
from .copying import (
    copy_message,
    user_copy_share,
)
from .evaluate import (
    evaluate,
)
from .grounding import (
    grounding_decision,
    grounding_message,
    user_history_reference,
    user_unsupported_share,
)
from .relative import (
    FIELLER_SHARE,
    by_kind,
    relative_excess_limit,
    relative_message,
    relative_terms,
    user_relative_excess,
)
from .report import (
    guard_checks_text,
    guard_line,
    guard_properties,
    guard_settings,
    pool_controls,
    relative_gated,
    relative_terms_of,
    sensitivity_rows,
)
from .sensitivity import (
    user_identical_share,
    user_sensitivity,
)

__all__ = [
    "FIELLER_SHARE",
    "RELATIVE_UNGATED",
    "SHARE_RULES",
    "UNSUPPORTED_RULE",
    "ControlCheck",
    "GuardSettings",
    "by_kind",
    "copy_message",
    "enforced_by_guard",
    "evaluate",
    "grounding_decision",
    "grounding_message",
    "guard_checks_text",
    "guard_line",
    "guard_properties",
    "guard_settings",
    "pool_controls",
    "relative_excess_limit",
    "relative_gated",
    "relative_message",
    "relative_pairs",
    "relative_terms",
    "relative_terms_of",
    "sensitivity_rows",
    "share_lower_bound",
    "share_upper_bound",
    "stop_alpha",
    "user_copy_share",
    "user_history_reference",
    "user_identical_share",
    "user_relative_excess",
    "user_sensitivity",
    "user_share",
    "user_share_bounds",
    "user_unsupported_share",
]
