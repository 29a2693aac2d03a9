"""What tokens cost: the ``price`` setting's per-model prices (input and output per million tokens, in the
currency the prices are given in) and the arithmetic every writer, the dry run and ``max-cost`` share."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

ANY_MODEL = "*"  # the price key that applies to every model without one of its own
PER = 1_000_000  # prices are per million tokens, as hosted APIs state them


def price_for(prices: Mapping[str, Any] | None, model: str) -> tuple[float, float] | None:
    """``(input, output)`` per million tokens for ``model`` (its own entry, else the one for every model),
    or None when no price applies. ``prices`` as the settings hold it or as a JSON report wrote it."""
    if not prices:
        return None
    found = prices.get(model, prices.get(ANY_MODEL))
    if not isinstance(found, (list, tuple)) or len(found) != 2:
        return None
    return float(found[0]), float(found[1])


def tokens_cost(prompt: float, completion: float, price: tuple[float, float]) -> float:
    """The cost of ``prompt`` input and ``completion`` output tokens at ``price``."""
    return (prompt * price[0] + completion * price[1]) / PER


def money(amount: float) -> str:
    """An amount, with the precision small amounts need and never in exponent form: ``0.0042``,
    ``0.000015``, ``1.27``, ``1,340``."""
    if amount >= 100:
        return f"{amount:,.0f}"
    if amount >= 1:
        return f"{amount:.2f}"
    if amount <= 0:
        return "0"
    digits = min(12, 1 - math.floor(math.log10(amount)))  # two significant digits
    return f"{amount:.{digits}f}"


def add_tokens(known: Mapping[str, Mapping[str, int]], more: Mapping[str, Mapping[str, Any]]
               ) -> dict[str, dict[str, int]]:
    """Two sets of per-model token counts summed (the judges' of this process and of an xdist worker)."""
    total = {model: dict(counts) for model, counts in known.items()}
    for model, counts in more.items():
        mine = total.setdefault(str(model), {})
        for name, value in counts.items():
            mine[str(name)] = mine.get(str(name), 0) + int(value)
    return total


def judge_money(judge_tokens: Mapping[str, Mapping[str, int]], prices: Mapping[str, Any] | None
                ) -> dict[str, dict[str, Any]]:
    """What each priced judge model's replies cost (``RunResult.judge_tokens``): in all, and what this run
    spent on the calls it made (cache hits are free), with the replies counted and the price. Empty
    without a price for a judge that counted tokens."""
    found = {}
    for model, counts in judge_tokens.items():
        price = price_for(prices, model)
        if price is None or not counts.get("replies"):
            continue
        found[model] = {"replies": counts["replies"], "price": list(price),
                        "total": tokens_cost(counts.get("prompt", 0), counts.get("completion", 0), price),
                        "spent": tokens_cost(counts.get("made_prompt", 0), counts.get("made_completion", 0),
                                             price)}
    return found
