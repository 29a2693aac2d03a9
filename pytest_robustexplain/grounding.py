"""The old path of :mod:`pytest_robustexplain.metrics.mentions`: kept for old imports."""

import sys

from .metrics import mentions as moved

sys.modules[__name__] = moved
