"""File formats: field and file names, reading files into located records, and checking field values.

Every malformed value raises one :class:`DataError` naming the file, the record and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

from ..errors import ConfigError, DataError
from ..sanitize import spelled_out
from ..yaml_limits import YamlTooLarge, check_expansion
from .ids import BLANK_LETTERS, escaped
from .records import Catalog, Interaction, Item, UserHistory

# ---------------------------------------------------------------------------------------------------------
# File formats: constants
# ---------------------------------------------------------------------------------------------------------

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


class Where(NamedTuple):
    """Where a value came from, so that every error names the file, the record and the field."""

    source: str
    record: str | None = None

    def at(self, record: str) -> Where:
        return Where(self.source, record)

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(message, source=self.source, record=self.record, field=field)


class Record(NamedTuple):
    """One top-level record of a file (a user, an item, a case, a CSV row) and its location."""

    loc: str  # "index 3", "line 7"
    value: Any


def extension(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        shown = f"'{ext}'" if ext else "no extension"
        raise DataError(f"unsupported file type ({shown}); use one of {', '.join(SUPPORTED_EXTENSIONS)}",
                        source=str(path))
    return ext


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # -sig: spreadsheet exports often start with a BOM
    except FileNotFoundError:
        raise DataError("file not found", source=str(path)) from None
    except IsADirectoryError:
        raise DataError("is a directory, expected a file", source=str(path)) from None
    except UnicodeDecodeError as exc:
        encoding = _bom_encoding(exc.object[:4])
        if encoding is not None:  # a spreadsheet's "Unicode text": its mark says what it is
            raise DataError(f"{encoding} text, not UTF-8 (its first bytes say so): save it as UTF-8",
                            source=str(path)) from None
        raise DataError(f"not UTF-8 text (bad byte at offset {exc.start})", source=str(path)) from None
    except OSError as exc:
        raise DataError(f"cannot read file: {exc.strerror or exc}", source=str(path)) from None


def _digits(exc: ValueError) -> str:
    """What Python's limit on long integers says of one, without its advice to raise the limit."""
    found = re.search(r"value has (\d+) digits", str(exc))
    return f"{int(found.group(1)):,} digits" if found else "over 4,300 digits"


