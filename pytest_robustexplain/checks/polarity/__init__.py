"""Polarity's room: ``measure`` (what an explanation says of what the user disliked, and the counterfactual
flip's reading), ``check`` (the ``polarity`` check) and ``flip`` (the ``flip`` check). This face only hands
the checks on (``measure`` imports numpy, which plugin start-up does not); ``pytest_robustexplain.polarity``
is ``measure`` under its old name."""

from .check import Polarity
from .flip import DEFAULT_MIN_FLIP_SENSITIVITY, Flip

__all__ = ["DEFAULT_MIN_FLIP_SENSITIVITY", "Flip", "Polarity"]
