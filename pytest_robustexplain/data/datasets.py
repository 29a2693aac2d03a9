"""Histories, catalogs and cases from files; drawing cases; datasets loaded from and saved to directories."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError, DataError
from .io import (
    CASE_FIELDS,
    CASES_FILE,
    CATALOG_FILE,
    HISTORIES_FILE,
    HISTORY_CSV_COLUMNS,
    ITEM_FIELDS,
    SUPPORTED_EXTENSIONS,
    USER_FIELDS,
    PathLike,
    Record,
    Where,
    check_fields,
    csv_records,
    document_records,
    extension,
    in_time_order,
    interaction_from,
    item_from_obj,
    jsonl_records,
    kind,
    required_id,
)
from .records import Catalog, Dataset, EvalCase, Interaction, Item, UserHistory
from .seeded import DEFAULT_SEED, STREAM_CASES, Rand

# ---------------------------------------------------------------------------------------------------------
# Histories, catalog, cases
# ---------------------------------------------------------------------------------------------------------


def load_histories(path: PathLike, *, columns: Mapping[str, str] | None = None) -> dict[str, UserHistory]:
    """Every user's history from a JSON, YAML, JSONL or CSV file, by user id in file order.

    JSON/YAML: ``{"users": [{"user_id": ..., "interactions": [...]}, ...]}`` or the bare list; JSONL: one
    user object per line; CSV: one interaction per row with columns ``user_id, item_id, category,
    timestamp, rating, title, features`` (only the first two are required; ``columns`` maps a field to the
    file's own column name, e.g. ``{"user_id": "userId"}``). Interactions are put in timestamp order when
    all of them have one. Any malformed record raises one :class:`DataError` naming file, record and field.
    """
    file = Path(path)
    ext = extension(file)
    if ext == ".csv":
        histories = _histories_from_rows(file, columns)
    else:
        _no_columns(columns, file)
        records = jsonl_records(file) if ext == ".jsonl" else document_records(file, ext, "users")
        histories = _histories_from_records(file, records)
    if not histories:
        raise DataError("no users in the file", source=str(file))
    return histories


def _no_columns(columns: Mapping[str, str] | None, file: Path) -> None:
    if columns:
        raise ConfigError(f"columns= maps CSV column names; {file} is not a CSV file")


def _histories_from_records(file: Path, records: list[Record]) -> dict[str, UserHistory]:
    histories: dict[str, UserHistory] = {}
    first_seen: dict[str, str] = {}
    for record in records:
        where = Where(str(file), record.loc)
        obj = check_fields(record.value, USER_FIELDS, where, "a user")
        user_id = required_id(obj, where, "user_id")
        where = where.at(f"user {user_id!r} ({record.loc})")
        if user_id in histories:
            raise where.error(f"duplicate user id (first at {first_seen[user_id]})", "user_id")
        raw = obj.get("interactions")
        if raw is None:
            raise where.error("missing interactions", "interactions")
        if not isinstance(raw, list):
            raise where.error(f"expected a list of interactions, got {kind(raw)}", "interactions")
        if not raw:
            raise where.error("empty history: a user needs at least one interaction", "interactions")
        interactions = [interaction_from(entry, where.at(f"{where.record}, interaction index {i}"))
                        for i, entry in enumerate(raw)]
        histories[user_id] = UserHistory(user_id, in_time_order(interactions))
        first_seen[user_id] = record.loc
    return histories


def _histories_from_rows(file: Path, columns: Mapping[str, str] | None) -> dict[str, UserHistory]:
    # A user's rows need not be contiguous: rows are grouped by user id, in order of first appearance.
    grouped: dict[str, list[Interaction]] = {}
    for record in csv_records(file, HISTORY_CSV_COLUMNS, ("user_id", "item_id"), columns):
        where = Where(str(file), record.loc)
        user_id = required_id(record.value, where, "user_id")
        where = where.at(f"{record.loc} (user {user_id!r})")
        fields = {k: v for k, v in record.value.items() if k != "user_id"}
        grouped.setdefault(user_id, []).append(interaction_from(fields, where))
    return {uid: UserHistory(uid, in_time_order(rows)) for uid, rows in grouped.items()}


def load_catalog(path: PathLike, *, columns: Mapping[str, str] | None = None) -> Catalog:
    """The item catalog from a JSON, YAML, JSONL or CSV file.

    JSON/YAML: ``{"items": [{"item_id", "title", "category", "features"}, ...]}`` or the bare list; JSONL:
    one item per line; CSV: one item per row (``features`` as a JSON object in its cell; ``columns`` as for
    :func:`load_histories`). Duplicate item ids are an error.
    """
    file = Path(path)
    ext = extension(file)
    if ext == ".csv":
        records = csv_records(file, ITEM_FIELDS, ("item_id",), columns)
    else:
        _no_columns(columns, file)
        records = jsonl_records(file) if ext == ".jsonl" else document_records(file, ext, "items")
    items: dict[str, Item] = {}
    first_seen: dict[str, str] = {}
    for record in records:
        where = Where(str(file), record.loc)
        item = item_from_obj(record.value, where)
        if item.item_id in items:
            raise where.at(f"item {item.item_id!r} ({record.loc})").error(
                f"duplicate item id (first at {first_seen[item.item_id]})", "item_id")
        items[item.item_id] = item
        first_seen[item.item_id] = record.loc
    if not items:
        raise DataError("no items in the catalog", source=str(file))
    return Catalog(items.values())


def load_cases(path: PathLike, histories: Mapping[str, UserHistory],
               catalog: Catalog) -> tuple[EvalCase, ...]:
    """Evaluation cases ``[{"user_id": ..., "item_id": ...}, ...]`` (JSON, YAML, JSONL or CSV).

    JSON/YAML also accept ``{"cases": [...]}``. Each case must name a known user and a catalog item that is
    not already in that user's history; the same (user, item) pair may not appear twice.
    """
    file = Path(path)
    ext = extension(file)
    if ext == ".csv":
        records = csv_records(file, CASE_FIELDS, CASE_FIELDS, None)
    else:
        records = jsonl_records(file) if ext == ".jsonl" else document_records(file, ext, "cases")
    cases: list[EvalCase] = []
    seen: dict[tuple[str, str], str] = {}
    for record in records:
        where = Where(str(file), f"case {record.loc}")
        obj = check_fields(record.value, CASE_FIELDS, where, "a case")
        user_id = required_id(obj, where, "user_id")
        item_id = required_id(obj, where, "item_id")
        where = where.at(f"case {record.loc} (user {user_id!r}, item {item_id!r})")
        cases.append(_case(histories, catalog, user_id, item_id, where))
        if (user_id, item_id) in seen:
            raise where.error(f"duplicate case (first at {seen[user_id, item_id]})")
        seen[user_id, item_id] = record.loc
    if not cases:
        raise DataError("no cases in the file", source=str(file))
    return tuple(cases)


def _case(histories: Mapping[str, UserHistory], catalog: Catalog, user_id: str, item_id: str,
          where: Where) -> EvalCase:
    if user_id not in histories:
        raise where.error("unknown user: not in the histories", "user_id")
    if item_id not in catalog:
        raise where.error("unknown item: not in the catalog", "item_id")
    history = histories[user_id]
    if item_id in history.item_ids:
        raise where.error("the item is already in the user's history; recommend something new", "item_id")
    return EvalCase(history=history, item=catalog[item_id])


# ---------------------------------------------------------------------------------------------------------
# Drawing cases
# ---------------------------------------------------------------------------------------------------------


def category_counts(history: UserHistory, catalog: Mapping[str, Item] | None = None) -> dict[str, int]:
    """How often each category occurs in a history, most frequent first (ties alphabetical).

    An interaction without a category takes its item's category from ``catalog`` when it has one.
    """
    counts: dict[str, int] = {}
    for interaction in history:
        category = interaction.category
        if category is None and catalog is not None and interaction.item_id in catalog:
            category = catalog[interaction.item_id].category
        if category is not None:
            counts[category] = counts.get(category, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


RATING_SCALE = (1.0, 5.0)  # the usual scale, widened to the ratings at hand (MovieLens rates from 0.5)


def rating_scale(ratings: Iterable[float]) -> tuple[float, float]:
    """(lowest, highest) rating: 1–5, widened to the lowest and highest of ``ratings``."""
    values = [float(r) for r in ratings if math.isfinite(r)]
    return (min(RATING_SCALE[0], *values), max(RATING_SCALE[1], *values)) if values else RATING_SCALE


def dominant_category(history: UserHistory, catalog: Mapping[str, Item] | None = None) -> str | None:
    """The user's most frequent category (ties broken alphabetically), or None when none is known."""
    return next(iter(category_counts(history, catalog)), None)


def draw_cases(histories: Mapping[str, UserHistory], catalog: Catalog, n_cases: int | None = None, *,
               seed: int = DEFAULT_SEED) -> tuple[EvalCase, ...]:
    """One case per sampled user: an item they have not interacted with, from their dominant category.

    Users are visited in a seeded random order; each gets a uniformly drawn unseen item from its most
    frequent category (falling back to the next categories, then to any unseen item). ``n_cases=None``
    takes every user who has an unseen item. Cases come back in the order of ``histories``.
    """
    check_count(n_cases, "n_cases")
    rand = Rand(seed, STREAM_CASES)
    users = list(histories)
    chosen: list[tuple[int, EvalCase]] = []
    for index in rand.sample(range(len(users)), len(users)):
        history = histories[users[index]]
        item = _unseen_item(history, catalog, rand)
        if item is not None:
            chosen.append((index, EvalCase(history, item)))
        if n_cases is not None and len(chosen) == n_cases:
            break
    if n_cases is not None and len(chosen) < n_cases:
        raise DataError(f"asked for {n_cases} cases but only {len(chosen)} of {len(users)} users have an "
                        "item in the catalog they have not interacted with")
    return tuple(case for _, case in sorted(chosen, key=lambda pair: pair[0]))


def _unseen_item(history: UserHistory, catalog: Catalog, rand: Rand) -> Item | None:
    seen = set(history.item_ids)
    for category in category_counts(history, catalog):
        candidates = [item for item in catalog.by_category(category) if item.item_id not in seen]
        if candidates:
            return rand.choice(candidates)
    rest = [item for item in catalog.items_list if item.item_id not in seen]
    return rand.choice(rest) if rest else None


def check_count(value: int | None, name: str, minimum: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


# ---------------------------------------------------------------------------------------------------------
# Datasets: load, save, directories
# ---------------------------------------------------------------------------------------------------------


def csv_column_maps(shared: Mapping[str, str], only_catalog: Mapping[str, str], histories: Path,
                    catalog: Path, *, flags: tuple[str, str] = ("columns", "catalog-columns")
                    ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The column mappings for the histories file and the catalog file: ``shared`` renames, in each CSV
    file, the columns that file has (``item_id=movieId`` may rename a column of both, or of one only); a
    column found in neither file is an error naming the headers. ``only_catalog`` applies to the catalog
    only and overrides ``shared`` there. ``flags`` name the two settings in the errors."""
    valid = tuple(dict.fromkeys((*HISTORY_CSV_COLUMNS, *ITEM_FIELDS)))
    for field in shared:
        if field not in valid:
            raise ConfigError(f"{flags[0]}: unknown field {field!r}; fields: {', '.join(valid)}")
    for field in only_catalog:
        if field not in ITEM_FIELDS:
            raise ConfigError(f"{flags[1]}: unknown field {field!r}; catalog fields: "
                              f"{', '.join(ITEM_FIELDS)}")
    if only_catalog and catalog.suffix.lower() != ".csv":
        raise ConfigError(f"{flags[1]} renames CSV columns; {catalog} is not a CSV file")
    hist_header, cat_header = _csv_header(histories), _csv_header(catalog)
    if shared and hist_header is None and cat_header is None:
        raise ConfigError(f"{flags[0]} renames CSV columns; neither file is a CSV file")
    for field, column in shared.items():
        if column not in (hist_header or ()) and column not in (cat_header or ()):
            headers = "; ".join(f"{path.name}: {', '.join(header)}" for path, header in
                                ((histories, hist_header), (catalog, cat_header)) if header is not None)
            raise ConfigError(f"{flags[0]} {field}={column}: no CSV column {column!r} ({headers})")
    hist = {f: c for f, c in shared.items() if f in HISTORY_CSV_COLUMNS and c in (hist_header or ())}
    cat = {f: c for f, c in shared.items() if f in ITEM_FIELDS and c in (cat_header or ())}
    cat.update(only_catalog)
    return hist or None, cat or None


def _csv_header(path: Path) -> list[str] | None:
    """The header cells of a CSV file (None for other formats; the loader reports unreadable files)."""
    if path.suffix.lower() != ".csv":
        return None
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return [cell.strip() for cell in next(csv.reader(handle), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def load_dataset(histories: PathLike | Mapping[str, UserHistory], catalog: PathLike | Catalog,
                 cases: PathLike | None = None, *, n_cases: int | None = None, seed: int = DEFAULT_SEED,
                 name: str | None = None) -> Dataset:
    """A dataset from a histories file and a catalog file (or already loaded ones) and optional cases.

    Interactions missing a title or category take them from the catalog entry of the same item (the
    catalog is where item metadata lives; the model should not see "unknown" for a known item). Without a
    cases file, cases are drawn with :func:`draw_cases` (``n_cases`` users, ``seed``); with one,
    ``n_cases`` keeps the first ``n_cases`` cases of the file.
    """
    check_count(n_cases, "n_cases")
    loaded_catalog = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    loaded = histories if isinstance(histories, Mapping) else load_histories(histories)
    filled = {uid: _with_catalog_metadata(h, loaded_catalog) for uid, h in loaded.items()}
    if cases is None:
        drawn = draw_cases(filled, loaded_catalog, n_cases, seed=seed)
    else:
        drawn = load_cases(cases, filled, loaded_catalog)
        if n_cases is not None:
            if n_cases > len(drawn):
                raise DataError(f"n_cases={n_cases} but the file has only {len(drawn)} cases",
                                source=str(cases))
            drawn = drawn[:n_cases]
    if name is None:
        name = _dataset_name(histories)
    return Dataset(catalog=loaded_catalog, histories=MappingProxyType(filled), cases=drawn, name=name)


def _dataset_name(histories: PathLike | Mapping[str, UserHistory]) -> str:
    if isinstance(histories, Mapping):
        return "dataset"
    path = Path(histories)
    # A file called histories.* says nothing; its directory usually names the dataset.
    return path.parent.resolve().name if path.stem == "histories" else path.stem


def _with_catalog_metadata(history: UserHistory, catalog: Catalog) -> UserHistory:
    changed = False
    out = []
    for interaction in history:
        item = catalog.get(interaction.item_id)
        if item is not None and ((interaction.title is None and item.title is not None)
                                 or (interaction.category is None and item.category is not None)):
            interaction = replace(interaction, title=interaction.title or item.title,
                                  category=interaction.category or item.category)
            changed = True
        out.append(interaction)
    return UserHistory(history.user_id, tuple(out)) if changed else history


def save_dataset(dataset: Dataset, directory: PathLike) -> None:
    """Write ``histories.json``, ``catalog.json`` and ``cases.json`` into ``directory`` (created if needed).

    The files are pretty-printed with one interaction, item or case per line, keys in a fixed order and
    feature names sorted, so that the same dataset always gives the same bytes and diffs stay readable.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    users = [_user_block(h) for h in dataset.histories.values()]
    (out / HISTORIES_FILE).write_text('{\n  "users": [\n' + ",\n".join(users) + "\n  ]\n}\n",
                                      encoding="utf-8")
    items = ["    " + _line(_canonical(item.to_dict()), f"item {item.item_id!r}")
             for item in dataset.catalog.values()]
    (out / CATALOG_FILE).write_text('{\n  "items": [\n' + ",\n".join(items) + "\n  ]\n}\n", encoding="utf-8")
    cases = ["  " + _line({"user_id": c.user_id, "item_id": c.item_id}, "case") for c in dataset.cases]
    (out / CASES_FILE).write_text("[\n" + ",\n".join(cases) + "\n]\n", encoding="utf-8")


def _user_block(history: UserHistory) -> str:
    lines = ["        " + _line(_canonical(i.to_dict()), f"user {history.user_id!r}, item {i.item_id!r}")
             for i in history]
    return ("    {\n      \"user_id\": " + json.dumps(history.user_id, ensure_ascii=False)
            + ',\n      "interactions": [\n' + ",\n".join(lines) + "\n      ]\n    }")


def _canonical(record: dict[str, Any]) -> dict[str, Any]:
    if "features" in record:
        record["features"] = _sorted_keys(record["features"])
    return record


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_sorted_keys(v) for v in value]
    return value


def _line(record: Mapping[str, Any], what: str) -> str:
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DataError(f"cannot be written as JSON: {exc}", record=what) from None


def load_dataset_dir(directory: PathLike, *, n_cases: int | None = None, seed: int = DEFAULT_SEED) -> Dataset:
    """Read a dataset directory: ``histories.*``, ``catalog.*`` and optionally ``cases.*``.

    Each file may have any supported extension (exactly one per name). Without a cases file, cases are
    drawn as in :func:`load_dataset`. The dataset is named after the directory.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DataError("not a directory" if root.exists() else "directory not found", source=str(root))
    histories, catalog = _required_file(root, "histories"), _required_file(root, "catalog")
    return load_dataset(histories, catalog, _optional_file(root, "cases"), n_cases=n_cases, seed=seed,
                        name=root.resolve().name)


def _optional_file(root: Path, stem: str) -> Path | None:
    found = [root / f"{stem}{ext}" for ext in SUPPORTED_EXTENSIONS if (root / f"{stem}{ext}").is_file()]
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise DataError(f"several {stem} files ({names}); keep one", source=str(root))
    return found[0] if found else None


def _required_file(root: Path, stem: str) -> Path:
    found = _optional_file(root, stem)
    if found is None:
        raise DataError(f"no {stem} file ({stem}{{{','.join(SUPPORTED_EXTENSIONS)}}})", source=str(root))
    return found
