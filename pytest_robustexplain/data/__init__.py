"""Interaction histories, items, catalogs and evaluation cases; loaders; the synthetic dataset.

The package face only hands names on, so ``from pytest_robustexplain.data import X`` works for every public
name: ``records`` (the types), ``io`` (file formats, located records, field values), ``datasets`` (histories,
catalog and cases from files, drawing cases, dataset directories), ``seeded`` (seeded randomness),
``movielens`` and ``synthetic`` (the two built-in dataset sources). Nothing here imports numpy until a
seeded draw is made.
"""

from __future__ import annotations

from .datasets import (
    category_counts,
    csv_column_maps,
    dominant_category,
    draw_cases,
    load_cases,
    load_catalog,
    load_dataset,
    load_dataset_dir,
    load_histories,
    rating_scale,
    save_dataset,
)
from .io import (
    CASE_FIELDS,
    CASES_FILE,
    CATALOG_FILE,
    HISTORIES_FILE,
    INTERACTION_FIELDS,
    catalog_from,
    history_from,
    is_frame,
    item_from,
    parse_timestamp,
)
from .movielens import load_movielens
from .records import Catalog, Dataset, EvalCase, Interaction, Item, UserHistory
from .seeded import DEFAULT_SEED
from .synthetic import SYNTHETIC_CATEGORIES, default_dataset, generate_synthetic

__all__ = [
    "CASES_FILE",
    "CASE_FIELDS",
    "CATALOG_FILE",
    "DEFAULT_SEED",
    "HISTORIES_FILE",
    "INTERACTION_FIELDS",
    "SYNTHETIC_CATEGORIES",
    "Catalog",
    "Dataset",
    "EvalCase",
    "Interaction",
    "Item",
    "UserHistory",
    "catalog_from",
    "category_counts",
    "csv_column_maps",
    "default_dataset",
    "dominant_category",
    "draw_cases",
    "generate_synthetic",
    "history_from",
    "is_frame",
    "item_from",
    "load_cases",
    "load_catalog",
    "load_dataset",
    "load_dataset_dir",
    "load_histories",
    "load_movielens",
    "parse_timestamp",
    "rating_scale",
    "save_dataset",
]
