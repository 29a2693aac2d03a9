"""Plan a robustness sweep and run it concurrently in the background.

The plugin plans every (user, item, kind, severity, repeat) pair of every marked test once collection
finishes and starts the model calls right away on a background thread with its own event loop, so the
calls overlap with everything else pytest does. Test items then wait only for their own slice.

Economy, by construction:
- an original explanation (same model, user, item, seed) is requested once, however many pairs, slices
  and tests share it;
- identical pairs requested by several tests are one pair (keyed by :class:`PairKey` plus the seed,
  which fix the perturbation, the calls and the four metrics; a test's own weights only re-weight ρ);
- pairs start in a bounded window, users in their seeded order, so the model works on a few users at a
  time and an original explanation is requested only one user ahead of its user's turn (early enough
  that no pair waits for it, late enough that a decided sequential slice wastes at most one);
- pairs whose perturbation changed nothing are filtered before any call;
- a cross-user control (the case's item explained for its donor user, ``checks/controls``) is one more call
  per case, planned, deduplicated and cached like any pair;
- a slice gated sequentially stops as soon as its verdict is decided and the calls no other slice still
  needs are cancelled.

The package face only hands names on, so ``from pytest_robustexplain.sweep import X`` works as it did when
this was one module: ``records`` (slice specs and results, counters, perturbations, re-weighting) below
``planner`` (which pairs a slice has: pure, shared by the sweep, pricing and unmarked tests) below
``background`` (the :class:`Sweep` itself).
"""

from __future__ import annotations

from .background import Sweep
from .planner import PairPlanner, grid, perturbations_of, severities_for
from .records import (
    CONTROL_SEED_OFFSET,
    Counters,
    Perturbations,
    SequentialConfig,
    SliceResult,
    SliceSpec,
    planned_users,
    reweighted,
)

__all__ = [
    "CONTROL_SEED_OFFSET",
    "Counters",
    "PairPlanner",
    "Perturbations",
    "SequentialConfig",
    "SliceResult",
    "SliceSpec",
    "Sweep",
    "grid",
    "perturbations_of",
    "planned_users",
    "reweighted",
    "severities_for",
]
