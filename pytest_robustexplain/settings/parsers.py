"""The option table's parsers, which live in :mod:`pytest_robustexplain.options.parsers` (below the checks,
which declare settings of their own with them); this path keeps working."""

from __future__ import annotations

from ..options.parsers import *  # noqa: F403
