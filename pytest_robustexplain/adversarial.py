"""The old path of :mod:`pytest_robustexplain.checks.attacks.measure`: kept for old imports."""

import sys

from .checks.attacks import measure as moved

sys.modules[__name__] = moved
