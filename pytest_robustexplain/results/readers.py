"""The JSON readers of the records: a report (or one record shipped by an xdist worker) back into
:class:`~pytest_robustexplain.results.RunResult` and its parts, validated field by field. Every error is a
``DataError`` naming the file, the record and the field. The writer side is each record's ``to_dict``
and :func:`plain`; the report document around them is ``report/json_report.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from ..errors import DataError
from .records import NO_LEGACY, OUTCOMES, GateResult, PairResult, Rule, RunResult

SCHEMA = "pytest-robustexplain/report"
SCHEMA_VERSION = 5  # 3: the guard's copying, grounding and relative-robustness records nested; 4: the
# checks' detailed records in the verdict's ``details``; 5: stability's rows there too (were ``checks``)


def plain(value: Any) -> Any:
    """JSON-native copy: mappings → dicts, sequences and sets → lists, non-finite floats → None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def read_json(path: str | os.PathLike[str]) -> RunResult:
    """Read a JSON report back into a :class:`RunResult`; ``DataError`` names the file and the fault."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the report: {exc}", source=source) from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON: {exc.msg} (column {exc.colno})", source=source,
                        record=f"line {exc.lineno}") from exc
    except RecursionError:
        raise DataError("not a report: nested too deeply", source=source) from None
    return run_from_dict(doc, source=source)


def run_from_dict(doc: Any, *, source: str = "<report>") -> RunResult:
    """Validate a decoded report document and rebuild the run."""
    if not isinstance(doc, dict):
        raise DataError(f"expected a JSON object at the top level, got {type(doc).__name__}", source=source)
    _check_version(doc, source)
    fields = {f.name for f in dataclasses.fields(RunResult)}
    return _Reader(source).record(RunResult, {k: v for k, v in doc.items() if k in fields}, "")


def _check_version(doc: dict[str, Any], source: str) -> None:
    version = doc.get("schema_version")
    if doc.get("schema") != SCHEMA or not isinstance(version, int) or isinstance(version, bool):
        raise DataError(f"not a pytest-robustexplain report (expected schema {SCHEMA!r} and an integer "
                        "schema_version)", source=source, field="schema_version")
    if version > SCHEMA_VERSION:
        raise DataError(f"schema_version {version} is newer than this pytest-robustexplain reads "
                        f"({SCHEMA_VERSION}); upgrade pytest-robustexplain to read it",
                        source=source, field="schema_version")
    if version < 1:
        raise DataError(f"schema_version {version} is not a valid version", source=source,
                        field="schema_version")


def pair_from_dict(data: Any, *, source: str) -> PairResult:
    """One pair as :meth:`PairResult.to_dict` wrote it (e.g. shipped by an xdist worker), validated."""
    return _Reader(source).record(PairResult, data, "pair")


def gate_from_dict(data: Any, *, source: str) -> GateResult:
    """One gate as :meth:`GateResult.to_dict` wrote it, validated like a report's."""
    return _Reader(source).record(GateResult, data, "gate")


