"""Interaction histories, items, catalogs and evaluation cases; loaders; the synthetic dataset.

Timestamps are integer seconds since the Unix epoch (UTC). Every field of an interaction but the item id
may be missing (``None``), because real histories have gaps and the ``missing_values`` perturbation
creates more of them.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeAlias, TypeVar

from .errors import ConfigError, DataError

_T = TypeVar("_T")


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A read-only view keeps the dataclasses effectively immutable without copying on every access.
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Interaction:
    """One thing a user did with one item."""

    item_id: str
    category: str | None = None
    timestamp: int | None = None
    rating: float | None = None
    title: str | None = None
    features: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", _frozen(self.features))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"item_id": self.item_id}
        for name in ("category", "timestamp", "rating", "title"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.features:
            out["features"] = dict(self.features)
        return out


@dataclass(frozen=True)
class Item:
    """A catalog item: what can be recommended."""

    item_id: str
    title: str | None = None
    category: str | None = None
    features: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", _frozen(self.features))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"item_id": self.item_id}
        if self.title is not None:
            out["title"] = self.title
        if self.category is not None:
            out["category"] = self.category
        if self.features:
            out["features"] = dict(self.features)
        return out

    def as_interaction(self, *, timestamp: int | None = None, rating: float | None = None) -> Interaction:
        """An interaction with this item, carrying the item's metadata."""
        return Interaction(item_id=self.item_id, category=self.category, timestamp=timestamp,
                           rating=rating, title=self.title, features=self.features)


@dataclass(frozen=True)
class UserHistory:
    """A user's interactions, oldest first (the order the model sees)."""

    user_id: str
    interactions: tuple[Interaction, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "interactions", tuple(self.interactions))

    def __len__(self) -> int:
        return len(self.interactions)

    def __iter__(self) -> Iterator[Interaction]:
        return iter(self.interactions)

    @property
    def item_ids(self) -> tuple[str, ...]:
        return tuple(i.item_id for i in self.interactions)

    def to_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "interactions": [i.to_dict() for i in self.interactions]}


