"""The JSON readers of the records: a report (or one record shipped by an xdist worker) back into
:class:`~pytest_robustexplain.results.RunResult` and its parts, validated field by field. Every error is a
``DataError`` naming the file, the record and the field. The writer side is each record's ``to_dict``
and :func:`plain`; the report document around them is ``report/json_report.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import DataError
from .records import (
    GUARD_POLICIES,
    KIND_NAME,
    OUTCOMES,
    SEVERITY_RANGE,
    AttackResult,
    Finding,
    GateCheck,
    GateResult,
    GuardExample,
    GuardResult,
    Interval,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)

if TYPE_CHECKING:  # built only when a report carries them (faithful.py: not at the plugin's start-up)
    from .faithful import FaithfulnessResult, FlipResult, JudgedText, PolarityResult

SCHEMA = "pytest-robustexplain/report"
SCHEMA_VERSION = 2


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
    reader = _Reader(source)
    if not isinstance(doc, dict):
        raise DataError(f"expected a JSON object at the top level, got {type(doc).__name__}", source=source)
    _check_version(doc, source)
    return RunResult(
        signature=reader.get(doc, "signature", str, "top level"),
        seed=reader.get(doc, "seed", int, "top level"),
        models=reader.records(doc, "models", reader.obj),
        settings=reader.get(doc, "settings", dict, "top level"),
        pairs=reader.records(doc, "pairs", reader.pair),
        gates=reader.records(doc, "gates", reader.gate),
        calls=reader.get(doc, "calls", dict, "top level"),
        timings=reader.get(doc, "timings", dict, "top level"),
        started_at=reader.get(doc, "started_at", str, "top level", default=""),
        finished_at=reader.get(doc, "finished_at", str, "top level", default=""),
        package_version=reader.get(doc, "package_version", str, "top level", default=""),
    )


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


_MISSING = object()
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false", list: "a list", dict: "an object"}
T = TypeVar("T")
R = TypeVar("R")


def pair_from_dict(data: Any, *, source: str) -> PairResult:
    """One pair as :meth:`PairResult.to_dict` wrote it (e.g. shipped by an xdist worker), validated."""
    return _Reader(source).pair(data, "pair")


def gate_from_dict(data: Any, *, source: str) -> GateResult:
    """One gate as :meth:`GateResult.to_dict` wrote it, validated like a report's."""
    return _Reader(source).gate(data, "gate")


