"""The old path of :mod:`pytest_robustexplain.checks.polarity.measure`: kept for old imports."""

import sys

from .checks.polarity import measure as moved

sys.modules[__name__] = moved
