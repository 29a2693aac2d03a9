"""What tokens cost: the ``price`` setting's per-model prices (input and output per million tokens, in the
currency the prices are given in) and the arithmetic every writer, the dry run and ``max-cost`` share."""

from __future__ import annotations

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
    import math

    if amount >= 100:
        return f"{amount:,.0f}"
    if amount >= 1:
        return f"{amount:.2f}"
    if amount <= 0:
        return "0"
    digits = min(12, 1 - math.floor(math.log10(amount)))  # two significant digits
    return f"{amount:.{digits}f}"
