"""Seeded randomness: draws that never drift with a numpy upgrade, in independent streams of one seed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

from ..errors import ConfigError

_T = TypeVar("_T")

DEFAULT_SEED = 2601
"""The seed of the default synthetic dataset and of every seeded draw in this package (the paper's id)."""

# Independent streams of one seed: changing, say, the number of users must not change the items.
STREAM_ITEMS, STREAM_USERS, STREAM_CASES, STREAM_SAMPLE = 0, 1, 2, 3


class Rand:
    """Draws built only on ``Generator.random()``.

    numpy promises a stable bit stream per seed but not stable algorithms for ``choice``, ``normal``,
    ``permutation``...; the committed fixture must never drift with a numpy upgrade, so every distribution
    here is written out from uniform doubles.
    """

    def __init__(self, seed: int, stream: int) -> None:
        import numpy as np  # lazy: loads numpy

        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
        self._generator = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream,)))

    def random(self) -> float:
        """Uniform on [0, 1)."""
        return float(self._generator.random())

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def integer(self, low: int, high: int) -> int:
        """Uniform on ``low..high`` inclusive."""
        return low + min(int(self.random() * (high - low + 1)), high - low)

    def normal(self, mean: float, sd: float) -> float:
        # Box–Muller; 1 - u is in (0, 1], so the logarithm is finite.
        radius = math.sqrt(-2.0 * math.log(1.0 - self.random()))
        return mean + sd * radius * math.cos(2.0 * math.pi * self.random())

    def choice(self, options: Sequence[_T]) -> _T:
        return options[self.integer(0, len(options) - 1)]

    def sample(self, options: Iterable[_T], k: int) -> list[_T]:
        """``k`` distinct elements in random order (a partial Fisher–Yates shuffle)."""
        pool = list(options)
        for i in range(min(k, len(pool))):
            j = self.integer(i, len(pool) - 1)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]
