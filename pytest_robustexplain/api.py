"""The method as a Python library: perturb a history, score two explanations — on plain data.

What the method's own examples write, with this package's name::

    from pytest_robustexplain import apply_perturbation, compute_semantic_sim, score_pair

    history = [{"item_id": "B1", "category": "Books", "rating": 5, "timestamp": 1700000000}, ...]
    noisy = apply_perturbation(history, "noise_injection", severity=3, catalog=catalog)  # list of dicts
    compute_semantic_sim(explain(history, item), explain(noisy, item))

Every function also takes the package's records (:class:`~pytest_robustexplain.data.UserHistory`,
:class:`~pytest_robustexplain.data.Catalog`), and then returns records: plain data in, plain data out.
Imported lazily from the package face (``pytest_robustexplain.__getattr__``), so the plugin stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .checks import Check, register_check, register_metric
from .data import Catalog, Interaction, Item, UserHistory, catalog_from, history_from, item_from
from .metrics import (
    PairScores,
    compute_keyword_stability,
    compute_length_stability,
    compute_semantic_sim,
    compute_structural_consistency,
    score_pair,
)
from .perturbations import PerturbationResult, available_kinds
from .perturbations import apply_perturbation as _apply

__all__ = [
    "Check",
    "PairScores",
    "PerturbationResult",
    "apply_perturbation",
    "available_kinds",
    "catalog_from",
    "compute_keyword_stability",
    "compute_length_stability",
    "compute_semantic_sim",
    "compute_structural_consistency",
    "history_from",
    "item_from",
    "register_check",
    "register_metric",
    "score_pair",
]


def _catalog_of(history: UserHistory) -> Catalog:
    """The items a history mentions, when no catalog is given (noise and drift then draw from them)."""
    seen: dict[str, Item] = {}
    for i in history:
        seen.setdefault(i.item_id, Item(i.item_id, i.title, i.category, i.features))
    return Catalog(seen.values())


def apply_perturbation(history: UserHistory | Iterable[Any], kind: str, severity: int = 3, *,
                       catalog: Catalog | Mapping[str, Any] | Iterable[Any] | None = None, seed: int = 42,
                       item_id: str = "", repeat: int = 0, user_id: str = "user"
                       ) -> PerturbationResult | list[dict[str, Any]]:
    """Perturb a history with ``kind`` (``noise_injection``, ``temporal_shuffle``, ``behavior_dilution``,
    ``category_drift``, ``missing_values`` or an alias such as ``noise``) at ``severity`` 1–5.

    Plain data (a list of interaction dicts) in: the perturbed history as a list of dicts out. A
    :class:`UserHistory` in: the full :class:`PerturbationResult` (``perturbed``, ``changes``, …). Without
    ``catalog`` the kinds that insert items draw from the history's own items. Deterministic in
    (seed, user, item_id, kind, severity, repeat).
    """
    plain = not isinstance(history, UserHistory)
    record = history_from(history, user_id)
    items = _catalog_of(record) if catalog is None else catalog_from(catalog)
    result = _apply(record, kind, severity, catalog=items, seed=seed, item_id=item_id, repeat=repeat)
    if plain:
        return [_plain(i) for i in result.perturbed]
    return result


def _plain(interaction: Interaction) -> dict[str, Any]:
    return interaction.to_dict()


def plain_data_explainer(fn: Callable[[list[dict[str, Any]], dict[str, Any]], Any]
                         ) -> Callable[[UserHistory, Item], Any]:
    """An explainer for the plugin from one written for plain data: ``fn(history, item)`` gets the history
    as a list of interaction dicts (:meth:`UserHistory.to_dicts`) and the item as a dict
    (:meth:`Item.to_dict`), as in the Python API's examples. Return it from an ``explainer`` fixture::

        @pytest.fixture
        def explainer():
            return plain_data_explainer(my_explainer)
    """
    def explain(history: UserHistory, item: Item) -> Any:
        return fn(history.to_dicts(), item.to_dict())

    explain.__qualname__ = f"plain_data_explainer({getattr(fn, '__qualname__', repr(fn))})"
    explain.__module__ = getattr(fn, "__module__", __name__)  # the cache key names the user's function
    return explain
