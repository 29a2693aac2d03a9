"""``batch``: before slices start, the calls they plan that the response cache cannot answer go to the
provider as one batch (``explainers/batch.py``); the sweep then finds every reply already answered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..explainers.batch import answer_by_batch
from ..explainers.cache import CachedExplainer
from ..sweep import PairPlanner
from .plan import plan_slices, planned_calls

if TYPE_CHECKING:
    from .plan import GatedSlice
    from .run import Run


def answer_planned_by_batch(run: Run, slices: Sequence[GatedSlice]) -> None:
    """Every call of ``slices`` not answered yet, by batch (one a model), when the run's ``batch`` is on; a
    batch that does not answer them all ends the run with one line (``BatchNotDone``)."""
    if not run.settings.batch or not slices:
        return
    planner = PairPlanner(run.dataset.catalog, run.kinds)
    plan_slices(slices, run.dataset.catalog, run.kinds, planner=planner)  # the sweep's own planner
    budget = run.settings.max_minutes
    deadline = None if budget is None else run.started + 60 * budget
    for model, calls in planned_calls(planner).items():
        explainer = run.explainer_for(model)
        if not isinstance(explainer, CachedExplainer):  # a test's own explainer, or a conftest's backend
            raise ConfigError(f"batch: model {model!r} is not the configured backend's (openai): a test's "
                              "own explainer is called directly")
        run.sweep.run_coroutine(answer_by_batch(explainer, calls, deadline=deadline, say=run.say))
