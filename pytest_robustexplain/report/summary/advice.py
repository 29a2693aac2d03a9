"""The one sentence a report ends a model's summary with: what to change first (generation failures, a
metric or perturbation kind that trails), and never "keep this run as the baseline" for a run whose test
items did not all pass."""

from __future__ import annotations

import math
import statistics

from ...results import DEFAULT_MIN_COMBINED, DEFAULT_MIN_METRIC, PASS, Interval, RunResult, too_many_cut
from ...wording import count_noun
from .gates import failing_checks

# A metric "trails" when it is below its gate or this fraction of the other metrics' mean; a kind is
# "weak" when below its gate or this fraction of the other kinds' mean.
_METRIC_TRAIL_RATIO = 0.8
_KIND_WEAK_RATIO = 0.95
_FAILURE_RATE_ALERT = 0.05

_METRIC_ADVICE: dict[str, str] = {
    "structural": "Structural consistency trails the other metrics: constrain the output format or use a "
                  "structured explanation template.",
    "keyword": "Keyword overlap trails the other metrics: anchor the explanation to item attributes "
               "(category, features) named in the prompt rather than to individual history items.",
    "length": "Length stability trails the other metrics: fix the target length (num_predict / explicit "
              "word budget).",
    "semantic": "Semantic similarity trails the other metrics: the explanations change their content, not "
                "just their wording; lower the temperature and summarise the history (dominant categories) "
                "instead of listing it.",
}
_KIND_ADVICE: dict[str, str] = {
    "noise_injection": "injected off-profile items steer the explanation; tell the model to ground it in "
                       "the user's dominant preferences",
    "temporal_shuffle": "the order of the history changes the explanation; present the history in a fixed "
                        "order (e.g. by time) or summarise it",
    "behavior_dilution": "filler interactions dilute the explanation; summarise the history by category "
                         "before prompting",
    "category_drift": "drifted categories pull the explanation away; weight recent and dominant categories "
                      "explicitly in the prompt",
    "missing_values": "missing fields change the explanation; write missing values explicitly and explain "
                      "from the fields that are present",
}
_ALL_GOOD = ("No metric or perturbation stands out: the explanations are consistently robust; keep this "
             "run as the baseline.")


def unless_failed(run: RunResult, model: str, advice: str) -> str:
    """``advice``, except that a run whose test items did not all pass is never proposed as the baseline:
    the scores may look even (an explainer that ignores the user is perfectly stable), the gate said no."""
    items = run.model_gates(model)
    failed = [g for g in items if g.verdict.outcome != PASS]
    if advice != _ALL_GOOD or not failed:
        return advice
    return (f"No metric or perturbation stands out in the scores, but {len(failed)} of "
            f"{count_noun(len(items), 'test item')} did not pass ({', '.join(failing_checks(failed))}): fix "
            "that before keeping a run as the baseline.")


def recommend(by_metric: dict[str, Interval], by_kind: dict[str, Interval], thresholds: dict[str, float],
              *, n_failures: int = 0, n_pairs: int = 0, n_cut: int = 0, n_all: int = 0,
              n_unfit: int = 0) -> str:
    """One rule-based sentence: what to change first.

    Order: many generation failures (scores are meaningless until fixed), then a metric below its gate
    (the furthest below) or clearly trailing the others, then a perturbation kind below the ρ gate or
    clearly weaker than the others, else "all good". ``thresholds`` maps ``combined`` and each metric to
    its gate (see :func:`gate_thresholds`).
    """
    if n_pairs == 0:
        return "No scored pairs for this model: nothing to recommend."
    if n_unfit:
        return (f"{n_unfit} of {n_all} pairs have a prompt longer than the model's context: lower "
                "max-history or raise the context (num-ctx for Ollama) before reading the scores.")
    if too_many_cut(n_cut, n_all):
        return (f"{n_cut} of {n_all} pairs compare a reply cut at the token limit: raise num-predict (or ask "
                "for shorter explanations) before reading the scores.")
    if n_failures / n_pairs > _FAILURE_RATE_ALERT:
        return (f"{n_failures} of {n_pairs} pairs had a generation failure: fix the backend or the prompt "
                "before reading the scores.")
    metric_thresholds = {m: thresholds.get(m, DEFAULT_MIN_METRIC) for m in by_metric}
    metric = _trailing(by_metric, metric_thresholds, _METRIC_TRAIL_RATIO)
    if metric is not None:
        return _METRIC_ADVICE.get(metric, f"{metric} trails the other metrics.")
    kind_thresholds = dict.fromkeys(by_kind, thresholds.get("combined", DEFAULT_MIN_COMBINED))
    kind = _trailing(by_kind, kind_thresholds, _KIND_WEAK_RATIO)
    if kind is not None:
        advice = _KIND_ADVICE.get(kind, "look at the worst pairs of this perturbation")
        return f"ρ drops most under {kind}: {advice}."
    return _ALL_GOOD


def _trailing(values: dict[str, Interval], thresholds: dict[str, float], ratio: float) -> str | None:
    """The entry furthest below its threshold; else the lowest if below ``ratio`` × the others' mean."""
    means = {k: v.mean for k, v in values.items() if not math.isnan(v.mean)}
    shortfalls = {k: thresholds[k] - mean for k, mean in means.items() if mean < thresholds[k]}
    if shortfalls:
        return max(shortfalls, key=lambda k: (shortfalls[k], k))
    lowest = argmin(means)
    if lowest is None:
        return None
    others = [v for k, v in means.items() if k != lowest]
    if others and means[lowest] < ratio * statistics.fmean(others):
        return lowest
    return None


def argmin(values: dict[str, float]) -> str | None:
    finite_items = [(v, k) for k, v in values.items() if not math.isnan(v)]
    return min(finite_items)[1] if finite_items else None
