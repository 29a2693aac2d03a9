"""The Python API as the method's examples use it: plain data in, plain data out, lazily imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pytest_robustexplain
from pytest_robustexplain import (
    apply_perturbation,
    compute_keyword_stability,
    compute_length_stability,
    compute_semantic_sim,
    compute_structural_consistency,
    score_pair,
)
from pytest_robustexplain.data import UserHistory, default_dataset
from pytest_robustexplain.errors import DataError
from pytest_robustexplain.explainers.template import compose_explanation
from pytest_robustexplain.perturbations import PerturbationResult

HISTORY = [
    {"item_id": f"B{n}", "category": ["Books", "Toys", "Books"][n % 3], "rating": 3 + n % 3,
     "timestamp": 1_700_000_000 + 3_600 * n, "title": f"Title {n}"}
    for n in range(12)
]
CATALOG = {f"C{n}": {"title": f"Catalog item {n}", "category": ["Home", "Sports"][n % 2]} for n in range(30)}


def explain(history: list[dict[str, object]], item: dict[str, object]) -> str:
    """A user's own explainer on plain data (here: the template explainer, through the converters)."""
    from pytest_robustexplain import history_from, item_from

    return compose_explanation(history_from(history), item_from(item))


def test_example_3_ci_check_as_the_method_writes_it() -> None:
    """The method's CI example, with this package's name: perturb, explain both, check each metric."""
    item = {"item_id": "C3", "title": "Catalog item 3", "category": "Sports"}
    original = explain(HISTORY, item)
    kinds = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")
    for kind in kinds:
        perturbed_history = apply_perturbation(HISTORY, kind, severity=3, catalog=CATALOG)
        perturbed = explain(perturbed_history, item)
        assert compute_semantic_sim(original, perturbed) >= 0.5
        assert compute_keyword_stability(original, perturbed) >= 0.3
        assert compute_structural_consistency(original, perturbed) >= 0.2
        assert compute_length_stability(original, perturbed) >= 0.5
        assert score_pair(original, perturbed).combined >= 0.5


def test_plain_data_in_plain_data_out_and_records_in_records_out() -> None:
    noisy = apply_perturbation(HISTORY, "noise", 5, catalog=CATALOG, seed=1)
    assert isinstance(noisy, list) and all(isinstance(i, dict) for i in noisy)
    assert len(noisy) > len(HISTORY) and {i["item_id"] for i in noisy} - {i["item_id"] for i in HISTORY}
    assert apply_perturbation(HISTORY, "noise", 5, catalog=CATALOG, seed=1) == noisy  # deterministic
    without_catalog = apply_perturbation(HISTORY, "shuffle", 5)
    assert sorted(i["item_id"] for i in without_catalog) == sorted(i["item_id"] for i in HISTORY)
    case = default_dataset().cases[0]
    record = apply_perturbation(case.history, "drift", 3, catalog=default_dataset().catalog)
    assert isinstance(record, PerturbationResult) and isinstance(record.perturbed, UserHistory)
    as_list = [{"item_id": k, **v} for k, v in CATALOG.items()]
    listed = apply_perturbation(HISTORY, "dilution", 3, catalog=as_list)
    assert isinstance(listed, list)


def test_bad_plain_data_is_one_clear_error() -> None:
    with pytest.raises(DataError, match="item_id"):
        apply_perturbation([{"category": "Books"}], "noise", 3)
    with pytest.raises(DataError, match="rating"):
        apply_perturbation([{"item_id": "a", "rating": "five"}], "noise", 3)


def test_the_api_is_loaded_lazily() -> None:
    code = ("import sys, pytest_robustexplain as p; assert 'numpy' not in sys.modules; "
            "assert 'pytest_robustexplain.api' not in sys.modules; p.compute_length_stability; "
            "assert 'pytest_robustexplain.api' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    # The command and the API do not need pytest (GitHub outputs live in report/github.py).
    cli_only = ("import sys, pytest_robustexplain.cli, pytest_robustexplain.api; "
                "assert 'pytest' not in sys.modules, 'pytest imported'")
    subprocess.run([sys.executable, "-c", cli_only], check=True, timeout=120)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pytest_robustexplain.nope  # noqa: B018
