"""A deterministic, rule-based explainer: no language model, no server, no randomness.

It writes the kind of explanation a recommender UI would template from the data: the user's leading
categories, the titles they rated highest, what they interacted with most recently and how the item
relates to all that. Because each sentence is computed from the history, it reacts to perturbations
the way one would expect (noise and dilution shift the category counts, temporal shuffles change the
"most recent" sentence, missing values remove ratings and categories, category drift can change the
leading category) — useful for trying the pipeline and for tests, never as a verdict about an LLM.
Its ModelInfo has ``is_llm=False``, so every report labels it "not a language model".
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ..data import Interaction, Item, UserHistory
from ..data.shown import format_value, item_name
from .base import Explanation, ModelInfo
from .prompt import case_payload

TEMPLATE_VERSION = "1"
NOT_LLM_NOTE = "template explainer — not a language model"


def _title(interaction: Interaction) -> str:
    title = (interaction.title or "").strip()
    return title or f"item {interaction.item_id}"


def _join(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _ranked_categories(history: UserHistory) -> list[tuple[str, int]]:
    counts = Counter(i.category for i in history if i.category)
    # Ties broken by name so the text never depends on dict or input order.
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _preference_sentence(history: UserHistory, ranked: list[tuple[str, int]]) -> str:
    if not ranked:
        return "Your history does not show a clear category preference."
    lead, count = ranked[0]
    share = count / len(history)
    degree = "mostly" if share >= 0.5 else "often" if share >= 0.3 else "sometimes"
    text = f"You {degree} engage with {lead} ({count} of {len(history)} interactions)"
    others = [name for name, _ in ranked[1:3]]
    return text + (f", followed by {_join(others)}." if others else ".")


def _ratings_sentence(history: UserHistory) -> str:
    rated = [(pos, i) for pos, i in enumerate(history) if i.rating is not None]
    if not rated:
        return "None of your interactions carry a rating."
    # Highest rating first; among equals the more recent one, since it says more about current taste.
    best = sorted(rated, key=lambda p: (-(p[1].rating or 0.0), -p[0]))[:3]
    mean = sum(i.rating or 0.0 for _, i in rated) / len(rated)
    return (f"You rated {_join([_title(i) for _, i in best])} highest "
            f"(average rating {mean:.1f} over {len(rated)} rated items).")


def _recent_sentence(history: UserHistory) -> str:
    recent = [_title(i) for i in history.interactions[-2:]][::-1]
    return f"Most recently you interacted with {_join(recent)}." if recent else ""


def _match_sentence(item: Item, ranked: list[tuple[str, int]]) -> str:
    name = item_name(item)
    details = "; ".join(f"{k}: {format_value(item.features[k])}" for k in sorted(item.features))
    what = f'"{name}" is a {format_value(item.category)} item' + (f" ({details})" if details else "")
    leading = [cat for cat, _ in ranked[:3]]
    if not leading:
        return f"{what}, recommended on its own merits."
    if item.category == leading[0]:
        return f"{what} that directly matches your strongest interest in {leading[0]}."
    if item.category in leading:
        return f"{what} that fits your continued interest in {item.category}."
    return f"{what} that broadens your interests beyond {leading[0]}."


def compose_explanation(history: UserHistory, item: Item) -> str:
    """The explanation text for one (history, item): a pure function of its inputs."""
    if not history.interactions:
        return (f'You have no recorded interactions yet, so "{item_name(item)}" is suggested as a '
                f"{format_value(item.category)} item to start with.")
    ranked = _ranked_categories(history)
    sentences = [
        _preference_sentence(history, ranked),
        _ratings_sentence(history),
        _recent_sentence(history),
        _match_sentence(item, ranked),
    ]
    return " ".join(s for s in sentences if s)


class TemplateExplainer:
    """The Explainer protocol over :func:`compose_explanation` (seed and repeat do not change it)."""

    backend = "template"
    model = "template"
    is_llm = False

    async def preflight(self) -> ModelInfo:
        """Nothing to check; describes itself as not a language model."""
        return ModelInfo(name=self.model, backend=self.backend, is_llm=False,
                         extra={"note": NOT_LLM_NOTE, "version": TEMPLATE_VERSION})

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        """The templated explanation; always succeeds."""
        started = time.perf_counter()
        text = compose_explanation(history, item)
        return Explanation(text=text, model=self.model, latency_s=time.perf_counter() - started)

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        """The inputs and the template version (seed and repeat kept so cache entries stay per request)."""
        return {"backend": self.backend, "model": self.model, "version": TEMPLATE_VERSION,
                "input": case_payload(history, item), "seed": seed, "repeat": repeat}

    async def aclose(self) -> None:
        """Nothing to release."""
