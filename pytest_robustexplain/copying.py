"""The old path of :mod:`pytest_robustexplain.metrics.copies`: kept for old imports."""

import sys

from .metrics import copies as moved

sys.modules[__name__] = moved