class _Reader:
    """Field access with type checks; every error names the file, the record and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, record: str, field: str, message: str) -> DataError:
        return DataError(message, source=self.source, record=record, field=field)

    def get(self, obj: Mapping[str, Any], field: str, kind: type, record: str, *,
            default: Any = _MISSING) -> Any:
        if field not in obj:
            if default is not _MISSING:
                return default
            raise self.fail(record, field, "missing")
        value = obj[field]
        if kind is float:
            return self._number(value, record, field)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            expected = _TYPE_NAMES.get(kind, kind.__name__)
            raise self.fail(record, field, f"expected {expected}, got {type(value).__name__} {value!r:.60}")
        return value

    def outcome(self, obj: Mapping[str, Any], field: str, record: str, *, choices: tuple[str, ...] = OUTCOMES,
                optional: bool = False) -> Any:
        """An outcome (or another closed set of words): a hand-edited report cannot have a writer render
        ``**PWNED**`` where PASS belongs."""
        value = self.optional(obj, field, str, record) if optional else self.get(obj, field, str, record)
        if value is not None and value not in choices:
            raise self.fail(record, field, f"expected one of {', '.join(choices)}, got {value!r:.60}")
        return value

    def optional(self, obj: Mapping[str, Any], field: str, kind: type, record: str) -> Any:
        if obj.get(field) is None:
            return None
        return self.get(obj, field, kind, record)

    def _number(self, value: Any, record: str, field: str) -> float:
        if value is None:  # written for a non-finite number
            return math.nan
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(record, field, f"expected a number, got {value!r:.60}")
        return float(value)

    def obj(self, value: Any, record: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise DataError(f"expected an object, got {type(value).__name__}", source=self.source,
                            record=record)
        return value

    def records(self, doc: Mapping[str, Any], field: str, parse: Callable[[Any, str], T]) -> list[T]:
        """A top-level list parsed record by record (``pairs[3]`` names a bad one)."""
        items = self.get(doc, field, list, "top level")
        return [parse(item, f"{field}[{i}]") for i, item in enumerate(items)]

    def score(self, obj: Mapping[str, Any], field: str, record: str) -> float:
        """A pair's score: a number in [0, 1] (null, NaN or out of range would break every aggregate)."""
        value = self.get(obj, field, float, record)
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise self.fail(record, field, f"expected a score between 0 and 1, got {obj.get(field)!r:.60}")
        return float(value)

    def pair(self, value: Any, record: str) -> PairResult:
        data = self.obj(value, record)
        key = self.obj(data.get("key"), f"{record}.key")
        g: Callable[..., Any] = self.get
        s = self.score
        return PairResult(
            key=PairKey(model=g(key, "model", str, record), user_id=g(key, "user_id", str, record),
                        item_id=g(key, "item_id", str, record), kind=self.kind(key, record),
                        severity=self.severity(key, record), repeat=g(key, "repeat", int, record)),
            semantic=s(data, "semantic", record), keyword=s(data, "keyword", record),
            structural=s(data, "structural", record), length=s(data, "length", record),
            combined=s(data, "combined", record),
            original=g(data, "original", str, record), perturbed=g(data, "perturbed", str, record),
            changes=g(data, "changes", dict, record, default={}),
            failure=self.optional(data, "failure", str, record),
            failure_detail=g(data, "failure_detail", str, record, default=""),
            keyword_empty=g(data, "keyword_empty", bool, record, default=False),
            cached_original=g(data, "cached_original", bool, record, default=False),
            cached_perturbed=g(data, "cached_perturbed", bool, record, default=False),
            latency_s=g(data, "latency_s", float, record, default=0.0),
            history_length=g(data, "history_length", int, record, default=0),
            embedding=None if "embedding" not in data else s(data, "embedding", record),  # opt-in metric
            cut=self.sides(data, "cut", record),
            overflow=self.sides(data, "overflow", record),
            overflow_detail=g(data, "overflow_detail", str, record, default=""),
            tokens=self.tokens(data, record),
            original_latency_s=g(data, "original_latency_s", float, record, default=0.0),
            user_metrics=self.user_metrics(data, record),
        )

    def user_metrics(self, data: Mapping[str, Any], record: str) -> dict[str, float]:
        """The user's own metrics by name (absent: none), each a score as the four are."""
        values = self.get(data, "user_metrics", dict, record, default={})
        for name in values:
            if not isinstance(name, str) or not KIND_NAME.match(name):
                raise self.fail(record, "user_metrics", f"expected metric names, got {name!r:.60}")
        return {name: self.score(values, name, f"{record}.user_metrics") for name in values}

    def kind(self, key: Mapping[str, Any], record: str) -> str:
        kind: str = self.get(key, "kind", str, record)
        if not KIND_NAME.match(kind):
            raise self.fail(record, "kind", "expected a perturbation kind's name (lowercase letters, "
                                            f"digits, underscores), got {kind!r:.60}")
        return kind

    def severity(self, key: Mapping[str, Any], record: str) -> int:
        """0 (a control pair) or a perturbation severity."""
        severity: int = self.get(key, "severity", int, record)
        if not (severity == 0 or SEVERITY_RANGE[0] <= severity <= SEVERITY_RANGE[1]):
            raise self.fail(record, "severity", f"expected 0 (a control) or {SEVERITY_RANGE[0]}–"
                                                f"{SEVERITY_RANGE[1]}, got {severity}")
        return severity

    def tokens(self, data: Mapping[str, Any], record: str) -> tuple[int, ...]:
        """The pair's four token counts (absent: not reported)."""
        counts = self.get(data, "tokens", list, record, default=[])
        if counts and (len(counts) != 4 or not all(type(n) is int and n >= 0 for n in counts)):
            raise self.fail(record, "tokens", f"expected four token counts >= 0, got {counts!r:.60}")
        return tuple(counts)

    def sides(self, data: Mapping[str, Any], name: str, record: str) -> tuple[str, ...]:
        """Which of a pair's replies were cut, or prompts did not fit (absent: none, as reports before the
        field say nothing)."""
        from .records import CUT_REPLIES

        sides = self.get(data, name, list, record, default=[])
        if any(c not in CUT_REPLIES for c in sides) or len(set(sides)) != len(sides):
            raise self.fail(record, name, f"expected a list of {' / '.join(CUT_REPLIES)}, got {sides!r:.60}")
        return tuple(sides)

    def interval(self, value: Any, record: str) -> Interval:
        return self.record(Interval, value, record)

    def check(self, value: Any, record: str) -> GateCheck:
        return self.record(GateCheck, value, record)

    def optional_interval(self, data: Mapping[str, Any], field: str, record: str) -> Interval | None:
        value = data.get(field)
        return None if value is None else self.interval(value, f"{record}.{field}")

    def attack(self, value: Any, record: str) -> AttackResult:
        return self.record(AttackResult, value, record)

    def guard(self, value: Any, record: str) -> GuardResult | None:
        if value is None:
            return None
        data = self.obj(value, record)
        g: Callable[..., Any] = self.get
        example = data.get("example")
        if example is not None:
            example = self.record(GuardExample, example, f"{record}.example")
        users = g(data, "insensitive_users", list, record, default=[])
        if not all(isinstance(u, str) for u in users):
            raise self.fail(record, "insensitive_users", "expected a list of user ids (strings)")
        return GuardResult(
            outcome=self.outcome(data, "outcome", record),
            policy=self.outcome(data, "policy", record, choices=GUARD_POLICIES) if "policy" in data
            else "fail",
            swap=self.interval(data.get("swap"), f"{record}.swap"),
            perturbed=self.interval(data.get("perturbed"), f"{record}.perturbed"),
            delta=self.interval(data.get("delta"), f"{record}.delta"),
            sensitivity=self.interval(data.get("sensitivity"), f"{record}.sensitivity"),
            relative=self.optional_interval(data, "relative", record),
            floor=g(data, "floor", float, record, default=1.0), n_cases=g(data, "n_cases", int, record),
            identical=g(data, "identical", int, record, default=0), n_users=g(data, "n_users", int, record),
            insensitive_users=tuple(users), share_low=g(data, "share_low", float, record, default=0.0),
            min_sensitivity=g(data, "min_sensitivity", float, record),
            max_insensitive_share=g(data, "max_insensitive_share", float, record),
            message=g(data, "message", str, record, default=""), example=example,
            history_reference=self.optional_interval(data, "history_reference", record),
            unsupported=self.optional_interval(data, "unsupported", record),
            min_history_reference=self.optional(data, "min_history_reference", float, record),
            grounding_outcome=self.outcome(data, "grounding_outcome", record, optional=True),
            max_unsupported_rate=self.optional(data, "max_unsupported_rate", float, record),
            identical_low=g(data, "identical_low", float, record, default=0.0),
            max_identical_share=g(data, "max_identical_share", float, record, default=0.05),
            sensitivity_low=self.optional(data, "sensitivity_low", float, record),
            users_needed=self.optional(data, "users_needed", int, record),
            relative_gate=self.optional_interval(data, "relative_gate", record),
            min_relative=self.optional(data, "min_relative", float, record),
            relative_outcome=self.outcome(data, "relative_outcome", record, optional=True),
            copies=g(data, "copies", int, record, default=0), explained=g(data, "explained", int, record,
                                                                          default=0),
            copy_low=g(data, "copy_low", float, record, default=0.0),
            copy_high=g(data, "copy_high", float, record, default=1.0),
            max_copy_rate=g(data, "max_copy_rate", float, record, default=0.1),
            copy_outcome=self.outcome(data, "copy_outcome", record, optional=True))

    def faithfulness(self, value: Any, record: str) -> FaithfulnessResult | None:
        """The judge's finding (absent: the run had no judge)."""
        if value is None:
            return None
        from .faithful import FaithfulnessResult
        data = self.obj(value, record)
        g: Callable[..., Any] = self.get
        drops = g(data, "drop_by_kind", dict, record, default={})
        texts = g(data, "texts", list, record, default=[])
        return FaithfulnessResult(
            judge=g(data, "judge", str, record), scope=g(data, "scope", str, record),
            judged=g(data, "judged", int, record), faithful=g(data, "faithful", int, record),
            failures=g(data, "failures", int, record), low=g(data, "low", float, record),
            high=g(data, "high", float, record), agreed=g(data, "agreed", int, record, default=0),
            compared=g(data, "compared", int, record, default=0),
            agreement_high=g(data, "agreement_high", float, record, default=1.0),
            min_rate=self.optional(data, "min_rate", float, record),
            outcome=self.outcome(data, "outcome", record, optional=True),
            message=g(data, "message", str, record, default=""),
            by_kind={str(k): self.count_pair(v, f"{record}.by_kind.{k}")
                     for k, v in g(data, "by_kind", dict, record, default={}).items()},
            drop_by_kind={str(k): self.interval(v, f"{record}.drop_by_kind.{k}") for k, v in drops.items()},
            texts=tuple(self.judged_text(t, f"{record}.texts[{i}]") for i, t in enumerate(texts)),
            alpha=g(data, "alpha", float, record, default=0.05))

    def polarity(self, value: Any, record: str) -> PolarityResult | None:
        """The preference-polarity finding (absent: no ratings, or a report from before it)."""
        if value is None:
            return None
        from .faithful import PolarityResult

        return self.record(PolarityResult, value, record)

    def flip(self, value: Any, record: str) -> FlipResult | None:
        if value is None:
            return None
        from .faithful import FlipResult

        return self.record(FlipResult, value, record)

    def count_pair(self, value: Any, record: str) -> list[int]:
        counts = isinstance(value, list) and len(value) == 2
        if not (counts and all(type(n) is int and n >= 0 for n in value)):
            raise self.fail(record, "", f"expected [faithful, judged], got {value!r:.60}")
        return list(value)

    def judged_text(self, value: Any, record: str) -> JudgedText:
        from .faithful import JudgedText

        return self.record(JudgedText, value, record)

    def record(self, cls: type[R], value: Any, record: str) -> R:
        """A record read by its dataclass's own fields and types (no hand-written mirror): a field absent
        from the JSON takes the dataclass's default, an outcome-named field only the outcome words."""
        data = self.obj(value, record)
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data and (f.default is not dataclasses.MISSING
                                       or f.default_factory is not dataclasses.MISSING):
                continue
            if f.name not in data:
                raise self.fail(record, f.name, "missing")
            values[f.name] = self.typed(hints[f.name], data, f.name, record)
        return cls(**values)

    def typed(self, hint: Any, data: Mapping[str, Any], name: str, record: str) -> Any:
        """One field by its type hint: ``X | None``, an outcome (a field named ``outcome`` or ending in
        ``_outcome`` takes only the outcome words), else :meth:`value`."""
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
            if data.get(name) is None:
                return None
            (hint,) = [a for a in args if a is not type(None)]
        if name == "outcome" or name.endswith("_outcome"):
            return self.outcome(data, name, record)
        return self.value(hint, data[name], record, name)

    def value(self, hint: Any, raw: Any, record: str, name: str) -> Any:
        """A value by its type hint: a nested record, ``tuple[X, ...]``, ``list[X]``, ``dict[str, X]``, a
        scalar (a float also from an integer or null), or anything (``Any``)."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is Any:
            return raw
        if dataclasses.is_dataclass(hint):
            return self.record(hint, raw, f"{record}.{name}")  # type: ignore[arg-type]
        if origin in (tuple, list):
            items = self.get({name: raw}, name, list, record)
            converted = [self.value(args[0], v, record, f"{name}[{i}]") for i, v in enumerate(items)]
            return tuple(converted) if origin is tuple else converted
        if origin is dict:
            mapping = self.get({name: raw}, name, dict, record)
            return {str(k): self.value(args[1], v, record, f"{name}.{k}") for k, v in mapping.items()}
        return self.get({name: raw}, name, hint, record)

    def findings(self, verdict: Mapping[str, Any], record: str) -> dict[str, Finding]:
        """Each check's row, keyed by check name (absent: a report written before checks had rows)."""
        rows = self.get(verdict, "findings", dict, record, default={})
        for name in rows:  # names reach every writer and JUnit property names: a check's name or nothing
            if not KIND_NAME.match(name):
                raise self.fail(record, "findings", f"{name!r:.60} is not a check name")
        return {name: self.record(Finding, row, f"{record}.findings.{name}") for name, row in rows.items()}

    def gate(self, value: Any, record: str) -> GateResult:
        data = self.obj(value, record)
        verdict = self.obj(data.get("verdict"), f"{record}.verdict")
        vrec = f"{record}.verdict"
        checks = self.get(verdict, "checks", list, vrec)
        thresholds = self.get(data, "thresholds", dict, record, default={})
        return GateResult(
            nodeid=self.get(data, "nodeid", str, record), slice=self.get(data, "slice", str, record),
            model=self.get(data, "model", str, record),
            verdict=Verdict(outcome=self.outcome(verdict, "outcome", vrec),
                            checks=tuple(self.check(c, f"{vrec}.checks[{i}]") for i, c in enumerate(checks)),
                            mode=self.get(verdict, "mode", str, vrec, default="mean"),
                            message=self.get(verdict, "message", str, vrec, default=""),
                            users_needed=self.optional(verdict, "users_needed", int, vrec),
                            guard=self.guard(verdict.get("guard"), f"{vrec}.guard"),
                            attacks=tuple(self.attack(a, f"{vrec}.attacks[{i}]") for i, a in
                                          enumerate(self.get(verdict, "attacks", list, vrec, default=[]))),
                            faithfulness=self.faithfulness(verdict.get("faithfulness"),
                                                           f"{vrec}.faithfulness"),
                            polarity=self.polarity(verdict.get("polarity"), f"{vrec}.polarity"),
                            flip=self.flip(verdict.get("flip"), f"{vrec}.flip"),
                            findings=self.findings(verdict, vrec)),
            thresholds={k: self._number(v, record, f"thresholds.{k}") for k, v in thresholds.items()},
            scope=self.get(data, "scope", dict, record, default={}),
        )
