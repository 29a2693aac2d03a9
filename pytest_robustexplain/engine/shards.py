"""One gate split across CI jobs (``shard=I/N``) and put back together (``robustexplain merge``).

A shard plans the whole gate — the same users, donors, seeds and rotation of the balanced design as one run
— and measures the users whose position among the gate's planned users is I − 1 modulo N: a user's pairs,
noise-floor and cross-user controls (whose donors may be anyone's histories) all fall in one shard. It never
stops early: a sequential gate is decided by the merge on every shard's users in the seeded order one run
feeds it, so a shard's evidence never ends another's users (docs/ci.md). Its items pass as measured; its
JSON report carries, per gate, the gate's settings and planned users, and the plan's fingerprint.

The merge re-plans the gate from those records and hands the sweep every shard's pairs as finished: the
books, the checks, the combining rule and the writers run as they run for one run, so every verdict,
interval and number is the one that run would print (the response cache is not read, no model is called).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..checks import DEFAULT_CHECKS, MEASUREMENT
from ..errors import ConfigError, DataError
from ..explainers.cache import canonical_json
from ..results import (
    INCONCLUSIVE,
    GateCheck,
    GateResult,
    Interval,
    ModelInfo,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)
from ..settings import MARKER_KEYWORDS, OPTIONS, apply_marker
from ..settings.layers import YamlEntry, resolve_recorded
from ..settings.record import jsonable
from .decide import REGRESSION, not_measured

if TYPE_CHECKING:
    from ..data import Dataset, EvalCase, Item, UserHistory
    from ..explainers.base import Explanation
    from ..settings import GateSettings, Settings, Spelling
    from ..sweep import SliceSpec
    from .run import Run

# Settings that say where a run writes, how it reaches a server or caches replies, not what it measures:
# shards on other runners (other hosts, other report paths) still measure one plan.
NOT_THE_PLAN = ("shard", "json", "html", "markdown", "save_baseline", "history", "progress", "cache",
                "cache_dir", "dry_run", "require_model", "config", "host", "concurrency", "connect_timeout",
                "timeout", "retries", "api_key_env", "max_minutes", "batch", "price")


# Of those, what the merge sets itself: its own reports, no cache or history of the shards' runners.
# (A batch's prices are recorded at the batch price already: read back without the batch, not halved again.)
_WHERE_IT_WRITES = ("shard", "json", "html", "markdown", "save_baseline", "history", "progress", "cache",
                    "cache_dir", "dry_run", "config", "batch")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    @classmethod
    def of(cls, text: str | None) -> Shard | None:
        """The shard a ``shard`` setting names (already validated: ``"2/4"``), None for a whole run."""
        if not text:
            return None
        index, count = text.split("/")
        return cls(int(index), int(count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def users(self, cases: Sequence[EvalCase]) -> tuple[str, ...]:
        """The users of ``cases`` (a gate's planned cases, in the dataset's seeded order) it measures."""
        return self.mine(planned_users(cases))

    def mine(self, users: Iterable[str]) -> tuple[str, ...]:
        """Of a gate's planned users (in its order, each once), those this shard measures."""
        return tuple(user for position, user in enumerate(users) if position % self.count == self.index - 1)


def planned_users(cases: Sequence[EvalCase]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(case.user_id for case in cases))


