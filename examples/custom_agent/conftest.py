"""Gate your own production agent: override the ``explainer`` fixture.

Any callable ``(history, item) -> str`` works, plain or ``async``; so does an object implementing the
Explainer protocol. Every ``@pytest.mark.robustness`` test under this folder is run against it.
"""

from __future__ import annotations

from collections import Counter

import pytest


def recommendation_agent(history, item):
    """A stand-in for a production agent: explains from the user's top categories and best-rated item."""
    categories = Counter(i.category for i in history.interactions if i.category)
    top = ", ".join(c for c, _ in categories.most_common(2)) or "varied items"
    rated = [i for i in history.interactions if i.rating is not None and i.title]
    favourite = max(rated, key=lambda i: i.rating).title if rated else "your recent picks"
    return (f"We recommend {item.title} because you mostly browse {top}. "
            f"You rated {favourite} highly, and {item.title} is a {item.category} item "
            f"with a similar appeal.")


@pytest.fixture
def explainer():
    return recommendation_agent