def _bom_encoding(head: bytes) -> str | None:
    """The encoding a byte-order mark at the start of a file names, other than UTF-8's."""
    for mark, name in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                       (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
        if head.startswith(mark):
            return name
    return None


class _DuplicateKey(ValueError):
    """A JSON object that names one key twice (YAML files refuse that; JSON silently kept the last)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def loads(text: str) -> Any:
    """``json.loads`` that refuses an object naming a key twice (:class:`_DuplicateKey`)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def _parse_json(text: str, where: Where) -> Any:
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        raise where.at(f"line {exc.lineno}").error(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except _DuplicateKey as exc:
        raise where.error(f"invalid JSON: key {str(exc)!r} appears twice in one object; which one was meant "
                          "cannot be told") from None
    except RecursionError:
        raise where.error("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (Python's limit on int(str))
        raise where.error(f"invalid JSON: a number too long to read ({_digits(exc)})") from None


def _parse_yaml(text: str, where: Where) -> Any:
    import yaml  # lazy: loads yaml


    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        return loader.construct_document(node)
    except YamlTooLarge as exc:
        raise where.error(f"invalid data file: {exc}") from None
    except RecursionError:
        raise where.error("invalid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if mark is None:
            raise where.error(f"invalid YAML: {problem}") from None
        raise where.at(f"line {mark.line + 1}").error(
            f"invalid YAML: {problem} (column {mark.column + 1})") from None
    finally:
        loader.dispose()


def document_records(path: Path, ext: str, key: str) -> list[Record]:
    """Records of a JSON or YAML document: ``{key: [...]}`` or a bare list."""
    where = Where(str(path))
    text = read_text(path)
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
        raise where.error(f"expected a list of {key} (or {{{key!r}: [...]}}), got {kind(doc)}")
    return [Record(f"index {i}", value) for i, value in enumerate(doc)]


def jsonl_records(path: Path) -> list[Record]:
    where = Where(str(path))
    records = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue  # blank lines (a trailing newline, spacing) are not records
        try:
            value = loads(line)
        except json.JSONDecodeError as exc:
            raise where.at(f"line {lineno}").error(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        except _DuplicateKey as exc:
            raise where.at(f"line {lineno}").error(
                f"invalid JSON: key {str(exc)!r} appears twice in one object") from None
        except RecursionError:
            raise where.at(f"line {lineno}").error("invalid JSON: nested too deeply") from None
        except ValueError as exc:
            raise where.at(f"line {lineno}").error(
                f"invalid JSON: a number too long to read ({_digits(exc)})") from None
        records.append(Record(f"line {lineno}", value))
    return records


def _csv_header_fields(header: list[str], allowed: tuple[str, ...], columns: Mapping[str, str] | None,
                       where: Where) -> list[str]:
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


def csv_records(path: Path, allowed: tuple[str, ...], required: tuple[str, ...],
                 columns: Mapping[str, str] | None) -> list[Record]:
    """One record per CSV row: a dict of field -> cell, with empty cells left out."""
    where = Where(str(path))
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
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
            records.append(Record(loc, cells))
        return records
    except csv.Error as exc:
        raise where.at(f"line {reader.line_num}").error(f"invalid CSV: {exc}") from None


def kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), f"a {type(value).__name__}")


# ---------------------------------------------------------------------------------------------------------
# Field values
# ---------------------------------------------------------------------------------------------------------


def check_fields(obj: Any, allowed: tuple[str, ...], where: Where, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise where.error(f"expected {what} object, got {kind(obj)}")
    for key in obj:
        if key not in allowed:
            raise where.error(f"unknown field; allowed fields: {', '.join(allowed)}", str(key))
    return obj


def as_id(value: Any, where: Where, field: str) -> str:
    # Integer ids are common (MovieLens, YAML turns 42 into an int); they name the same thing as "42".
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise where.error(f"expected a string or integer id, got {kind(value)}", field)
    text = str(value).strip()
    if not text:
        raise where.error("empty id", field)
    # "::" may stay: ids such as "ml::42" exist, writers defuse it. Zero-width and other format characters
    # (U+200B, U+2060, U+FEFF) are spelled out too: "u\u200b1" prints as "u1" and is another user.
    shown = spelled_out(text, commands=True)
    blank = next((c for c in text if c in BLANK_LETTERS), None)
    if blank is not None:
        # Letters, not format characters, so no escape catches them: "u\u31641" prints as "u 1" or "u1".
        raise where.error(f"id '{escaped(text)}' holds U+{ord(blank):04X} {unicodedata.name(blank, '')}, "
                          "a character that prints as nothing; an id must be plain text", field)
    if shown != text:
        # An id travels into every report, test id, annotation and XML attribute: one that carries control,
        # line-break, bidi or zero-width characters is refused here, once, not trusted to every writer.
        raise where.error(f"id {shown!r} holds control, line-break, bidi or zero-width characters (shown "
                          "escaped); an id must be plain text", field)
    return text


def required_id(obj: Mapping[str, Any], where: Where, field: str) -> str:
    if obj.get(field) is None:
        raise where.error(f"missing {field}", field)
    return as_id(obj[field], where, field)


def _as_opt_str(value: Any, where: Where, field: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise where.error(f"expected text, got {kind(value)}", field)
    return str(value)


def as_rating(value: Any, where: Where) -> float | None:
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
    if abs(rating) > MAX_RATING:
        # 1e308 loaded and then overflowed the preference-polarity means to infinity.
        raise where.error(f"rating {value!r} is beyond ±{MAX_RATING:,.0f}; a rating is a point on a scale "
                          "(1–5, 1–10, 0–100)", "rating")
    return rating


MAX_RATING = 1_000_000.0  # the largest rating read (either sign): any real scale, sums that stay finite


def parse_timestamp(value: Any) -> int:
    """Epoch seconds (UTC) from an int/float epoch, a numeric string or an ISO-8601 string or date.

    Naive ISO times are taken as UTC. Raises ``ValueError`` (with the reason) on anything else.
    """
    return _in_range(_parse_timestamp(value))


# Epoch seconds from 1900 to 2200: wide enough for any real history, narrow enough to catch milliseconds
# (1.7e12 today), which would otherwise load and then break date formatting far downstream.
EPOCH_RANGE = (-2_208_988_800, 7_258_118_400)


def _in_range(seconds: int) -> int:
    low, high = EPOCH_RANGE
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
        raise ValueError(f"expected epoch seconds or an ISO-8601 string, got {kind(value)}")
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


def as_timestamp(value: Any, where: Where) -> int | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise where.error(str(exc), "timestamp") from None


def _as_features(value: Any, where: Where) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):  # the CSV form: a JSON object in one cell
        try:
            value = loads(value)
        except json.JSONDecodeError as exc:
            raise where.error(f"invalid JSON object: {exc.msg}", "features") from None
        except _DuplicateKey as exc:
            raise where.error(f"invalid JSON object: key {str(exc)!r} appears twice", "features") from None
        except RecursionError:
            raise where.error("invalid JSON object: nested too deeply", "features") from None
        except ValueError as exc:
            raise where.error(f"invalid JSON object: a number too long to read ({_digits(exc)})",
                              "features") from None
    if not isinstance(value, Mapping):
        raise where.error(f"expected an object of named features, got {kind(value)}", "features")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise where.error(f"feature names must be strings, got {bad[0]!r}", "features")
    if _depth(value) > MAX_FEATURE_DEPTH:
        # Loaded, 900 levels passed here and then overflowed the recursion limit where a perturbation
        # copies an interaction's features: an INTERNALERROR long after the file was read.
        raise where.error(f"features nested more than {MAX_FEATURE_DEPTH} levels deep; a feature is a "
                          "value, a list or a small object", "features")
    return dict(value)


MAX_FEATURE_DEPTH = 32  # lists and objects inside an interaction's or item's features


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (1 for a flat object), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_FEATURE_DEPTH:
            break  # deep enough to refuse: the rest need not be walked
        children = current.values() if isinstance(current, Mapping) else current
        stack.extend((c, level + 1) for c in children if isinstance(c, (Mapping, list, tuple)))
    return deepest


def interaction_from(obj: Any, where: Where, allowed: tuple[str, ...] = INTERACTION_FIELDS) -> Interaction:
    obj = check_fields(obj, allowed, where, "an interaction")
    return Interaction(
        item_id=required_id(obj, where, "item_id"),
        category=_as_opt_str(obj.get("category"), where, "category"),
        timestamp=as_timestamp(obj.get("timestamp"), where),
        rating=as_rating(obj.get("rating"), where),
        title=_as_opt_str(obj.get("title"), where, "title"),
        features=_as_features(obj.get("features"), where),
    )


def item_from_obj(obj: Any, where: Where) -> Item:
    obj = check_fields(obj, ITEM_FIELDS, where, "an item")
    return Item(
        item_id=required_id(obj, where, "item_id"),
        title=_as_opt_str(obj.get("title"), where, "title"),
        category=_as_opt_str(obj.get("category"), where, "category"),
        features=_as_features(obj.get("features"), where),
    )


def history_from(data: UserHistory | Iterable[Any], user_id: str = "user") -> UserHistory:
    """A :class:`UserHistory` from the record itself or plain data: a list of interaction dicts
    (``item_id`` required; ``category``, ``timestamp``, ``rating``, ``title``, ``features`` optional), a
    dict with ``user_id`` and ``interactions``, or a pandas DataFrame of one user's interactions
    (:func:`frame_rows`). Checked like a data file (``DataError`` names the field)."""
    if isinstance(data, UserHistory):
        return data
    where = Where("<python data>")
    if is_frame(data):
        user_id, data = frame_rows(data, user_id)
    if isinstance(data, Mapping):
        obj = check_fields(data, USER_FIELDS, where, "a user history")
        user_id = required_id(obj, where, "user_id")
        data = obj.get("interactions") or []
    rows = list(data)
    return UserHistory(str(user_id), tuple(
        i if isinstance(i, Interaction) else interaction_from(i, where.at(f"interaction {n}"))
        for n, i in enumerate(rows)))


def is_frame(data: Any) -> bool:
    """A pandas DataFrame (or anything with its ``columns`` and ``to_dict(orient="records")``), told by its
    shape so that pandas is never imported here: it is optional, and only its users pay for it."""
    return (hasattr(data, "columns") and callable(getattr(data, "to_dict", None))
            and not isinstance(data, Mapping))


def frame_rows(frame: Any, user_id: str = "user") -> tuple[str, list[dict[str, Any]]]:
    """(user id, interaction dicts) from a DataFrame of one user's interactions, as the method's guide allows
    a history: a column per field (``item_id``; ``category``, ``timestamp``, ``rating``, ``title``
    optional), any other column a feature. A ``user_id`` column names the user (one user only); missing cells
    (NaN, None, NaT) are left out; numpy numbers become Python numbers and pandas timestamps Unix seconds."""
    where = Where("<DataFrame>")
    columns = [str(c) for c in frame.columns]
    if "item_id" not in columns:
        raise where.error(f"needs an item_id column (columns: {', '.join(columns) or 'none'})", "item_id")
    rows = [{str(k): _cell(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
    users = {str(r["user_id"]) for r in rows if r.get("user_id") is not None}
    if len(users) > 1:
        raise where.error(f"holds {len(users)} users' interactions; pass one user's rows "
                          "(df[df.user_id == u]) as a history", "user_id")
    out = []
    for row in rows:
        known = {k: v for k, v in row.items() if k in INTERACTION_FIELDS and v is not None}
        extra = {k: v for k, v in row.items() if k not in (*INTERACTION_FIELDS, "user_id") and v is not None}
        if extra:
            known["features"] = {**dict(known.get("features") or {}), **extra}
        out.append(known)
    return (users.pop() if users else user_id), out


def _cell(value: Any) -> Any:
    """A DataFrame cell as plain data: missing (NaN, NaT, None) → None, numpy scalars → Python numbers,
    pandas or datetime timestamps → Unix seconds."""
    import datetime  # lazy: a name another import here also binds

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NaTType", "NAType"):
        return None
    if isinstance(value, datetime.datetime):  # pandas.Timestamp is one
        return int(value.timestamp())
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        value = item()
        return None if isinstance(value, float) and math.isnan(value) else value
    return value


def item_from(data: Item | Mapping[str, Any]) -> Item:
    """An :class:`Item` from the record itself or a dict (``item_id`` required)."""
    return data if isinstance(data, Item) else item_from_obj(data, Where("<python data>"))


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


def in_time_order(interactions: Iterable[Interaction]) -> tuple[Interaction, ...]:
    """Oldest first when every interaction has a timestamp (stable); otherwise the given order."""
    items = tuple(interactions)
    if all(i.timestamp is not None for i in items):
        return tuple(sorted(items, key=lambda i: i.timestamp or 0))
    return items
