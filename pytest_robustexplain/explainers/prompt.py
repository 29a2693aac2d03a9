"""The prompt an LLM explainer sends: the paper's template by default, or a user's own.

The layout is a contract with the fake Ollama server (``pytest_robustexplain.testing``), which parses
the numbered history lines, the quoted item and the features back out of the prompt:

    Given the user's interaction history:
    1. Wireless Earbuds Pro (id E012) — category: Electronics; rating: 4.5; date: 2024-03-01
    2. unknown (id E077) — category: unknown; rating: unknown; date: unknown
    explain why the item "Smart Watch" with features category: Electronics; brand: Acme is recommended. ...

Every missing value is written ``unknown`` so that the ``missing_values`` perturbation shows up in the
prompt as the model would see it in real data.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data import EvalCase, Interaction, Item, UserHistory
from ..data.shown import format_features, format_history, format_value, item_name
from ..errors import ConfigError, DataError

DEFAULT_TEMPLATE = (
    "Given the user's interaction history:\n"
    "{history}\n"
    'explain why the item "{item}" with features {features} is recommended. '
    "Focus on connecting the user's demonstrated preferences to the item's characteristics."
)

# The names a template may use, in the order they are listed in error messages.
PLACEHOLDERS: tuple[str, ...] = (
    "history", "item", "features", "item_id", "item_category", "user_id", "n_interactions",
)

_STRING_SOURCE = "template string"


MAX_PROMPT_CHARS = 4_000_000  # ~1M tokens: more than any model's context, far less than memory


def check_prompt_sizes(prompts: Sequence[tuple[str, str]], cases: Sequence[EvalCase]) -> None:
    """One DataError naming the longest (user id, prompt) over :data:`MAX_PROMPT_CHARS`, if any."""
    over = [(len(text), user, case) for (user, text), case in zip(prompts, cases, strict=True)
            if len(text) > MAX_PROMPT_CHARS]
    if not over:
        return
    size, user, case = max(over, key=lambda found: found[0])
    raise DataError(f"user {user}'s prompt is {size:,} characters ({len(case.history):,} interactions; "
                    f"{len(over)} of {len(cases)} users over {MAX_PROMPT_CHARS:,}): no model's context holds "
                    "that. Lower --robustexplain-max-history (the most recent interactions a prompt shows).")


def case_payload(history: UserHistory, item: Item) -> dict[str, Any]:
    """Everything a non-prompt explainer sees, as canonical JSON-ready data (for request identities)."""
    return {"history": history.to_dict(), "item": item.to_dict()}


class PromptTemplate:
    """A prompt with named placeholders, validated when it is built.

    ``PromptTemplate()`` is the paper's template. Custom templates may use any of :data:`PLACEHOLDERS`
    and must contain ``{history}``: without it no perturbation reaches the model and every robustness
    score would be a meaningless 1.0.
    """

    def __init__(self, template: str = DEFAULT_TEMPLATE, *, source: str = _STRING_SOURCE) -> None:
        self.template = template
        self.source = source
        self._validate()

    @classmethod
    def from_file(cls, path: str | Path) -> PromptTemplate:
        """Read a UTF-8 template file; unreadable files raise a ConfigError naming the path."""
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read prompt template {file}: {exc}") from None
        return cls(text, source=str(file))

    @property
    def is_default(self) -> bool:
        return self.template == DEFAULT_TEMPLATE

    def __repr__(self) -> str:
        return f"PromptTemplate(source={self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PromptTemplate) and other.template == self.template

    def __hash__(self) -> int:
        return hash(self.template)

    def render(self, history: UserHistory, item: Item) -> str:
        """The prompt text for one (history, item)."""
        return self.template.format_map(self._values(history, item))

    @staticmethod
    def _values(history: UserHistory, item: Item) -> Mapping[str, Any]:
        return {
            "history": format_history(history),
            "item": item_name(item),
            "features": format_features(item),
            "item_id": item.item_id,
            "item_category": format_value(item.category),
            "user_id": history.user_id,
            "n_interactions": len(history),
        }

    def _validate(self) -> None:
        allowed = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
        where = f"prompt template ({self.source})"
        try:
            parsed = [(f, spec) for _, f, spec, _ in string.Formatter().parse(self.template) if f is not None]
        except ValueError as exc:
            raise ConfigError(
                f"{where} is malformed: {exc}. Write a literal brace as {{{{ or }}}}.") from None
        fields = [f for f, _ in parsed]
        for name, spec in parsed:
            _check_spec(where, name, spec or "")
        for name in fields:
            if name not in PLACEHOLDERS:
                shown = "{" + name + "}" if name else "{} (positional)"
                raise ConfigError(f"{where} uses unknown placeholder {shown}; allowed: {allowed}")
        if "history" not in fields:
            raise ConfigError(
                f"{where} has no {{history}} placeholder, so perturbations could never reach the model; "
                f"allowed: {allowed}"
            )
        self._trial_render(where)

    def _trial_render(self, where: str) -> None:
        # A bad format spec or conversion ("{n_interactions:q}") only fails when formatting: find it now,
        # at configuration time, rather than on the first of hundreds of requests.
        sample = UserHistory("u", (Interaction("i1", "c", 0, 4.0, "t"),))
        try:
            self.render(sample, Item("i2", "t", "c"))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise ConfigError(f"{where} cannot be rendered: {exc}") from None


# A format spec's width or precision beyond this is a mistake or an attack ("{history:>300000000}" would
# build a 300-million-character prompt per call), never a prompt layout.
MAX_SPEC_NUMBER = 1000


def _check_spec(where: str, name: str, spec: str) -> None:
    if "{" in spec or "}" in spec:
        # A placeholder inside a format spec is filled in first and then read as the spec: several
        # ("{history:>{n_interactions}{n_interactions}}") make one width of millions out of small numbers.
        raise ConfigError(f"{where}: {{{name}:{spec}}} puts a placeholder inside a format spec, which "
                          "makes the width depend on the data; write the spec as plain text")
    widths = [int(n) for n in re.findall(r"\d+", spec)]
    if widths and max(widths) > MAX_SPEC_NUMBER:
        raise ConfigError(f"{where}: {{{name}:{spec}}} asks for a width or precision of {max(widths):,} "
                          f"characters (at most {MAX_SPEC_NUMBER:,}); drop the format spec")
