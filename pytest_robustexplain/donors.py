"""The old path of :mod:`pytest_robustexplain.perturbations.donors`: kept for old imports."""

import sys

from .perturbations import donors as moved

sys.modules[__name__] = moved
