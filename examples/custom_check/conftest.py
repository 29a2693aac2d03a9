"""Your own check in one registration: "no explanation mentions a price".

A recommendation explanation should say why the item fits the user, not sell it. The predicate reads one
explanation (with the history and the item the explainer was given) and returns True when it has the
property counted; the gate fails a test whose share of such explanations is confidently above
``max_rate`` (here 0: a single explanation that names a price fails it). The check's row — how many
explanations, the exact bounds, the limit, the outcome — appears in the terminal, Markdown, HTML, JSON and
JUnit reports beside the built-in checks.
"""

from __future__ import annotations

import re

# A currency sign or code next to a number, or a number followed by a currency word: "$12", "€ 9.99",
# "12 dollars", "USD 15", "only 9.99 euros". Plain numbers ("rated 4 stars", "from 1994") are not prices.
PRICE = re.compile(
    r"(?:[$€£¥]\s?\d)|(?:\b(?:usd|eur|gbp)\s?\d)|(?:\b\d+(?:[.,]\d{1,2})?\s?(?:dollars?|euros?|pounds?|usd|eur)\b)",
    re.IGNORECASE,
)


def mentions_price(text, history, item):
    return bool(PRICE.search(text))


def pytest_robustexplain_register_checks(register_check):
    register_check("no_price", mentions_price, max_rate=0.0, description="mention a price")
