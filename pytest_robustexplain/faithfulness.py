"""The old path of :mod:`pytest_robustexplain.checks.judge.measure`: kept for old imports."""

import sys

from .checks.judge import measure as moved

sys.modules[__name__] = moved