# ------------------------------------------------------------------------------------------------ a shard
@dataclass
class Sharding:
    """How a run measures a part of its plan: a shard (``shard``), or the merge of recorded shards
    (``recorded`` pairs; ``measured`` users, None when every shard is in). The run asks it to restrict a
    slice, to record the plan beside a gate and to say what a verdict rests on."""

    shard: Shard | None = None
    recorded: Mapping[PairKey, PairResult] | None = None
    measured: frozenset[str] | None = None
    missing: tuple[Shard, ...] = ()
    # slice id -> the (user, item) cases the shards planned for it: the merge plans exactly those (a budget
    # or a pace of its own could otherwise plan others)
    planned: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def cases(self, slice_id: str, dataset: Dataset) -> tuple[EvalCase, ...]:
        """The merge's cases of a slice, as its shards planned them; () when not merging."""
        wanted = self.planned.get(slice_id, ())
        if not wanted:  # (every run but a merge: no look at the dataset's cases)
            return ()
        found = {(c.user_id, c.item_id): c for c in dataset.cases}
        lost = [case for case in wanted if case not in found]
        if lost:
            raise DataError(f"the shards planned user {lost[0][0]!r} with item {lost[0][1]!r}, which dataset "
                            f"{dataset.name!r} has not: merge with the dataset the shards read",
                            source="robustexplain merge")
        return tuple(found[case] for case in wanted)

    def restrict(self, spec: SliceSpec) -> SliceSpec:
        """The slice this run measures: a shard's users only, its full design (never stopped early)."""
        if self.shard is not None:
            return replace(spec, users=frozenset(self.shard.users(spec.cases)), sequential=None)
        if self.measured is not None:
            return replace(spec, users=frozenset(u for u in planned_users(spec.cases) if u in self.measured))
        return spec

    def deciding(self, gate: GateSettings) -> GateSettings:
        """The gate a shard's users are decided under: its fixed rules (a shard's slice never ran a
        sequential test; its verdict is only said, the merge decides)."""
        sharded = self.shard is not None and gate.decision == "sequential"
        return replace(gate, decision="mean") if sharded else gate

    def none_measured(self, gate: GateSettings, spec: SliceSpec, kind: str | None) -> Verdict | None:
        """The verdict of a shard that holds none of a gate's users (a gate of fewer users than shards):
        measured, with nothing to say; None otherwise."""
        if self.shard is None or self.shard.users(spec.cases):
            return None
        rows = tuple(GateCheck(q, t, Interval(math.nan, 0.0, 1.0, 0, 0, 1 - gate.alpha), INCONCLUSIVE)
                     for q, t in gate.thresholds(kind).items())
        return Verdict.of(INCONCLUSIVE, rows, mode=gate.decision, message="")

    def gate(self, gate: GateResult, settings: GateSettings, cases: Sequence[EvalCase]) -> GateResult:
        """A shard's gate record carries what the merge plans from: the gate's settings and planned users."""
        if self.shard is None:
            return gate
        return replace(gate, plan={"gate": settings.to_dict(),
                                   "cases": [[c.user_id, c.item_id] for c in cases]})

    def verdict(self, verdict: Verdict, spec: SliceSpec) -> Verdict:
        """A shard's verdict is no verdict (it rests on a part of the users); a merge missing shards says
        which users it could not measure and is INCONCLUSIVE where they are needed."""
        planned = planned_users(spec.cases)
        if self.shard is not None:
            mine = len(self.shard.users(spec.cases))
            return replace(verdict, outcome=INCONCLUSIVE, users_needed=None,
                           message=f"Measured for a merge: shard {self.shard} ran {mine} of the gate's "
                                   f"{len(planned)} users; robustexplain merge of every shard's JSON report "
                                   f"decides.{' Its users alone said: ' if mine else ''}{verdict.message}")
        if self.measured is None:
            return verdict
        lost = [u for u in planned if u not in self.measured]
        if not lost:
            return verdict
        several = len(self.missing) > 1
        which = f"shard{'s' if several else ''} {', '.join(str(s.index) for s in self.missing)}"
        return not_measured(verdict, f"{len(lost)} of the {len(planned)} users ({which} of "
                                     f"{self.missing[0].count}) were not measured: no report of "
                                     f"{'them' if several else 'it'} was merged.")

    def policy(self, policy: str) -> str:
        """A shard's item passes as measured (its report's INCONCLUSIVE says why); the merge gates."""
        return "pass" if self.shard is not None else policy


def shard_record(result: RunResult, shard: Shard) -> dict[str, Any]:
    """What a shard's report says of itself: which shard, the plan's fingerprint and the users it measured —
    those its gates' plans give it, whether or not a pair of theirs was left (every perturbation trivial)."""
    users = sorted({user for g in result.gates
                    for user in shard.mine(dict.fromkeys(u for u, _ in g.plan.get("cases", ())))})
    return {"shard": str(shard), "plan": fingerprint(result), "users": users}


def plan_parts(result: RunResult) -> dict[str, Any]:
    """What makes two shards' plans one: the settings that change a measurement, the metric signature, the
    seed, the dataset, each model and its digest, each gated item's settings and planned users."""
    # The options only: a report adds derived entries (history_trend) after its run is recorded.
    options = {spec.field for spec in OPTIONS} | {"dataset_name"}
    settings = {k: v for k, v in result.settings.items() if k in options and k not in NOT_THE_PLAN}
    models = sorted((m.get("name"), m.get("digest")) for m in result.models)
    items = sorted((g.nodeid, g.slice, g.model, canonical_json(_without_sources(g.plan)))
                   for g in result.gates)
    return {"settings": settings, "signature": result.signature, "seed": result.seed, "models": models,
            "items": items}


