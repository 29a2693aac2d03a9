"""The JSON report: the complete, versioned record of a run, and the input of every other renderer.

``write_json(run, path)`` writes it atomically; ``read_json(path)`` reads it back into the identical
:class:`~pytest_robustexplain.results.RunResult` (aggregates are derived data and are recomputed, not read).
A file that is not a report, is malformed, or was written with a newer schema raises ``DataError`` naming
the file, the record and the field.

Schema (``schema_version`` 2; version 1 — no cross-user controls, no ``guard`` — is still read). Scores
are floats in [0, 1]; a number that is not finite is written
``null``. Unknown keys are ignored on reading, so later versions may add fields without a version bump;
a version bump means a reader of an older version must refuse the file.

Top level (object):

- ``schema`` — always ``"pytest-robustexplain/report"``.
- ``schema_version`` — integer, 1 for this layout.
- ``package_version`` — version of pytest-robustexplain that wrote the run.
- ``signature`` — the metric signature (tokenizer, tagger and version, BLEU settings, weights, package
  version): two runs are only comparable when it matches.
- ``seed`` — base seed of the sweep (perturbations and sampling).
- ``started_at`` / ``finished_at`` — ISO 8601 timestamps (UTC), possibly empty.
- ``settings`` — every effective setting of the run (thresholds ``min_combined``/``min_metric``, kinds,
  severities, users, repeats, backend options...), as the configuration resolved them.
- ``models`` — list of model descriptions: ``name``, ``backend``, ``is_llm`` (false for the template
  explainer), ``digest``, ``parameter_size`` (e.g. ``"8.0B"``), ``quantization``, ``server_version``,
  ``host`` (each may be null) and any backend-specific extra keys.
- ``calls`` — model calls: ``made``, ``cached`` (served by the response cache), ``failed``,
  ``cancelled`` (skipped because a sequential gate had already decided).
- ``timings`` — seconds spent per phase (phase name → float).
- ``pairs`` — list, one object per scored pair (perturbation pairs and control pairs):

  - ``key`` — ``model``, ``user_id``, ``item_id``, ``kind`` (perturbation kind, ``"control"`` for a
    noise-floor pair: the same history explained again with another sample seed; ``"swap"`` for a
    cross-user control: ``original`` is the explanation for the user, ``perturbed`` the one for the donor
    user named in ``changes.donor``, whose ``changes.grounding`` lists what the user's explanation
    mentions: ``history``, ``item`` and ``unsupported`` terms), ``severity`` (1–5, 0 for controls),
    ``repeat`` (integer).
  - ``semantic``, ``keyword``, ``structural``, ``length`` — the four similarity scores; ``combined`` — ρ.
  - ``original`` / ``perturbed`` — the two explanations, verbatim (model output: treat as untrusted).
  - ``changes`` — what the perturbation changed (object; content depends on the kind).
  - ``failure`` — null, or why the pair scores 0 everywhere (``"empty"``, ``"refusal"``, ``"error"``);
    ``failure_detail`` — the error message or refused text.
  - ``keyword_empty`` — both keyword sets were empty (keyword scored 0, flagged for review).
  - ``cached_original`` / ``cached_perturbed`` — the explanation came from the response cache.
  - ``latency_s`` — generation time of the pair in seconds; ``history_length`` — interactions.

- ``gates`` — list, one object per gated test item: ``nodeid``, ``slice`` (a kind, or ``"overall"``
  for all kinds together), ``model``, ``thresholds`` (name → value) and ``verdict``: ``outcome``
  (PASS / FAIL / INCONCLUSIVE / INSENSITIVE), ``mode`` (``mean``, ``confident``, ``sequential``),
  ``message``, ``guard`` (null, or the cross-user control of the slice: ``outcome``, ``policy``, ``swap``,
  ``perturbed``, ``delta``, ``sensitivity`` and ``relative`` intervals (ρ_swap, ρ_pert, Δ, ρ_floor − ρ_swap,
  R), ``floor``, ``n_cases``,
  ``identical``, ``n_users``, ``insensitive_users``, ``share_low``, ``min_sensitivity``,
  ``max_insensitive_share``, ``message``, ``example`` (``user_id``, ``donor_id``, ``item_id``,
  ``user_text``, ``donor_text``, ``combined``) or null, ``history_reference`` / ``unsupported``
  (intervals of the grounding rates, or null), ``min_history_reference``, ``grounding_outcome``),
  ``attacks`` (list, one per opt-in adversarial kind the slice ran: ``kind`` ``prompt_injection`` or
  ``shilling``, ``successes``, ``n``, ``low``/``high`` (exact interval of the success rate), ``limit``,
  ``outcome``, ``by_family`` and ``by_severity`` (name → [successes, pairs]), ``examples``),
  ``users_needed`` (null or integer), ``checks``: list of ``quantity`` (``combined`` or a metric),
  ``threshold``, ``outcome``, ``fragile`` (the interval straddles the threshold), ``flip_probability``
  (null or float) and ``interval``.
- ``aggregates`` — derived, per model name (see ``report.summary.Summary``): ``n_users``, ``n_pairs``,
  ``cached_pairs`` (both explanations from the cache), ``overall`` (ρ), ``by_kind`` (kind → interval),
  ``by_metric`` (metric → interval), ``by_severity`` (severity as a string → interval), ``kind_severity``
  (kind → severity → interval), ``by_user`` (list of ``user_id``, ``n``, ``mean``, ``sd`` within the
  user, ``history_length``), ``user_spread`` (``sd`` of the user means, ``sd_limit``, ``stratified``,
  ``strata``: ``label``, ``min_length``, ``max_length``, ``n_users``, ``mean``), ``degradation_pct``
  (mean ρ from severity 1 to 5, percent, negative = worse), ``noise_floor`` (interval of the control pairs
  or null), ``n_control_pairs``, ``weakest_metric``, ``weakest_kind``, ``n_failures``, ``failures``
  (``key``, ``failure``, ``detail``), ``keyword_empty`` (keys), ``small_kinds`` (kinds with fewer than 50
  pairs), ``recommendation`` (one sentence), ``sensitivity`` (the guard over all the model's pairs, same
  fields as a verdict's ``guard``, or null without cross-user controls), ``delta_by_kind`` (kind → Δ
  interval), ``relative_by_kind`` (kind → R interval, where defined).
- ``comparisons`` — derived, present with two or more models: each model after the first compared with the
  first on matched pairs (``stats.compare_models``), when the two share at least 80 % of their pairs (ran
  the same cases): ``names``, ``rows`` (one per quantity — ``combined`` and the four metrics: ``quantity``,
  ``label``, ``mean_a``, ``mean_b`` (intervals), ``delta_pct`` (B relative to A), ``p_value``, ``p_holm``,
  ``d_z``, ``significant``, ``n_units``), ``alpha``, ``unit`` (``user`` or ``pair``), ``n_matched``,
  ``unmatched_a``/``unmatched_b`` (match keys), ``conclusion``.

An interval is an object ``mean``, ``low``, ``high``, ``n`` (pairs), ``n_clusters`` (users),
``confidence``; intervals are cluster-robust by user.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..errors import DataError
from ..results import (
    AttackResult,
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
from .comparison import conclusion, model_comparisons
from .summary import model_names, plain, summarize

SCHEMA = "pytest-robustexplain/report"
SCHEMA_VERSION = 2


def run_to_dict(run: RunResult) -> dict[str, Any]:
    """The JSON document of ``run`` (plain JSON types, non-finite numbers as None)."""
    names = model_names(run)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "package_version": run.package_version,
        "signature": run.signature,
        "seed": run.seed,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "settings": run.settings,
        "models": run.models,
        "calls": run.calls,
        "timings": run.timings,
        "pairs": [p.to_dict() for p in run.pairs],
        "gates": [g.to_dict() for g in run.gates],
        "aggregates": {name: summarize(run, name).to_dict() for name in names},
    }
    if len(names) >= 2:
        doc["comparisons"] = _comparisons(run)
    return plain(doc)


def _comparisons(run: RunResult) -> list[dict[str, Any]]:
    return [{**comparison.to_dict(), "names": list(comparison.names), "conclusion": conclusion(comparison)}
            for comparison in model_comparisons(run)]


def write_json(run: RunResult, path: str | os.PathLike[str]) -> Path:
    """Write the JSON report of ``run`` to ``path`` atomically (a reader never sees half a file)."""
    return atomic_write_text(path, dumps(run_to_dict(run)) + "\n")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    The temporary file is opened normally (not with ``mkstemp``) so the report gets the usual
    permissions from the umask: it is meant to be shared as a CI artifact.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def dumps(doc: dict[str, Any]) -> str:
    """The document as text: indented, except one line per pair (compact, and diffs stay readable)."""
    body = {k: v for k, v in doc.items() if k != "pairs"}
    head = json.dumps(body, ensure_ascii=False, indent=1, allow_nan=False)
    if "pairs" not in doc:
        return head
    rows = ",\n".join("  " + json.dumps(p, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
                      for p in doc["pairs"])
    pairs = f'"pairs": [\n{rows}\n ]' if rows else '"pairs": []'
    return f"{head[:-2]},\n {pairs}\n}}" if body else f"{{\n {pairs}\n}}"


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
                        item_id=g(key, "item_id", str, record), kind=g(key, "kind", str, record),
                        severity=g(key, "severity", int, record), repeat=g(key, "repeat", int, record)),
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
        )

    def interval(self, value: Any, record: str) -> Interval:
        data = self.obj(value, record)
        g = self.get
        return Interval(mean=g(data, "mean", float, record), low=g(data, "low", float, record),
                        high=g(data, "high", float, record), n=g(data, "n", int, record),
                        n_clusters=g(data, "n_clusters", int, record),
                        confidence=g(data, "confidence", float, record, default=0.95))

    def check(self, value: Any, record: str) -> GateCheck:
        data = self.obj(value, record)
        g = self.get
        return GateCheck(quantity=g(data, "quantity", str, record),
                         threshold=g(data, "threshold", float, record),
                         interval=self.interval(data.get("interval"), f"{record}.interval"),
                         outcome=g(data, "outcome", str, record),
                         fragile=g(data, "fragile", bool, record, default=False),
                         flip_probability=self.optional(data, "flip_probability", float, record))

    def optional_interval(self, data: Mapping[str, Any], field: str, record: str) -> Interval | None:
        value = data.get(field)
        return None if value is None else self.interval(value, f"{record}.{field}")

    def attack(self, value: Any, record: str) -> AttackResult:
        data = self.obj(value, record)
        g: Callable[..., Any] = self.get
        examples = g(data, "examples", list, record, default=[])
        return AttackResult(
            kind=g(data, "kind", str, record), successes=g(data, "successes", int, record),
            n=g(data, "n", int, record), low=g(data, "low", float, record),
            high=g(data, "high", float, record),
            limit=g(data, "limit", float, record), outcome=g(data, "outcome", str, record),
            by_family=g(data, "by_family", dict, record, default={}),
            by_severity=g(data, "by_severity", dict, record, default={}),
            examples=tuple(self.obj(e, f"{record}.examples[{i}]") for i, e in enumerate(examples)))

    def guard(self, value: Any, record: str) -> GuardResult | None:
        if value is None:
            return None
        data = self.obj(value, record)
        g: Callable[..., Any] = self.get
        example = data.get("example")
        if example is not None:
            ex = self.obj(example, f"{record}.example")
            erec = f"{record}.example"
            example = GuardExample(user_id=g(ex, "user_id", str, erec),
                                   donor_id=g(ex, "donor_id", str, erec),
                                   item_id=g(ex, "item_id", str, erec),
                                   user_text=g(ex, "user_text", str, erec),
                                   donor_text=g(ex, "donor_text", str, erec),
                                   combined=g(ex, "combined", float, erec))
        users = g(data, "insensitive_users", list, record, default=[])
        if not all(isinstance(u, str) for u in users):
            raise self.fail(record, "insensitive_users", "expected a list of user ids (strings)")
        return GuardResult(
            outcome=g(data, "outcome", str, record), policy=g(data, "policy", str, record, default="fail"),
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
            grounding_outcome=self.optional(data, "grounding_outcome", str, record))

    def gate(self, value: Any, record: str) -> GateResult:
        data = self.obj(value, record)
        verdict = self.obj(data.get("verdict"), f"{record}.verdict")
        vrec = f"{record}.verdict"
        checks = self.get(verdict, "checks", list, vrec)
        thresholds = self.get(data, "thresholds", dict, record, default={})
        return GateResult(
            nodeid=self.get(data, "nodeid", str, record), slice=self.get(data, "slice", str, record),
            model=self.get(data, "model", str, record),
            verdict=Verdict(outcome=self.get(verdict, "outcome", str, vrec),
                            checks=tuple(self.check(c, f"{vrec}.checks[{i}]") for i, c in enumerate(checks)),
                            mode=self.get(verdict, "mode", str, vrec, default="mean"),
                            message=self.get(verdict, "message", str, vrec, default=""),
                            users_needed=self.optional(verdict, "users_needed", int, vrec),
                            guard=self.guard(verdict.get("guard"), f"{vrec}.guard"),
                            attacks=tuple(self.attack(a, f"{vrec}.attacks[{i}]") for i, a in
                                          enumerate(self.get(verdict, "attacks", list, vrec, default=[])))),
            thresholds={k: self._number(v, record, f"thresholds.{k}") for k, v in thresholds.items()},
            scope=self.get(data, "scope", dict, record, default={}),
        )


def write_report(write: Any, where: str) -> str | None:
    """Run one report write; an OS error (no such directory, a file in the way, read-only, disk full)
    becomes one message naming ``where`` and the cause, never a traceback."""
    try:
        write()
    except OSError as exc:
        cause = exc.strerror or str(exc)
        if exc.filename and not where.endswith(f"={exc.filename}"):
            cause = f"{cause} ({exc.filename})"  # e.g. a file where its directory should be
        return f"{where}: cannot write the report: {cause}"
    return None