_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false", list: "a list", dict: "an object"}
T = TypeVar("T")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A record's field types with their ``Rule``s (``Annotated``); the judge's records are named for the
    verdict's hints only here, when a report is read (``faithful.py`` stays out of the plugin's start-up)."""
    from . import faithful  # lazy: kept off the plugin's import

    names = {n: getattr(faithful, n) for n in ("FaithfulnessResult", "FlipResult", "PolarityResult",
                                               "JudgedText", "MisattributionCase")}
    return typing.get_type_hints(cls, localns=names, include_extras=True)


class _Reader:
    """Every record rebuilt from its dataclass — fields, types, defaults, the ``Rule`` beside a field —
    with no hand-written mirror; every error names the file, the record and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, record: str, field: str, message: str) -> DataError:
        return DataError(message, source=self.source, record=record or "top level", field=field)

    def get(self, obj: Mapping[str, Any], field: str, kind: type, record: str) -> Any:
        value = obj[field]
        if kind is float:
            return self._number(value, record, field)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            expected = _TYPE_NAMES.get(kind, kind.__name__)
            raise self.fail(record, field, f"expected {expected}, got {type(value).__name__} {value!r:.60}")
        return value

    def outcome(self, obj: Mapping[str, Any], field: str, record: str) -> Any:
        """An outcome: a hand-edited report cannot have a writer render ``**PWNED**`` where PASS belongs."""
        value = self.get(obj, field, str, record)
        if value not in OUTCOMES:
            raise self.fail(record, field, f"expected one of {', '.join(OUTCOMES)}, got {value!r:.60}")
        return value

    def _number(self, value: Any, record: str, field: str) -> float:
        if value is None:  # written for a non-finite number
            return math.nan
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(record, field, f"expected a number, got {value!r:.60}")
        return float(value)

    def obj(self, value: Any, record: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise DataError(f"expected an object, got {type(value).__name__}", source=self.source,
                            record=record or "top level")
        return value

    def record(self, cls: type[T], value: Any, record: str) -> T:
        """A record read by its dataclass's own fields and types: a field absent from the JSON takes the
        dataclass's default, or its rule's ``legacy`` value (a report from before the field), or — a
        record nested in schema 3 — what its rule's ``moved`` reads from the parent's flat fields, else is
        missing; a field named ``outcome`` or ending in ``_outcome`` takes only the outcome words."""
        data = self.obj(value, record)
        values = {}
        for f in _plan(cls):  # type: ignore[arg-type]  # a class is hashable
            if f.name not in data and f.rule.moved is not None:  # written in the parent (schema 2 or 3)
                values[f.name] = self.field(f, f.rule.moved(data), record)
            elif f.rule.moved is not None and f.rule.keyed is not None:  # some entries still in the parent
                values[f.name] = self.field(f, {**f.rule.moved(data), **self.get(data, f.name, dict, record)},
                                            record)
            elif f.name not in data:
                if f.has_default:
                    continue
                if f.rule.legacy is NO_LEGACY:
                    raise self.fail(record, f.name, "missing")
                values[f.name] = f.rule.legacy
            elif f.optional and data[f.name] is None:
                values[f.name] = None
            elif f.outcome:
                values[f.name] = self.outcome(data, f.name, record)
            else:
                read = values[f.name] = self.field(f, data[f.name], record)
                if f.rule.test is not None and not f.rule.test(read):
                    raise self.fail(record, f.name, f"expected {f.rule.expected}, got {data[f.name]!r:.60}")
        return cls(**values)

    def field(self, f: _Field, raw: Any, record: str) -> Any:
        """A field's value: by its type, or — a mapping whose values' types depend on their keys (its rule's
        ``keyed``) — each value by its key's type."""
        if f.rule.keyed is None:
            return self.value(f.hint, raw, record, f.name)
        mapping = self.get({f.name: raw}, f.name, dict, record)
        keyed = f.rule.keyed
        return {str(k): self.value(keyed(str(k)), v, record, f"{f.name}.{k}") for k, v in mapping.items()}

    def value(self, hint: Any, raw: Any, record: str, name: str) -> Any:
        """A value by its type hint: a nested record, ``tuple[X, ...]``, ``list[X]``, ``dict[str, X]`` (or a
        mapping), a scalar (a float also from an integer or null), or anything (``Any``)."""
        if typing.get_origin(hint) is Annotated:
            hint = typing.get_args(hint)[0]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is Any:
            return raw
        if dataclasses.is_dataclass(hint):
            return self.record(hint, raw, f"{record}.{name}" if record else name)  # type: ignore[arg-type]
        if origin in (tuple, list):
            items = self.get({name: raw}, name, list, record)
            converted = [self.value(args[0], v, record, f"{name}[{i}]") for i, v in enumerate(items)]
            return tuple(converted) if origin is tuple else converted
        if origin in (dict, Mapping):
            mapping = self.get({name: raw}, name, dict, record)
            return {str(k): self.value(args[1], v, record, f"{name}.{k}") for k, v in mapping.items()}
        return self.get({name: raw}, name, hint, record)


@dataclasses.dataclass(frozen=True)
class _Field:
    """How one field of a record is read: worked out once per record type, not per record."""

    name: str
    hint: Any  # the type, without ``None`` and without its Annotated rule
    optional: bool
    rule: Rule
    has_default: bool
    outcome: bool


@functools.cache
def _plan(cls: type) -> tuple[_Field, ...]:
    hints = _hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        if optional:
            (hint,) = [a for a in args if a is not type(None)]
        rule = _rule(hint)
        if typing.get_origin(hint) is Annotated:
            hint = typing.get_args(hint)[0]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        plan.append(_Field(f.name, hint, optional, rule, has_default,
                           f.name == "outcome" or f.name.endswith("_outcome")))
    return tuple(plan)


def _rule(hint: Any) -> Rule:
    """The ``Rule`` a field's type carries (``Annotated``), or none."""
    if typing.get_origin(hint) is Annotated:
        return next((a for a in typing.get_args(hint)[1:] if isinstance(a, Rule)), Rule())
    return Rule()