def _without_sources(plan: Mapping[str, Any]) -> dict[str, Any]:
    gate = {k: v for k, v in plan.get("gate", {}).items() if k != "sources"}
    return {**plan, "gate": gate}


def fingerprint(result: RunResult) -> str:
    return hashlib.sha256(canonical_json(plan_parts(result)).encode("utf-8")).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ the merge
@dataclass(frozen=True)
class ShardReport:
    path: str
    run: RunResult
    shard: Shard


def check_shards(reports: Sequence[tuple[str, RunResult]]) -> list[ShardReport]:
    """The shards, validated as parts of one plan: each a shard's complete report, of one plan, none twice,
    no user in two. Each refusal is one line naming the two files."""
    if not reports:
        raise ConfigError("robustexplain merge: give the shards' JSON reports")
    shards = [_shard_of(path, run) for path, run in reports]
    first = shards[0]
    seen: dict[int, ShardReport] = {}
    owner: dict[str, ShardReport] = {}
    for report in shards:
        if report.shard.count != first.shard.count:
            raise ConfigError(f"{report.path} is shard {report.shard} but {first.path} is shard "
                              f"{first.shard}: shards of one plan are counted alike")
        if report.run.shard.get("plan") != first.run.shard.get("plan"):
            raise ConfigError(f"{report.path} and {first.path} measured different plans "
                              f"({_difference(first.run, report.run)}): merge shards of one run only")
        if report.shard.index in seen:
            raise ConfigError(f"{report.path} and {seen[report.shard.index].path} are both shard "
                              f"{report.shard}: give each shard once")
        seen[report.shard.index] = report
        mine = set(report.run.shard.get("users", ()))
        stray = next((p.key.user_id for p in report.run.pairs if p.key.user_id not in mine), None)
        if stray is not None:
            raise DataError(f"holds pairs of user {stray!r}, whom it does not say it measured (edited by "
                            "hand?)", source=report.path, field="pairs")
        for user in mine:
            if user in owner:
                raise ConfigError(f"{report.path} and {owner[user].path} both measured user {user!r}: "
                                  "shards of one plan never overlap")
            owner[user] = report
    return sorted(shards, key=lambda r: r.shard.index)


def _shard_of(path: str, run: RunResult) -> ShardReport:
    shard = Shard.of(str(run.shard.get("shard", ""))) if run.shard else None
    if shard is None:
        raise ConfigError(f"{path} is not a shard's report: run each shard with --robustexplain-shard=I/N")
    if run.settings.get("partial"):
        raise ConfigError(f"{path} is a partial run (interrupted): run shard {shard} again; the response "
                          "cache keeps what it answered")
    if run.shard.get("plan") != fingerprint(run):
        raise DataError(f"its plan fingerprint {run.shard.get('plan')!r} is not the plan it records "
                        "(edited by hand?)", source=path, field="shard.plan")
    return ShardReport(path, run, shard)


def _difference(one: RunResult, other: RunResult) -> str:
    """The first part of the plan two shards disagree on, in words."""
    a, b = plan_parts(one), plan_parts(other)
    for part in ("settings", "signature", "seed", "models"):
        if a[part] != b[part]:
            if part == "settings":
                key = next(k for k in sorted({*a[part], *b[part]}) if a[part].get(k) != b[part].get(k))
                return f"settings.{key}: {a[part].get(key)!r} and {b[part].get(key)!r}"
            return f"{part}: {a[part]!r} and {b[part]!r}"
    return "their gated items, or their gates' settings or users"


def merged_sharding(shards: Sequence[ShardReport]) -> Sharding:
    """The merge's view of the shards: every pair they measured, the users they measured, the missing."""
    recorded = {pair.key: pair for report in shards for pair in report.run.pairs}
    missing = missing_shards(shards)
    measured = frozenset(u for r in shards for u in r.run.shard.get("users", ())) if missing else None
    return Sharding(recorded=recorded, measured=measured, missing=missing)


def missing_shards(shards: Sequence[ShardReport]) -> tuple[Shard, ...]:
    """The shards of the plan no report was given for."""
    count, present = shards[0].shard.count, {r.shard.index for r in shards}
    return tuple(Shard(i, count) for i in range(1, count + 1) if i not in present)


def summed_calls(shards: Iterable[ShardReport]) -> dict[str, int]:
    """The calls every shard made, counted once each (a merge makes none)."""
    calls: dict[str, int] = {}
    for report in shards:
        for name, value in report.run.calls.items():
            calls[name] = calls.get(name, 0) + int(value)
    return calls