class Catalog(Mapping[str, Item]):
    """All items, by id, in a stable order (the order they were given)."""

    def __init__(self, items: Iterable[Item]) -> None:
        self._items: dict[str, Item] = {}
        for item in items:
            self._items[item.item_id] = item

    def __getitem__(self, item_id: str) -> Item:
        return self._items[item_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Catalog({len(self)} items)"

    @property
    def items_list(self) -> tuple[Item, ...]:
        return tuple(self._items.values())

    @property
    def categories(self) -> tuple[str, ...]:
        """Distinct categories, sorted, so that seeded draws from them are reproducible."""
        return tuple(sorted({i.category for i in self._items.values() if i.category is not None}))

    def by_category(self, category: str) -> tuple[Item, ...]:
        return tuple(i for i in self._items.values() if i.category == category)


@dataclass(frozen=True)
class EvalCase:
    """A user history and the item recommended to that user: one unit of evaluation."""

    history: UserHistory
    item: Item

    @property
    def user_id(self) -> str:
        return self.history.user_id

    @property
    def item_id(self) -> str:
        return self.item.item_id


@dataclass(frozen=True)
class Dataset:
    """A catalog, every user's history and the evaluation cases drawn from them."""

    catalog: Catalog
    histories: Mapping[str, UserHistory]
    cases: tuple[EvalCase, ...]
    name: str = "dataset"


# ---------------------------------------------------------------------------------------------------------
# File formats: constants
# ---------------------------------------------------------------------------------------------------------

DEFAULT_SEED = 2601
"""The seed of the default synthetic dataset and of every seeded draw in this module (the paper's id)."""

USER_FIELDS: tuple[str, ...] = ("user_id", "interactions")
INTERACTION_FIELDS: tuple[str, ...] = ("item_id", "category", "timestamp", "rating", "title", "features")
ITEM_FIELDS: tuple[str, ...] = ("item_id", "title", "category", "features")
CASE_FIELDS: tuple[str, ...] = ("user_id", "item_id")
HISTORY_CSV_COLUMNS: tuple[str, ...] = ("user_id", *INTERACTION_FIELDS)

SUPPORTED_EXTENSIONS: tuple[str, ...] = (".json", ".jsonl", ".yaml", ".yml", ".csv")
HISTORIES_FILE = "histories.json"
CATALOG_FILE = "catalog.json"
CASES_FILE = "cases.json"

PathLike: TypeAlias = "str | os.PathLike[str]"


# ---------------------------------------------------------------------------------------------------------
# Reading files into located records
# ---------------------------------------------------------------------------------------------------------


class _Where(NamedTuple):
    """Where a value came from, so that every error names the file, the record and the field."""

    source: str
    record: str | None = None

    def at(self, record: str) -> _Where:
        return _Where(self.source, record)

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(message, source=self.source, record=self.record, field=field)


class _Record(NamedTuple):
    """One top-level record of a file (a user, an item, a case, a CSV row) and its location."""

    loc: str  # "index 3", "line 7"
    value: Any


def _extension(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        shown = f"'{ext}'" if ext else "no extension"
        raise DataError(f"unsupported file type ({shown}); use one of {', '.join(SUPPORTED_EXTENSIONS)}",
                        source=str(path))
    return ext


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # -sig: spreadsheet exports often start with a BOM
    except FileNotFoundError:
        raise DataError("file not found", source=str(path)) from None
    except IsADirectoryError:
        raise DataError("is a directory, expected a file", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text (bad byte at offset {exc.start})", source=str(path)) from None
    except OSError as exc:
        raise DataError(f"cannot read file: {exc.strerror or exc}", source=str(path)) from None


def _parse_json(text: str, where: _Where) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise where.at(f"line {exc.lineno}").error(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise where.error("invalid JSON: nested too deeply") from None


def _parse_yaml(text: str, where: _Where) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise where.error("invalid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if mark is None:
            raise where.error(f"invalid YAML: {problem}") from None
        raise where.at(f"line {mark.line + 1}").error(
            f"invalid YAML: {problem} (column {mark.column + 1})") from None


def _document_records(path: Path, ext: str, key: str) -> list[_Record]:
    """Records of a JSON or YAML document: ``{key: [...]}`` or a bare list."""
    where = _Where(str(path))
    text = _read_text(path)
    doc = _parse_json(text, where) if ext == ".json" else _parse_yaml(text, where)
    if isinstance(doc, Mapping):
        unknown = [str(k) for k in doc if k != key]
        if unknown:
            raise where.error(f"unknown top-level key(s) {', '.join(map(repr, unknown))}; "
                              f"expected {{{key!r}: [...]}} or a bare list")
        if key not in doc:
            raise where.error(f"missing top-level key {key!r}")
        doc = doc[key]
    if doc is None:
        raise where.error(f"empty file: no {key}")
    if not isinstance(doc, list):
        raise where.error(f"expected a list of {key} (or {{{key!r}: [...]}}), got {_kind(doc)}")
    return [_Record(f"index {i}", value) for i, value in enumerate(doc)]


def _jsonl_records(path: Path) -> list[_Record]:
    where = _Where(str(path))
    records = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue  # blank lines (a trailing newline, spacing) are not records
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise where.at(f"line {lineno}").error(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        records.append(_Record(f"line {lineno}", value))
    return records


def _csv_header_fields(header: list[str], allowed: tuple[str, ...], columns: Mapping[str, str] | None,
                       where: _Where) -> list[str]:
    """Map each CSV header cell to the field it holds (``columns`` maps field -> header name)."""
    mapping = dict(columns or {})
    for name, header_name in mapping.items():
        if name not in allowed:
            raise ConfigError(f"columns: unknown field {name!r} for {where.source}; "
                              f"allowed fields: {', '.join(allowed)}")
        if not isinstance(header_name, str):
            raise ConfigError(f"columns[{name!r}] must be a column name (a string), got {header_name!r}")
    by_header = {header_name: name for name, header_name in mapping.items()}
    fields: list[str] = []
    for cell in header:
        name = by_header.get(cell, cell)
        if name not in allowed or (cell not in by_header and name in mapping):
            hint = " (rename with columns={field: column})"
            raise where.at("line 1").error(f"unknown column {cell!r}; allowed columns: "
                                           f"{', '.join(mapping.get(f, f) for f in allowed)}{hint}", cell)
        if name in fields:
            raise where.at("line 1").error(f"column for field {name!r} appears twice", cell)
        fields.append(name)
    return fields


def _csv_records(path: Path, allowed: tuple[str, ...], required: tuple[str, ...],
                 columns: Mapping[str, str] | None) -> list[_Record]:
    """One record per CSV row: a dict of field -> cell, with empty cells left out."""
    import csv
    import io

    where = _Where(str(path))
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise where.error("empty file: no header row")
        fields = _csv_header_fields([h.strip() for h in header], allowed, columns, where)
        for name in required:
            if name not in fields:
                column = (columns or {}).get(name, name)
                raise where.at("line 1").error(f"missing column {column!r} (header: {', '.join(header)})",
                                               name)
        records = []
        for row in reader:
            loc = f"line {reader.line_num}"
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(fields):
                raise where.at(loc).error(f"{len(row)} cells but the header has {len(fields)} columns")
            cells = {f: c.strip() for f, c in zip(fields, row, strict=True) if c.strip()}
            records.append(_Record(loc, cells))
        return records
    except csv.Error as exc:
        raise where.at(f"line {reader.line_num}").error(f"invalid CSV: {exc}") from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), f"a {type(value).__name__}")


# ---------------------------------------------------------------------------------------------------------
# Field values
# ---------------------------------------------------------------------------------------------------------


def _check_fields(obj: Any, allowed: tuple[str, ...], where: _Where, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise where.error(f"expected {what} object, got {_kind(obj)}")
    for key in obj:
        if key not in allowed:
            raise where.error(f"unknown field; allowed fields: {', '.join(allowed)}", str(key))
    return obj


def _as_id(value: Any, where: _Where, field: str) -> str:
    # Integer ids are common (MovieLens, YAML turns 42 into an int); they name the same thing as "42".
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise where.error(f"expected a string or integer id, got {_kind(value)}", field)
    text = str(value).strip()
    if not text:
        raise where.error("empty id", field)
    return text


def _required_id(obj: Mapping[str, Any], where: _Where, field: str) -> str:
    if obj.get(field) is None:
        raise where.error(f"missing {field}", field)
    return _as_id(obj[field], where, field)


def _as_opt_str(value: Any, where: _Where, field: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise where.error(f"expected text, got {_kind(value)}", field)
    return str(value)


def _as_rating(value: Any, where: _Where) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise where.error("expected a number, got a boolean", "rating")
    try:
        rating = float(value)
    except (TypeError, ValueError):
        raise where.error(f"not a number: {value!r}", "rating") from None
    if not math.isfinite(rating):
        raise where.error(f"not a finite number: {value!r}", "rating")
    return rating


def parse_timestamp(value: Any) -> int:
    """Epoch seconds (UTC) from an int/float epoch, a numeric string or an ISO-8601 string or date.

    Naive ISO times are taken as UTC. Raises ``ValueError`` (with the reason) on anything else.
    """
    return _in_range(_parse_timestamp(value))


# Epoch seconds from 1900 to 2200: wide enough for any real history, narrow enough to catch milliseconds
# (1.7e12 today), which would otherwise load and then break date formatting far downstream.
_EPOCH_RANGE = (-2_208_988_800, 7_258_118_400)


def _in_range(seconds: int) -> int:
    low, high = _EPOCH_RANGE
    if not low <= seconds <= high:
        hint = " (it looks like milliseconds: divide by 1000)" if 1e11 < abs(seconds) < 1e14 else ""
        raise ValueError(f"timestamp {seconds} is outside 1900–2200 in epoch seconds{hint}")
    return seconds


def _parse_timestamp(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected epoch seconds or an ISO-8601 string, got a boolean")
    if isinstance(value, (int, float)):
        return _epoch_from_number(float(value)) if isinstance(value, float) else value
    if isinstance(value, datetime):  # YAML parses unquoted ISO timestamps itself
        return _epoch_from_datetime(value)
    if isinstance(value, date):
        return _epoch_from_datetime(datetime(value.year, value.month, value.day))
    if not isinstance(value, str):
        raise ValueError(f"expected epoch seconds or an ISO-8601 string, got {_kind(value)}")
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return _epoch_from_number(float(text))
    except ValueError:
        pass
    # Python 3.10's fromisoformat does not know the "Z" suffix.
    iso = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
    try:
        return _epoch_from_datetime(datetime.fromisoformat(iso))
    except ValueError:
        raise ValueError(f"not epoch seconds or an ISO-8601 date/time: {value!r}") from None


def _epoch_from_number(number: float) -> int:
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {number!r}")
    return math.floor(number)


def _epoch_from_datetime(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return math.floor(moment.timestamp())


def _as_timestamp(value: Any, where: _Where) -> int | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise where.error(str(exc), "timestamp") from None


def _as_features(value: Any, where: _Where) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):  # the CSV form: a JSON object in one cell
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise where.error(f"invalid JSON object: {exc.msg}", "features") from None
    if not isinstance(value, Mapping):
        raise where.error(f"expected an object of named features, got {_kind(value)}", "features")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise where.error(f"feature names must be strings, got {bad[0]!r}", "features")
    return dict(value)


def _interaction_from(obj: Any, where: _Where, allowed: tuple[str, ...] = INTERACTION_FIELDS) -> Interaction:
    obj = _check_fields(obj, allowed, where, "an interaction")
    return Interaction(
        item_id=_required_id(obj, where, "item_id"),
        category=_as_opt_str(obj.get("category"), where, "category"),
        timestamp=_as_timestamp(obj.get("timestamp"), where),
        rating=_as_rating(obj.get("rating"), where),
        title=_as_opt_str(obj.get("title"), where, "title"),
        features=_as_features(obj.get("features"), where),
    )


def _item_from(obj: Any, where: _Where) -> Item:
    obj = _check_fields(obj, ITEM_FIELDS, where, "an item")
    return Item(
        item_id=_required_id(obj, where, "item_id"),
        title=_as_opt_str(obj.get("title"), where, "title"),
        category=_as_opt_str(obj.get("category"), where, "category"),
        features=_as_features(obj.get("features"), where),
    )


def history_from(data: UserHistory | Iterable[Any], user_id: str = "user") -> UserHistory:
    """A :class:`UserHistory` from the record itself or plain data: a list of interaction dicts
    (``item_id`` required; ``category``, ``timestamp``, ``rating``, ``title``, ``features`` optional), or
    a dict with ``user_id`` and ``interactions``. Checked like a data file (``DataError`` names the field)."""
    if isinstance(data, UserHistory):
        return data
    where = _Where("<python data>")
    if isinstance(data, Mapping):
        obj = _check_fields(data, USER_FIELDS, where, "a user history")
        user_id = _required_id(obj, where, "user_id")
        data = obj.get("interactions") or []
    rows = list(data)
    return UserHistory(str(user_id), tuple(
        i if isinstance(i, Interaction) else _interaction_from(i, where.at(f"interaction {n}"))
        for n, i in enumerate(rows)))


def item_from(data: Item | Mapping[str, Any]) -> Item:
    """An :class:`Item` from the record itself or a dict (``item_id`` required)."""
    return data if isinstance(data, Item) else _item_from(data, _Where("<python data>"))


def catalog_from(data: Catalog | Mapping[str, Any] | Iterable[Any]) -> Catalog:
    """A :class:`Catalog` from the record, a dict ``item_id -> item dict`` or a list of item dicts."""
    if isinstance(data, Catalog):
        return data
    if isinstance(data, Mapping):
        return Catalog(_keyed_item(str(k), v) for k, v in data.items())
    rows: list[Any] = list(data)
    return Catalog(item_from(v) for v in rows)


def _keyed_item(item_id: str, value: Any) -> Item:
    if isinstance(value, Item):
        return value
    if not isinstance(value, Mapping):
        raise DataError(f"expected an item dict for {item_id!r}, got {type(value).__name__}",
                        source="<python data>", record=f"item {item_id!r}")
    return item_from(value if "item_id" in value else {"item_id": item_id, **value})


def _in_time_order(interactions: Iterable[Interaction]) -> tuple[Interaction, ...]:
    """Oldest first when every interaction has a timestamp (stable); otherwise the given order."""
    items = tuple(interactions)
    if all(i.timestamp is not None for i in items):
        return tuple(sorted(items, key=lambda i: i.timestamp or 0))
    return items


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
    ext = _extension(file)
    if ext == ".csv":
        histories = _histories_from_rows(file, columns)
    else:
        _no_columns(columns, file)
        records = _jsonl_records(file) if ext == ".jsonl" else _document_records(file, ext, "users")
        histories = _histories_from_records(file, records)
    if not histories:
        raise DataError("no users in the file", source=str(file))
    return histories


def _no_columns(columns: Mapping[str, str] | None, file: Path) -> None:
    if columns:
        raise ConfigError(f"columns= maps CSV column names; {file} is not a CSV file")


def _histories_from_records(file: Path, records: list[_Record]) -> dict[str, UserHistory]:
    histories: dict[str, UserHistory] = {}
    first_seen: dict[str, str] = {}
    for record in records:
        where = _Where(str(file), record.loc)
        obj = _check_fields(record.value, USER_FIELDS, where, "a user")
        user_id = _required_id(obj, where, "user_id")
        where = where.at(f"user {user_id!r} ({record.loc})")
        if user_id in histories:
            raise where.error(f"duplicate user id (first at {first_seen[user_id]})", "user_id")
        raw = obj.get("interactions")
        if raw is None:
            raise where.error("missing interactions", "interactions")
        if not isinstance(raw, list):
            raise where.error(f"expected a list of interactions, got {_kind(raw)}", "interactions")
        if not raw:
            raise where.error("empty history: a user needs at least one interaction", "interactions")
        interactions = [_interaction_from(entry, where.at(f"{where.record}, interaction index {i}"))
                        for i, entry in enumerate(raw)]
        histories[user_id] = UserHistory(user_id, _in_time_order(interactions))
        first_seen[user_id] = record.loc
    return histories


def _histories_from_rows(file: Path, columns: Mapping[str, str] | None) -> dict[str, UserHistory]:
    # A user's rows need not be contiguous: rows are grouped by user id, in order of first appearance.
    grouped: dict[str, list[Interaction]] = {}
    for record in _csv_records(file, HISTORY_CSV_COLUMNS, ("user_id", "item_id"), columns):
        where = _Where(str(file), record.loc)
        user_id = _required_id(record.value, where, "user_id")
        where = where.at(f"{record.loc} (user {user_id!r})")
        fields = {k: v for k, v in record.value.items() if k != "user_id"}
        grouped.setdefault(user_id, []).append(_interaction_from(fields, where))
    return {uid: UserHistory(uid, _in_time_order(rows)) for uid, rows in grouped.items()}


def load_catalog(path: PathLike, *, columns: Mapping[str, str] | None = None) -> Catalog:
    """The item catalog from a JSON, YAML, JSONL or CSV file.

    JSON/YAML: ``{"items": [{"item_id", "title", "category", "features"}, ...]}`` or the bare list; JSONL:
    one item per line; CSV: one item per row (``features`` as a JSON object in its cell; ``columns`` as for
    :func:`load_histories`). Duplicate item ids are an error.
    """
    file = Path(path)
    ext = _extension(file)
    if ext == ".csv":
        records = _csv_records(file, ITEM_FIELDS, ("item_id",), columns)
    else:
        _no_columns(columns, file)
        records = _jsonl_records(file) if ext == ".jsonl" else _document_records(file, ext, "items")
    items: dict[str, Item] = {}
    first_seen: dict[str, str] = {}
    for record in records:
        where = _Where(str(file), record.loc)
        item = _item_from(record.value, where)
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
    ext = _extension(file)
    if ext == ".csv":
        records = _csv_records(file, CASE_FIELDS, CASE_FIELDS, None)
    else:
        records = _jsonl_records(file) if ext == ".jsonl" else _document_records(file, ext, "cases")
    cases: list[EvalCase] = []
    seen: dict[tuple[str, str], str] = {}
    for record in records:
        where = _Where(str(file), f"case {record.loc}")
        obj = _check_fields(record.value, CASE_FIELDS, where, "a case")
        user_id = _required_id(obj, where, "user_id")
        item_id = _required_id(obj, where, "item_id")
        where = where.at(f"case {record.loc} (user {user_id!r}, item {item_id!r})")
        cases.append(_case(histories, catalog, user_id, item_id, where))
        if (user_id, item_id) in seen:
            raise where.error(f"duplicate case (first at {seen[user_id, item_id]})")
        seen[user_id, item_id] = record.loc
    if not cases:
        raise DataError("no cases in the file", source=str(file))
    return tuple(cases)


def _case(histories: Mapping[str, UserHistory], catalog: Catalog, user_id: str, item_id: str,
          where: _Where) -> EvalCase:
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
    _check_count(n_cases, "n_cases")
    rand = _Rand(seed, _STREAM_CASES)
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


def _unseen_item(history: UserHistory, catalog: Catalog, rand: _Rand) -> Item | None:
    seen = set(history.item_ids)
    for category in category_counts(history, catalog):
        candidates = [item for item in catalog.by_category(category) if item.item_id not in seen]
        if candidates:
            return rand.choice(candidates)
    rest = [item for item in catalog.items_list if item.item_id not in seen]
    return rand.choice(rest) if rest else None


def _check_count(value: int | None, name: str, minimum: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


# ---------------------------------------------------------------------------------------------------------
# Datasets: load, save, directories
# ---------------------------------------------------------------------------------------------------------


def load_dataset(histories: PathLike | Mapping[str, UserHistory], catalog: PathLike | Catalog,
                 cases: PathLike | None = None, *, n_cases: int | None = None, seed: int = DEFAULT_SEED,
                 name: str | None = None) -> Dataset:
    """A dataset from a histories file and a catalog file (or already loaded ones) and optional cases.

    Interactions missing a title or category take them from the catalog entry of the same item (the
    catalog is where item metadata lives; the model should not see "unknown" for a known item). Without a
    cases file, cases are drawn with :func:`draw_cases` (``n_cases`` users, ``seed``); with one,
    ``n_cases`` keeps the first ``n_cases`` cases of the file.
    """
    _check_count(n_cases, "n_cases")
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


# ---------------------------------------------------------------------------------------------------------
# Seeded randomness
# ---------------------------------------------------------------------------------------------------------

# Independent streams of one seed: changing, say, the number of users must not change the items.
_STREAM_ITEMS, _STREAM_USERS, _STREAM_CASES, _STREAM_SAMPLE = 0, 1, 2, 3


class _Rand:
    """Draws built only on ``Generator.random()``.

    numpy promises a stable bit stream per seed but not stable algorithms for ``choice``, ``normal``,
    ``permutation``...; the committed fixture must never drift with a numpy upgrade, so every distribution
    here is written out from uniform doubles.
    """

    def __init__(self, seed: int, stream: int) -> None:
        import numpy as np

        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
        self._generator = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream,)))

    def random(self) -> float:
        """Uniform on [0, 1)."""
        return float(self._generator.random())

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def integer(self, low: int, high: int) -> int:
        """Uniform on ``low..high`` inclusive."""
        return low + min(int(self.random() * (high - low + 1)), high - low)

    def normal(self, mean: float, sd: float) -> float:
        # Box–Muller; 1 - u is in (0, 1], so the logarithm is finite.
        radius = math.sqrt(-2.0 * math.log(1.0 - self.random()))
        return mean + sd * radius * math.cos(2.0 * math.pi * self.random())

    def choice(self, options: Sequence[_T]) -> _T:
        return options[self.integer(0, len(options) - 1)]

    def sample(self, options: Iterable[_T], k: int) -> list[_T]:
        """``k`` distinct elements in random order (a partial Fisher–Yates shuffle)."""
        pool = list(options)
        for i in range(min(k, len(pool))):
            j = self.integer(i, len(pool) - 1)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]


# ---------------------------------------------------------------------------------------------------------
# MovieLens
# ---------------------------------------------------------------------------------------------------------

_NO_GENRES = "(no genres listed)"
_YEAR = re.compile(r"\((\d{4})\)\s*$")


def load_movielens(directory: PathLike, *, max_users: int | None = None, min_ratings: int = 10,
                   max_history: int | None = 50, n_cases: int | None = None,
                   seed: int = DEFAULT_SEED) -> Dataset:
    """A dataset from a MovieLens directory (``ratings.csv`` and ``movies.csv``, ml-latest format).

    Items are the movies: the category is the first listed genre, ``features["genres"]`` the full list and
    ``features["year"]`` the year in the title when there is one. Users with fewer than ``min_ratings``
    ratings are dropped; ``max_users`` keeps a seeded sample of the rest (file order kept); each history is
    the user's ``max_history`` most recent ratings, oldest first. Each kept user (or a seeded sample of
    ``n_cases`` of them) gets one case: a movie they have never rated that has their most frequent genre,
    drawn with probability proportional to its number of ratings (a recommender suggests known films, and
    the model can say something about them).
    """
    _check_count(max_users, "max_users")
    _check_count(min_ratings, "min_ratings")
    _check_count(max_history, "max_history")
    _check_count(n_cases, "n_cases")
    root = Path(directory)
    catalog = _movielens_movies(root / "movies.csv")
    ratings = _movielens_ratings(root / "ratings.csv", catalog)
    eligible = [uid for uid, rows in ratings.items() if len(rows) >= min_ratings]
    if not eligible:
        raise DataError(f"no user has at least min_ratings={min_ratings} ratings",
                        source=str(root / "ratings.csv"))
    if max_users is not None and max_users < len(eligible):
        keep = set(_Rand(seed, _STREAM_SAMPLE).sample(eligible, max_users))
        eligible = [uid for uid in eligible if uid in keep]
    histories = {uid: _movielens_history(uid, ratings[uid], max_history) for uid in eligible}
    case_users = eligible
    if n_cases is not None:
        if n_cases > len(eligible):
            raise ConfigError(f"n_cases={n_cases} but only {len(eligible)} MovieLens users are kept")
        keep = set(_Rand(seed, _STREAM_SAMPLE + 1).sample(eligible, n_cases))
        case_users = [uid for uid in eligible if uid in keep]
    cases = _movielens_cases(case_users, histories, ratings, catalog, seed)
    return Dataset(catalog=catalog, histories=MappingProxyType(histories), cases=cases,
                   name=f"movielens:{root.resolve().name}")


def _movielens_movies(path: Path) -> Catalog:
    items = []
    seen: set[str] = set()
    for lineno, (movie_id, title, genre_list) in _csv_rows(path, ("movieId", "title", "genres")):
        where = _Where(str(path), f"line {lineno}")
        movie_id = _as_id(movie_id, where, "movieId")
        if movie_id in seen:
            raise where.error("duplicate movieId", "movieId")
        seen.add(movie_id)
        genres = [g for g in genre_list.split("|") if g and g != _NO_GENRES]
        features: dict[str, Any] = {"genres": genres}
        match = _YEAR.search(title)
        if match:
            features["year"] = int(match.group(1))
        items.append(Item(movie_id, title=title.strip() or None, category=genres[0] if genres else None,
                          features=features))
    if not items:
        raise DataError("no movies", source=str(path))
    return Catalog(items)


def _movielens_ratings(path: Path, catalog: Catalog) -> dict[str, list[Interaction]]:
    by_user: dict[str, list[Interaction]] = {}
    for lineno, cells in _csv_rows(path, ("userId", "movieId", "rating", "timestamp")):
        user_id, movie_id, rating, timestamp = cells
        try:
            # The fast path: 100k rows of plain numbers. Anything unusual takes the validating path.
            value = float(rating)
            interaction = catalog[movie_id].as_interaction(timestamp=int(timestamp), rating=value)
            if not user_id or not math.isfinite(value):
                raise ValueError(user_id)
        except (KeyError, ValueError):
            user_id, interaction = _movielens_rating_slow(cells, catalog, _Where(str(path), f"line {lineno}"))
        by_user.setdefault(user_id, []).append(interaction)
    if not by_user:
        raise DataError("no ratings", source=str(path))
    return by_user


def _movielens_rating_slow(cells: tuple[str, ...], catalog: Catalog,
                           where: _Where) -> tuple[str, Interaction]:
    user_id = _as_id(cells[0], where, "userId")
    movie_id = _as_id(cells[1], where, "movieId")
    if movie_id not in catalog:
        raise where.error(f"movie {movie_id!r} is not in movies.csv", "movieId")
    rating = _as_rating(cells[2] or None, where)
    timestamp = _as_timestamp(cells[3] or None, where)
    return user_id, catalog[movie_id].as_interaction(timestamp=timestamp, rating=rating)


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """(line number, cells of the ``required`` columns) of a fixed-format CSV file; other columns ignored."""
    import csv
    import io

    where = _Where(str(path))
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    try:
        header = [h.strip() for h in next(reader, [])]
        missing = [name for name in required if name not in header]
        if missing:
            raise where.at("line 1").error(
                f"missing column(s) {', '.join(missing)} (header: {', '.join(header)})", missing[0])
        pick = operator.itemgetter(*(header.index(name) for name in required))
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise where.at(f"line {reader.line_num}").error(
                    f"{len(row)} cells but the header has {len(header)} columns")
            yield reader.line_num, pick(row)
    except csv.Error as exc:
        raise where.at(f"line {reader.line_num}").error(f"invalid CSV: {exc}") from None


def _movielens_history(user_id: str, rows: list[Interaction], max_history: int | None) -> UserHistory:
    ordered = _in_time_order(rows)
    if max_history is not None:
        ordered = ordered[-max_history:]  # the most recent ones: what a recommender would condition on
    return UserHistory(user_id, ordered)


def _movielens_cases(users: list[str], histories: Mapping[str, UserHistory],
                     ratings: Mapping[str, list[Interaction]], catalog: Catalog,
                     seed: int) -> tuple[EvalCase, ...]:
    import numpy as np

    movies = catalog.items_list
    index = {item.item_id: i for i, item in enumerate(movies)}
    popularity = np.ones(len(movies), dtype=np.int64)  # +1: a never-rated movie stays possible, if unlikely
    for rows in ratings.values():
        for row in rows:
            popularity[index[row.item_id]] += 1
    by_genre: dict[str, list[int]] = {}
    for i, item in enumerate(movies):
        for genre in item.features["genres"]:
            by_genre.setdefault(genre, []).append(i)
    pools = {genre: np.array(members, dtype=np.int64) for genre, members in by_genre.items()}
    everything = np.arange(len(movies), dtype=np.int64)
    rand = _Rand(seed, _STREAM_CASES)
    cases = []
    for user_id in users:
        rated = np.array(sorted({index[row.item_id] for row in ratings[user_id]}), dtype=np.int64)
        # The user's genres from most to least frequent, then the whole catalog as a last resort.
        ranked = [pools[g] for g in _genre_ranking(histories[user_id])] + [everything]
        chosen = _popular_unrated(ranked, rated, popularity, rand)
        if chosen is None:
            raise DataError(f"user {user_id!r} has rated every movie; no case can be drawn")
        cases.append(EvalCase(histories[user_id], movies[chosen]))
    return tuple(cases)


def _genre_ranking(history: UserHistory) -> list[str]:
    counts: dict[str, int] = {}
    for interaction in history:
        for genre in interaction.features.get("genres", ()):
            counts[genre] = counts.get(genre, 0) + 1
    return [g for g, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _popular_unrated(pools: Iterable[Any], rated: Any, popularity: Any, rand: _Rand) -> int | None:
    """Index of a movie from the first pool with unrated movies, drawn in proportion to its popularity."""
    import numpy as np

    for pool in pools:
        candidates = pool[~np.isin(pool, rated, assume_unique=True)]
        if candidates.size:
            # Integer running sums are exact, so the draw is the same on every platform.
            cumulative = np.cumsum(popularity[candidates])
            target = rand.random() * float(cumulative[-1])
            return int(candidates[int(np.searchsorted(cumulative, target, side="right"))])
    return None


# ---------------------------------------------------------------------------------------------------------
# The synthetic e-commerce dataset of the paper (§4.1)
# ---------------------------------------------------------------------------------------------------------


class _CategoryVocabulary(NamedTuple):
    products: tuple[str, ...]
    brands: tuple[str, ...]
    attributes: tuple[str, ...]
    median_price: float
    price_spread: float  # sd of log(price)


_NAME_WORDS: tuple[str, ...] = (
    "Aurora", "Nimbus", "Vertex", "Solace", "Ember", "Lumen", "Nova", "Summit", "Harbor", "Cedar", "Echo",
    "Zephyr", "Atlas", "Willow", "Orbit", "Maple", "Crest", "Halo", "Tidal", "Sierra", "Juniper", "Cobalt",
    "Meadow", "Pulse",
)

SYNTHETIC_CATEGORIES: Mapping[str, _CategoryVocabulary] = MappingProxyType({
    "Electronics": _CategoryVocabulary(
        ("Wireless Earbuds", "Bluetooth Speaker", "Smartwatch", "Noise-Cancelling Headphones",
         "Portable Charger", "Mechanical Keyboard", "USB-C Hub", "4K Webcam", "E-Reader", "Fitness Tracker",
         "Wireless Mouse", "Soundbar"),
        ("Voltix", "Sonora", "Kestrel Labs", "Pixelwave", "Arcline"),
        ("bluetooth 5.3", "fast charging", "water-resistant", "active noise cancelling", "30-hour battery",
         "USB-C", "compact design", "voice assistant support", "aluminium body", "wireless charging"),
        79.0, 0.6),
    "Fashion": _CategoryVocabulary(
        ("Denim Jacket", "Linen Shirt", "Leather Belt", "Wool Scarf", "Running Sneakers", "Chino Trousers",
         "Silk Blouse", "Rain Coat", "Knit Sweater", "Canvas Tote", "Ankle Boots", "Sunglasses"),
        ("Maison Vela", "Norththread", "Atelier Rue", "Kindred Cloth", "Sable & Co"),
        ("organic cotton", "slim fit", "water-repellent", "machine washable", "recycled materials", "unisex",
         "breathable", "handmade", "limited edition", "vegan leather"),
        55.0, 0.5),
    "Home": _CategoryVocabulary(
        ("Ceramic Vase", "Table Lamp", "Throw Blanket", "Cast Iron Skillet", "French Press", "Scented Candle",
         "Storage Basket", "Wall Clock", "Bamboo Cutting Board", "Linen Duvet Cover", "Air Purifier",
         "Spice Rack"),
        ("Hearthly", "Oakmere", "Casa Lumen", "Nestwell", "Fernhouse"),
        ("dishwasher safe", "handcrafted", "energy efficient", "sustainable wood", "minimalist design",
         "easy to clean", "space saving", "non-toxic", "heat resistant", "set of two"),
        45.0, 0.6),
    "Beauty": _CategoryVocabulary(
        ("Hydrating Serum", "Vitamin C Cream", "Clay Face Mask", "Lip Balm Set", "Hair Repair Oil",
         "Mineral Sunscreen", "Eau de Parfum", "Night Cream", "Exfoliating Scrub", "Makeup Brush Set",
         "Micellar Water", "Eyeshadow Palette"),
        ("Lumiere Botanics", "Dewpoint", "Velvet Fern", "Pura Skin", "Solstice Labs"),
        ("fragrance-free", "vegan", "cruelty-free", "for sensitive skin", "SPF 50", "hyaluronic acid",
         "dermatologist tested", "paraben-free", "travel size", "refillable"),
        28.0, 0.5),
    "Sports": _CategoryVocabulary(
        ("Yoga Mat", "Trail Running Shoes", "Resistance Bands", "Cycling Helmet", "Insulated Water Bottle",
         "Tennis Racket", "Hiking Backpack", "Adjustable Dumbbells", "Jump Rope", "Foam Roller",
         "Swim Goggles", "Camping Tent"),
        ("Peakform", "Stridewell", "Ridgeline", "Tempo Athletics", "Bluefin Outdoors"),
        ("lightweight", "non-slip", "breathable mesh", "adjustable", "waterproof", "shock absorbing",
         "foldable", "high-density foam", "reflective details", "quick-dry"),
        45.0, 0.7),
    "Books": _CategoryVocabulary(
        ("Mystery Novel", "Cookbook", "Travel Guide", "Science Fiction Saga", "Biography",
         "Poetry Collection", "Fantasy Epic", "History of Science", "Self-Help Guide", "Graphic Novel",
         "Thriller", "Short Story Collection"),
        ("Quillstone Press", "Harbor House Books", "Lantern Publishing", "Wrenfield", "Northlight Editions"),
        ("hardcover", "paperback", "bestseller", "illustrated", "award-winning", "first edition",
         "large print", "annotated", "400 pages", "book club pick"),
        18.0, 0.4),
    "Toys": _CategoryVocabulary(
        ("Building Blocks Set", "Plush Bear", "Remote Control Car", "Jigsaw Puzzle", "Wooden Train Set",
         "Science Kit", "Board Game", "Art and Craft Kit", "Dollhouse", "Marble Run", "Stunt Kite",
         "Magnetic Tiles"),
        ("Brightbloom", "Tinker Tales", "Pebble & Pine", "Wonderloop", "Jolly Otter"),
        ("ages 3+", "collectible", "STEM learning", "non-toxic paint", "battery operated", "educational",
         "eco-friendly", "award-winning design", "family game", "wooden"),
        32.0, 0.5),
})
"""The paper's seven categories, each with the words its synthetic titles and features are made of."""

_SYNTHETIC_START = 1704067200  # 2024-01-01T00:00:00Z
_HOUR, _DAY = 3600, 86400


def generate_synthetic(seed: int = DEFAULT_SEED, *, n_items: int = 200, n_users: int = 100, n_cases: int = 20,
                       min_len: int = 10, max_len: int = 50) -> Dataset:
    """The synthetic e-commerce dataset of the paper, fully determined by ``seed``.

    ``n_items`` items spread evenly over the seven categories of :data:`SYNTHETIC_CATEGORIES`, each with a
    title ("Aurora Wireless Earbuds"), a brand, a price and a few attributes. ``n_users`` users with
    ``min_len``–``max_len`` interactions of distinct items; each user prefers one or two *dominant*
    categories, which hold more interactions than any other category and get higher ratings (1–5 in half
    steps). Timestamps start in 2024 and increase strictly, with log-normal gaps of hours to weeks.
    ``n_cases`` sampled users each get a case: an item of a dominant category they have not interacted
    with. Items are ``I001``…, users ``U001``…; ids carry no category, so hiding a category hides it.
    """
    _check_count(n_items, "n_items", len(SYNTHETIC_CATEGORIES) * 2)
    _check_count(n_users, "n_users")
    _check_count(n_cases, "n_cases")
    _check_count(min_len, "min_len")
    _check_count(max_len, "max_len", min_len)
    if n_cases > n_users:
        raise ConfigError(f"n_cases={n_cases} is more than n_users={n_users}")
    items = _synthetic_items(_Rand(seed, _STREAM_ITEMS), n_items)
    catalog = Catalog(sorted(items, key=lambda item: item.item_id))
    by_category = {c: catalog.by_category(c) for c in SYNTHETIC_CATEGORIES}
    quality = _item_quality(catalog, _Rand(seed, _STREAM_ITEMS + 100))
    rand = _Rand(seed, _STREAM_USERS)
    histories: dict[str, UserHistory] = {}
    preferred: dict[str, tuple[str, ...]] = {}
    width = max(3, len(str(n_users)))
    for number in range(1, n_users + 1):
        user_id = f"U{number:0{width}d}"
        length = rand.integer(min_len, max_len)
        dominant = tuple(rand.sample(SYNTHETIC_CATEGORIES, rand.integer(1, 2 if length > 1 else 1)))
        histories[user_id] = _synthetic_history(user_id, dominant, length, by_category, quality, rand)
        preferred[user_id] = dominant
    cases = _synthetic_cases(histories, preferred, by_category, n_cases, _Rand(seed, _STREAM_CASES))
    return Dataset(catalog=catalog, histories=MappingProxyType(histories), cases=cases,
                   name=f"synthetic(seed={seed})")


@functools.cache
def default_dataset() -> Dataset:
    """The default synthetic dataset (seed 2601), built once per process; it is the committed fixture."""
    return generate_synthetic()


def _synthetic_items(rand: _Rand, n_items: int) -> list[Item]:
    categories = list(SYNTHETIC_CATEGORIES)
    base, extra = divmod(n_items, len(categories))
    per_category = [base + (i < extra) for i in range(len(categories))]
    width = max(3, len(str(n_items)))
    # Shuffled ids: I001 is not always Electronics, so an id never gives the category away.
    ids = rand.sample([f"I{n:0{width}d}" for n in range(1, n_items + 1)], n_items)
    items = []
    for category, count in zip(categories, per_category, strict=True):
        vocabulary = SYNTHETIC_CATEGORIES[category]
        pairs = [(name, product) for name in _NAME_WORDS for product in vocabulary.products]
        for name, product in rand.sample(pairs, count):  # distinct titles within a category
            price = math.exp(rand.normal(math.log(vocabulary.median_price), vocabulary.price_spread))
            features = {
                "brand": rand.choice(vocabulary.brands),
                "price": round(max(2.0, float(round(price))) - 0.01, 2),  # shop prices: 79 -> 78.99
                "attributes": rand.sample(vocabulary.attributes, rand.integer(2, 3)),
            }
            items.append(Item(ids.pop(), title=f"{name} {product}", category=category, features=features))
    return items


def _item_quality(catalog: Catalog, rand: _Rand) -> dict[str, float]:
    """A per-item rating offset: some products are simply better liked than others."""
    return {item_id: rand.normal(0.0, 0.35) for item_id in catalog}


def _category_counts(dominant: tuple[str, ...], length: int, sizes: Mapping[str, int],
                     rand: _Rand) -> dict[str, int]:
    """How many interactions fall in each category: dominant ones strictly ahead of every other one."""
    low, high = (0.5, 0.75) if len(dominant) == 1 else (0.6, 0.85)
    capacity = {c: sizes[c] - 1 for c in dominant}  # keep an unseen item per dominant category for a case
    in_dominant = min(max(round(length * rand.uniform(low, high)), len(dominant)), length)
    counts = dict.fromkeys(SYNTHETIC_CATEGORIES, 0)
    for i, category in enumerate(dominant):
        share = in_dominant // len(dominant) + (i < in_dominant % len(dominant))
        counts[category] = min(share, capacity[category])
    others = [c for c in SYNTHETIC_CATEGORIES if c not in dominant]
    for _ in range(length - sum(counts.values())):
        ceiling = min(counts[c] for c in dominant) - 1
        open_ = [c for c in others if counts[c] < min(ceiling, sizes[c])]
        if open_:
            counts[rand.choice(open_)] += 1
            continue
        # No other category may grow without catching up with a dominant one: grow a dominant one.
        room = [c for c in dominant if counts[c] < capacity[c]]
        if not room:
            raise ConfigError(f"cannot fit {length} distinct items into one history with "
                              f"{sum(sizes.values())} items; raise n_items or lower max_len")
        counts[min(room, key=lambda c: counts[c])] += 1
    return counts


def _synthetic_history(user_id: str, dominant: tuple[str, ...], length: int,
                       by_category: Mapping[str, tuple[Item, ...]], quality: Mapping[str, float],
                       rand: _Rand) -> UserHistory:
    counts = _category_counts(dominant, length, {c: len(v) for c, v in by_category.items()}, rand)
    picks = {c: rand.sample(by_category[c], n) for c, n in counts.items() if n}
    sequence = rand.sample([c for c, n in counts.items() for _ in range(n)], length)
    timestamp = _SYNTHETIC_START + rand.integer(0, 90 * _DAY)
    interactions = []
    for category in sequence:
        item = picks[category].pop()
        liked = category in dominant
        score = rand.normal(4.2 if liked else 3.0, 0.6 if liked else 0.85) + quality[item.item_id]
        rating = min(5.0, max(1.0, round(score * 2) / 2))
        interactions.append(Interaction(item.item_id, category=category, timestamp=timestamp, rating=rating,
                                        title=item.title))
        # Log-normal gaps, median about a day and a half: mostly hours to days, now and then weeks.
        gap = math.exp(rand.normal(math.log(1.5 * _DAY), 1.2))
        timestamp += int(min(max(gap, _HOUR), 42 * _DAY))
    return UserHistory(user_id, tuple(interactions))


def _synthetic_cases(histories: Mapping[str, UserHistory], preferred: Mapping[str, tuple[str, ...]],
                     by_category: Mapping[str, tuple[Item, ...]], n_cases: int,
                     rand: _Rand) -> tuple[EvalCase, ...]:
    users = list(histories)
    chosen = sorted(rand.sample(range(len(users)), n_cases))
    cases = []
    for index in chosen:
        history = histories[users[index]]
        seen = set(history.item_ids)
        category = rand.choice(preferred[history.user_id])
        unseen = [item for item in by_category[category] if item.item_id not in seen]
        cases.append(EvalCase(history, rand.choice(unseen)))  # never empty: _category_counts keeps one
    return tuple(cases)
