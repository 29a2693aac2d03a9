"""The old path of :mod:`pytest_robustexplain.checks.controls`: kept for old imports."""

import sys

from .checks import controls as moved

sys.modules[__name__] = moved
