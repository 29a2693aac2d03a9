"""pytest-robustexplain: a CI robustness gate for LLM-generated recommendation explanations.

Importing this package stays cheap on purpose: the plugin loads into every pytest run of everyone
who installs it, so numpy, scipy, nltk and the model clients are imported only where they are used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The Python API (``api.py``): loaded on first use, so that importing the plugin imports nothing heavy.
_API = (
    "apply_perturbation", "available_kinds", "catalog_from", "compute_keyword_stability",
    "compute_length_stability", "compute_semantic_sim", "compute_structural_consistency", "history_from",
    "item_from", "plain_data_explainer", "register_check", "register_metric", "score_pair", "Check",
    "PairScores", "PerturbationResult",
    # the guide's CI example: a fixture, one generation, the five perturbations as functions
    "generate_explanation", "load_test_fixture", "explanation_model", "close_explainers", "EvalUser",
    "History",
    "noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values",
)

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api  # lazy: the face loads it on first use

        return getattr(api, name)
    raise AttributeError(f"module 'pytest_robustexplain' has no attribute {name!r}")
