"""A catalog without the recommended item is a view, not a copy (issue 41, item 6: each perturbation copied
the whole catalog, so planning grew with users × catalog size). The view must be the copy in every way a
perturbation reads it — the same items in the same order, the same categories and per-category lists — so
every perturbation, and so every number of a run, stays what it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from gaming import write_movielens

from pytest_robustexplain.data import Catalog, Item, default_dataset
from pytest_robustexplain.data.movielens import load_movielens
from pytest_robustexplain.perturbations import apply_perturbation

KINDS = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")


def _copy_without(catalog: Catalog, item_id: str) -> Catalog:
    """What the perturbations were given before: a new catalog of every other item."""
    return Catalog(item for item in catalog.items_list if item.item_id != item_id)


def _assert_same(view: Catalog, copy: Catalog) -> None:
    assert list(view.items_list) == list(copy.items_list) and len(view) == len(copy) == len(view.items_list)
    assert list(view) == list(copy) and view.categories == copy.categories
    for category in {*view.categories, *copy.categories, "no such category"}:
        assert view.by_category(category) == copy.by_category(category)
    items = view.items_list
    assert [items[i] for i in range(-len(items), len(items))] == [*copy.items_list, *copy.items_list]
    assert list(items[1:4]) == list(copy.items_list[1:4])
    with pytest.raises(IndexError):
        items[len(items)]


@pytest.fixture(scope="module")
def movielens(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    root: Path = tmp_path_factory.mktemp("ml")
    write_movielens(root, users=12, movies=120)
    return load_movielens(root).catalog


def test_the_view_is_the_copy_for_every_item(movielens: Catalog) -> None:
    for catalog in (default_dataset().catalog, movielens):
        for item in catalog.items_list:
            view = catalog.without(item.item_id)
            _assert_same(view, _copy_without(catalog, item.item_id))
            assert item.item_id not in view and view.get(item.item_id) is None
            with pytest.raises(KeyError):
                view[item.item_id]
        assert catalog.without("not an item") is catalog


def test_an_item_alone_in_its_category_takes_the_category_with_it() -> None:
    items = [Item("a", "A", "books"), Item("b", "B", "toys"), Item("c", "C", "toys"), Item("d", "D", None)]
    catalog = Catalog(items)
    for item in items:
        _assert_same(catalog.without(item.item_id), _copy_without(catalog, item.item_id))
    assert catalog.without("a").categories == ("toys",)


@pytest.mark.parametrize("kind", KINDS)
def test_every_perturbation_is_what_it_was_on_the_copy(kind: str, movielens: Catalog) -> None:
    dataset = default_dataset()
    for case in dataset.cases[:6]:
        for severity in (1, 3, 5):
            viewed = apply_perturbation(case.history, kind, severity, catalog=dataset.catalog, seed=42,
                                        item_id=case.item.item_id)
            copied = apply_perturbation(case.history, kind, severity, seed=42, item_id=case.item.item_id,
                                        catalog=_copy_without(dataset.catalog, case.item.item_id))
            assert viewed == copied
    history = dataset.cases[0].history
    for item in movielens.items_list[:5]:  # a catalog with genres, histories drawn from it
        for severity in (1, 5):
            viewed = apply_perturbation(history, kind, severity, catalog=movielens, seed=7,
                                        item_id=item.item_id)
            copied = apply_perturbation(history, kind, severity, seed=7, item_id=item.item_id,
                                        catalog=_copy_without(movielens, item.item_id))
            assert viewed == copied
