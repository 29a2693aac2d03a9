"""``robustexplain dataset``: write the synthetic dataset, or import histories and catalog files or a
MovieLens directory, in the project's format.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..data import (
    CASES_FILE,
    CATALOG_FILE,
    DEFAULT_SEED,
    HISTORIES_FILE,
    csv_column_maps,
    generate_synthetic,
    load_catalog,
    load_dataset,
    load_histories,
    load_movielens,
    save_dataset,
)
from ..options.parsers import Invalid
from ..options.parsers import parse_columns as columns_setting
from .common import EXIT_OK, PROG, CommandError

if TYPE_CHECKING:
    from ..data import Dataset


def cmd_dataset_generate(args: argparse.Namespace) -> int:
    """``robustexplain dataset generate``: the synthetic dataset, written in the project's format."""
    seed = DEFAULT_SEED if args.seed is None else args.seed
    if seed < 0:
        raise CommandError(f"--seed {seed}: must be a non-negative integer")
    out = _output_dir(args.out, args.force)
    dataset = generate_synthetic(seed, n_items=args.items, n_users=args.users, n_cases=args.n_cases,
                                 min_len=args.min_length, max_len=args.max_length)
    return _save(dataset, out)


def cmd_dataset_import(args: argparse.Namespace) -> int:
    """``robustexplain dataset import``: histories/catalog files or MovieLens → the project's format."""
    seed = DEFAULT_SEED if args.seed is None else args.seed
    out = _output_dir(args.out, args.force)
    if args.movielens is not None:
        for flag in ("catalog", "cases", "columns", "catalog_columns"):
            if getattr(args, flag) is not None:
                raise CommandError(f"--{flag.replace('_', '-')} applies to --histories, not --movielens "
                                   "(MovieLens files have a fixed layout)")
        root = Path(args.movielens)
        if not root.is_dir():
            problem = "not a directory" if root.exists() else "directory not found"
            raise CommandError(f"--movielens {root}: {problem}")
        dataset = load_movielens(root, max_users=args.max_users, min_ratings=args.min_ratings,
                                 max_history=args.max_history, n_cases=args.n_cases, seed=seed)
        return _save(dataset, out)
    if args.catalog is None:
        raise CommandError("--histories needs --catalog FILE (the items the histories refer to)")
    for flag in ("histories", "catalog", "cases"):
        path = getattr(args, flag)
        if path is not None and not Path(path).is_file():
            problem = "not a file" if Path(path).exists() else "file not found"
            raise CommandError(f"--{flag} {path}: {problem}")
    hist_columns, cat_columns = import_columns(args.columns, args.catalog_columns, Path(args.histories),
                                               Path(args.catalog))
    histories = load_histories(args.histories, columns=hist_columns)
    catalog = load_catalog(args.catalog, columns=cat_columns)
    dataset = load_dataset(histories, catalog, args.cases, n_cases=args.n_cases, seed=seed,
                           name=Path(args.out).name)
    return _save(dataset, out)


def parse_columns(text: str | None, flag: str) -> dict[str, str]:
    """``user_id=userId,item_id=movieId`` → ``{"user_id": "userId", "item_id": "movieId"}``: the ``columns``
    setting's grammar (``options.parsers.parse_columns``), where an empty text is no mapping either."""
    if text is None:
        return {}
    try:
        mapping = dict(columns_setting(text))
    except Invalid as exc:
        raise CommandError(f"{flag} {text!r}: {exc}") from None
    if not mapping:
        raise CommandError(f"{flag} {text!r}: expected FIELD=COLUMN pairs separated by commas (e.g. "
                           "user_id=userId,item_id=movieId)")
    return mapping


def import_columns(columns: str | None, catalog_columns: str | None, histories: Path, catalog: Path
                   ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """``--columns`` and ``--catalog-columns`` as the two files' column mappings
    (:func:`~pytest_robustexplain.data.csv_column_maps`, which the ``columns`` settings use too)."""
    return csv_column_maps(parse_columns(columns, "--columns"),
                           parse_columns(catalog_columns, "--catalog-columns"), histories, catalog,
                           flags=("--columns", "--catalog-columns"))


def _output_dir(out: str, force: bool) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise CommandError(f"--out {out}: is a file, not a directory")
    existing = [name for name in (HISTORIES_FILE, CATALOG_FILE, CASES_FILE) if (path / name).exists()]
    if existing and not force:
        raise CommandError(f"--out {out}: already holds {', '.join(existing)}; pass --force to overwrite")
    return path


def _save(dataset: Dataset, out: Path) -> int:
    try:
        save_dataset(dataset, out)
    except OSError as exc:
        raise CommandError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    n_interactions = sum(len(h) for h in dataset.histories.values())
    print(f"{PROG}: wrote {dataset.name} to {out}: {len(dataset.histories)} users ({n_interactions} "
          f"interactions), {len(dataset.catalog)} items, {len(dataset.cases)} cases "
          f"({HISTORIES_FILE}, {CATALOG_FILE}, {CASES_FILE})")
    print(f"{PROG}: use it with  pytest --robustexplain-dataset={out}  or  robustexplain run --dataset {out}")
    return EXIT_OK