class RecordedExplainer:
    """A model as the shards measured it: its facts from their reports; never called (the merge's pairs
    are all recorded — a call means a shard lacks a pair its users need, and says so)."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.info = ModelInfo(**{k: v for k, v in record.items() if k != "extra"},
                              extra=dict(record.get("extra") or {}))
        self.backend, self.model = self.info.backend, str(record["name"])

    async def preflight(self) -> ModelInfo:
        return self.info

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        raise DataError(f"no shard's report holds the explanation of item {item.item_id!r} for user "
                        f"{history.user_id!r} ({self.model}): merge the reports of one complete run of each "
                        "shard", source="robustexplain merge")

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        return {"recorded": self.model, "user": history.user_id, "item": item.item_id, "seed": seed,
                "repeat": repeat}

    async def aclose(self) -> None:
        return None


def restore_settings(record: Mapping[str, Any], **overrides: Any) -> Settings:
    """The settings a report recorded, read back through the option table (as a settings file's values
    are), with their sources; ``overrides`` replace fields (the merge's report paths)."""
    entries = {spec.field: YamlEntry(spec.field, record[spec.field], 0) for spec in OPTIONS
               if record.get(spec.field) not in (None, jsonable(spec.default))
               and spec.field not in _WHERE_IT_WRITES}  # a default stays one (price {} parses as none)
    settings = resolve_recorded(entries)
    sources = {**settings.sources, **{k: str(v) for k, v in (record.get("sources") or {}).items()}}
    return replace(settings, **overrides, sources=sources)


def restore_gate(settings: Settings, plan: Mapping[str, Any], nodeid: str) -> GateSettings:
    """A gate's settings as a shard recorded them, read through the marker's rules."""
    recorded = plan.get("gate", {})
    gate = apply_marker(settings, {k: recorded[k] for k in MARKER_KEYWORDS if k in recorded}, nodeid=nodeid)
    return replace(gate, sources={str(k): str(v) for k, v in (recorded.get("sources") or {}).items()})


def merged_run(shards: Sequence[ShardReport], *, spelling: Spelling, say: Callable[[str], None],
               **outputs: Any) -> tuple[Run, RunResult]:
    """The shards as one run: the gates re-planned from their records, every pair the shards measured
    handed to the sweep as finished, every item decided as one run decides it; the record's calls are
    the ones the shards made. ``outputs``: the merge's report paths (``json``, ``html``, ``markdown``) and
    its ``history`` (none by default: the shards' runners keep theirs)."""
    from .run import Run  # cycle: engine.run imports this module

    first = shards[0].run
    if first.settings.get("judge_model"):
        raise ConfigError(f"{shards[0].path}: its gates ask a faithfulness judge, whose verdicts a shard's "
                          "report does not hold yet: run that gate unsharded")
    known = {check.name for check in DEFAULT_CHECKS} | {MEASUREMENT, REGRESSION}
    for gate in first.gates:
        stranger = sorted(set(gate.verdict.findings) - known)
        if stranger:  # its verdict would be decided without that check: refused, never silently weaker
            raise ConfigError(f"{shards[0].path}: {gate.nodeid} was decided by check {stranger[0]!r} too, "
                              "which robustexplain merge does not know (a conftest's own check?): the merge "
                              "runs the checks this process registers; run that gate unsharded")
    where = {"shard": None, "cache": "off", "history": "off", **outputs}
    settings = restore_settings(first.settings, **where)
    sharding = merged_sharding(shards)
    sharding.planned = {f"{g.nodeid}::{g.model}": tuple((str(u), str(i)) for u, i in g.plan.get("cases", ()))
                        for g in first.gates}
    models = {str(m["name"]): m for m in first.models}
    recorded = {spec.field for spec in OPTIONS} | {"sources", "errors", "partial", "pairs_planned",
                                                   "models_changed", "history_trend"}
    run = Run(settings, spelling=spelling, say=say, sharding=sharding,
              extra_settings={k: v for k, v in first.settings.items() if k not in recorded},
              make_explainer=lambda model: RecordedExplainer(models[model]))
    for gate in sorted(first.gates, key=lambda g: (g.nodeid, g.model)):  # not the order a shard's xdist
        run.plan(restore_gate(settings, gate.plan, gate.nodeid), nodeid=gate.nodeid, model=gate.model,
                 slice_name=gate.slice)
    result = run.run_all()
    return run, replace(result, calls=summed_calls(shards))
