"""What a run records: the pairs and gates it decided or another process reported (an xdist worker's
items, :meth:`RunRecord.merge` of its :meth:`RunRecord.payload`), the models' facts, and the one
:class:`~pytest_robustexplain.results.RunResult` the reports read. A part of :class:`.run.Run`, kept in a
module of its own (issue 60: no module over 600 lines); it reads the run's state, declared below."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from ..explainers.base import ANSWERED_AS, INFERRED_CONTEXT, MODEL_FINDINGS
from ..explainers.cache import WRITING_MODES
from ..results import (
    GateResult,
    ModelInfo,
    PairKey,
    PairResult,
    Robustness,
    RunResult,
    add_tokens,
    gate_from_dict,
    merge_pairs,
    pair_from_dict,
    plain,
)
from .pace import pace_lines, remember_pace
from .reports import model_record, run_record
from .shards import shard_record

if TYPE_CHECKING:
    from ..data import Dataset
    from ..settings import Settings
    from ..store import Store
    from ..sweep import SliceSpec, Sweep
    from .judging import RunJudge
    from .plan import GatedSlice
    from .shards import Sharding


class RunRecord:
    """The record half of a :class:`.run.Run` (which sets every attribute declared here)."""

    settings: Settings
    sharding: Sharding
    extra_settings: dict[str, Any]
    kept: Store
    judging: RunJudge
    model_infos: dict[str, ModelInfo]
    gates: list[GateResult]
    pairs: dict[PairKey, PairResult]
    metric_tags: set[str]
    counters: dict[str, int]
    judge_tokens: dict[str, dict[str, int]]
    errors: list[str]
    started: float
    started_at: str
    _sweep: Sweep | None
    _slices: dict[str, GatedSlice]
    _dataset: Dataset | None
    _dataset_elsewhere: str | None
    _changed: dict[str, str]
    _changed_elsewhere: dict[str, str]
    _worker_findings: dict[tuple[str, str], dict[str, Any]]

    @property
    def slots(self) -> int:
        """Calls in flight at once: ``concurrency`` per host (each host has its own)."""
        return self.settings.concurrency * max(1, len(self.settings.hosts))

    def note_error(self, message: str) -> None:
        """Keep why a slice could not be decided, for the record (once per message)."""
        if message not in self.errors:
            self.errors.append(message)

    def merge(self, payload: Mapping[str, Any], *, source: str) -> None:
        """Add what another process decided (an xdist worker's item): pairs, gate and model facts."""
        for data in payload.get("pairs", []):
            self.keep(pair_from_dict(data, source=source))
        self.metric_tags.update(str(tag) for tag in payload.get("metric_tags", []))
        if "gate" in payload:
            self.gates.append(gate_from_dict(payload["gate"], source=source))
        for name, info in payload.get("models", {}).items():
            self.model_infos.setdefault(name, ModelInfo(**info))
            self._adopt_findings(name, info.get("extra") or {}, str(payload.get("worker", source)))
        for name, value in payload.get("counters", {}).items():
            self.counters[name] = self.counters.get(name, 0) + int(value)
        self.judge_tokens = add_tokens(self.judge_tokens, payload.get("judge_tokens", {}))
        self._changed_elsewhere.update({str(k): str(v) for k, v in payload.get("models_changed", {}).items()})
        self.judging.adopt(payload.get("judge", {}), payload.get("judges"))
        if isinstance(payload.get("dataset"), str):  # an xdist controller never loads the dataset itself
            self._dataset_elsewhere = payload["dataset"]
        for message in payload.get("errors", []):
            self.note_error(str(message))

    def _adopt_findings(self, name: str, extra: Mapping[str, Any], worker: str) -> None:
        """What a model's replies showed in another process (``explainers/remote.py``): the context its
        counts gave away and the model names its replies gave. Each worker's latest item carries its
        findings so far; the record keeps the smallest context any worker found and every name's replies
        summed over the workers."""
        found = {key: extra[key] for key in MODEL_FINDINGS if isinstance(extra.get(key), dict)}
        if not found:
            return
        self._worker_findings[(name, worker)] = found
        mine = [f for (model, _), f in self._worker_findings.items() if model == name]
        combined = dict(self.model_infos[name].extra)
        contexts = [f[INFERRED_CONTEXT] for f in mine if INFERRED_CONTEXT in f]
        if contexts:
            combined[INFERRED_CONTEXT] = min(contexts, key=lambda c: int(c.get("tokens", 0)))
        answered: dict[str, int] = {}
        for f in mine:
            for said, count in f.get(ANSWERED_AS, {}).items():
                answered[str(said)] = answered.get(str(said), 0) + int(count)
        if answered:
            combined[ANSWERED_AS] = answered
        self.model_infos[name] = replace(self.model_infos[name], extra=combined)

    def payload(self, result: Robustness, nodeid: str) -> dict[str, Any]:
        """What :meth:`merge` reads in another process: JSON-native, decoded by the records' own readers."""
        gate = next(g for g in reversed(self.gates) if g.nodeid == nodeid)
        info = self.model_infos.get(result.model)
        # The run-weighted versions (what the reports show), not the slice's own re-weighting.
        pairs = [self.pairs[p.key] for p in (*result.pairs, *result.controls, *result.swaps)]
        judge = self.judging.info
        planned = self._slices.get(f"{nodeid}::{result.model}")
        tags = sorted(m.tag for m in planned.spec.metrics) if planned is not None else []
        # "worker": which process made the calls, so a controller can count calls two workers both made.
        return plain({"pairs": [p.to_dict() for p in pairs], "gate": gate.to_dict(), "metric_tags": tags,
                      "worker": os.getpid(),
                      "models": {result.model: asdict(info)} if info is not None else {},
                      "judge": asdict(judge) if judge is not None else {},
                      "judges": {m: asdict(i) for m, i in self.judging.infos.items()},
                      **({"dataset": self._dataset.name} if self._dataset is not None else {})})

    def keep(self, pair: PairResult) -> None:
        """Record a decided pair for the reports; a pair two tests share keeps the user metrics of both."""
        self.pairs[pair.key] = merge_pairs(self.pairs.get(pair.key), pair)

    def call_counters(self) -> dict[str, int]:
        """This process's call counters (what an xdist worker reports at its end)."""
        return {**(self._sweep.counters.to_dict() if self._sweep is not None else {}),
                **self.judging.counters()}

    def record(self, *, partial: bool = False) -> RunResult | None:
        """The whole run as one record for the reports; None when nothing was decided and nothing failed
        (a run whose every call failed is recorded: its counters and ``errors`` say what happened)."""
        if not self.pairs and not self.gates and not self.errors:
            return None
        result = self._record(partial=partial, pairs=sorted(self.pairs.values(), key=lambda p: p.key))
        if not partial:
            self._remember_pace(result)
        return result

    def _remember_pace(self, result: RunResult) -> None:
        """Record each model's pace in the cache directory, for a later dry run's time estimate."""
        if self.settings.cache in WRITING_MODES:
            remember_pace(self.kept, result, backend=self.settings.backend, concurrency=self.slots)
            self.judging.remember(result)

    def pace_lines(self) -> list[str]:
        """What each planned model's calls will take at the pace a previous run recorded (dry runs)."""
        by_model: dict[str, list[SliceSpec]] = {}
        for planned in self._slices.values():
            by_model.setdefault(planned.spec.model, []).append(planned.spec)
        return pace_lines(self.kept, self.settings.backend, by_model, self.settings.max_minutes,
                          self.settings.price)

    def _record(self, *, partial: bool, pairs: Sequence[PairResult] = ()) -> RunResult:
        counters = dict(self.counters)
        for name, value in self.call_counters().items():
            counters[name] = counters.get(name, 0) + value
        extra = {**self.extra_settings, **self.judging.record()}
        # What `robustexplain compare` checks two runs share, from both doors and from xdist workers.
        dataset_name = self._dataset.name if self._dataset is not None else self._dataset_elsewhere
        if dataset_name is not None:
            extra.setdefault("dataset_name", dataset_name)
        if self._changed:
            extra["models_changed"] = sorted(self._changed)
        if self.errors:
            extra["errors"] = list(self.errors)
        if partial:
            extra.update(partial=True, pairs_planned=self._sweep.counters.pairs_total if self._sweep else 0)
        result = run_record(self.settings, models=[model_record(name, self.model_infos[name])
                                                   for name in self._models_in_order()],
                            pairs=pairs, gates=self.gates, calls=counters, extra=extra,
                            started=self.started, started_at=self.started_at, metric_tags=self.metric_tags,
                            judge_tokens=add_tokens(self.judge_tokens, self.judging.tokens()))
        shard = self.sharding.shard
        return result if shard is None else replace(result, shard=shard_record(result, shard))

    def _models_in_order(self) -> list[str]:
        """The models as the settings list them (an xdist controller learns of them in the order its workers
        report, and the comparison's direction follows this order), then any other, as first seen."""
        named = [m for m in self.settings.model if m in self.model_infos]
        return named + [m for m in self.model_infos if m not in named]
