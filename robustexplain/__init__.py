"""``import robustexplain``: the method's own name for the Python API, as the practitioner's guide writes it.

The guide's CI example starts with ``from robustexplain import generate_explanation, apply_perturbation,
compute_semantic_sim, …``; every name here is :mod:`pytest_robustexplain`'s public API under that name (the
same objects, imported on first use, so this import stays as cheap as the plugin's). The pytest plugin keeps
its own name, ``pytest_robustexplain``.
"""

from __future__ import annotations

from typing import Any

import pytest_robustexplain as _api

__version__ = _api.__version__
__all__ = list(_api.__all__)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(_api, name)
    raise AttributeError(f"module 'robustexplain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
