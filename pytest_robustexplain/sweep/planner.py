"""Which pairs a slice has, as pure functions of the slice and the catalog — no event loop, no explainer, no
scorer. The :class:`PairPlanner` is what the sweep plans with, what a dry run prices with and what an
unmarked test's ``robustness_perturbations`` lists, so the three never disagree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..results import CONTROL_KIND, SWAP_KIND, PairKey
from .records import Pair

if TYPE_CHECKING:
    from ..data import Catalog, EvalCase
    from ..perturbations import KindRegistry, PerturbationResult
    from .records import SliceSpec


DESIGN_FULL = "full"
DESIGN_BALANCED = "balanced"


def kind_offset(kind: str) -> int:
    """Where ``kind`` starts the rotation of severities: its place among the five kinds of the method, a
    stable digest of its name for a registered kind (the same in every slice and every process)."""
    from ..perturbations import KINDS  # lazy: loads numpy

    if kind in KINDS:
        return KINDS.index(kind)
    return int.from_bytes(hashlib.sha256(kind.encode("utf-8")).digest()[:4], "big")


def severities_for(kind: str, position: int, severities: Sequence[int], design: str) -> tuple[int, ...]:
    """The severities the case at ``position`` (in the slice's cases) runs of ``kind``: all of them in the
    full design; in the balanced design one, rotated over the cases and shifted per kind, so that every
    (kind, severity) is run by every len(severities)-th user and each user meets several severities."""
    if design != DESIGN_BALANCED or not severities:
        return tuple(severities)
    return (severities[(position + kind_offset(kind)) % len(severities)],)


def grid(kinds: Sequence[str], severities: Sequence[int], repeats: int, *, position: int = 0,
         design: str = DESIGN_FULL) -> Iterator[tuple[str, int, int]]:
    """Every (kind, severity, repeat) the case at ``position`` runs, in the plan's order: kind, then
    severity, then repeat."""
    for kind in kinds:
        for severity in severities_for(kind, position, severities, design):
            for repeat in range(repeats):
                yield kind, severity, repeat


def perturb(case: EvalCase, kind: str, severity: int, repeat: int, *, seed: int,
            catalog: Catalog, kinds: KindRegistry | None = None) -> PerturbationResult:
    """The case's history under one perturbation: a pure function of these arguments (``kinds``: the
    run's registry of kinds; default the process's)."""
    from ..perturbations import apply_perturbation  # lazy: loads numpy

    return apply_perturbation(case.history, kind, severity, catalog=catalog, seed=seed, item_id=case.item_id,
                              repeat=repeat, kinds=kinds)


def perturbations_of(cases: Sequence[EvalCase], kinds: Sequence[str], severities: Sequence[int],
                     repeats: int, *, seed: int, catalog: Catalog,
                     design: str = DESIGN_FULL, registry: KindRegistry | None = None
                     ) -> list[PerturbationResult]:
    """The perturbations a slice of these cases would run, in the plan's order (case, kind, severity,
    repeat), without the trivial ones (those that left the history unchanged)."""
    results = (perturb(case, kind, severity, repeat, seed=seed, catalog=catalog, kinds=registry)
               for position, case in enumerate(cases)
               for kind, severity, repeat in grid(kinds, severities, repeats, position=position,
                                                  design=design))
    return [result for result in results if not result.identical]


@dataclass
class PlannedSlice:
    """A slice's pairs (controls included), in its users' order, and how many it skipped as trivial."""

    pairs: list[Pair]
    trivial: int = 0


@dataclass
class PairPlanner:
    """Plans the pairs of slices, deduplicated across every slice it has planned: a pair two slices share
    (same model, user, item, kind, severity, repeat and seed) is one :class:`Pair`, run once."""

    catalog: Catalog
    kinds: KindRegistry | None = None  # the run's registry of kinds (None: the process's)
    pairs: dict[tuple[Any, ...], Pair] = field(default_factory=dict)
    # Whether a planned pair keeps its perturbed history. A dry run prices every pair and keeps none: held,
    # 150,000 of them made a 6,000-user plan 1.5 GB and the collector's passes over them a third of its
    # time. A pair without it is perturbed again when its call is asked for (:meth:`perturbed_call`).
    keep: bool = True

    def plan(self, spec: SliceSpec, users_order: Sequence[str]) -> PlannedSlice:
        """The slice's pairs, user by user in ``users_order``: perturbations (trivial ones skipped),
        the noise-floor controls and the cross-user control of each case."""
        positions = {c.user_id: i for i, c in enumerate(spec.cases)}
        out = PlannedSlice([])
        for user in users_order:
            position = positions[user]
            out.trivial += self._plan_case(spec, spec.cases[position], position, out.pairs)
        return out

    def _plan_case(self, spec: SliceSpec, case: EvalCase, position: int, planned: list[Pair]) -> int:
        trivial = 0
        # Look the pair up before perturbing: a shared pair's perturbation was computed by the first slice.
        for kind, severity, repeat in grid(spec.kinds, spec.severities, spec.repeats, position=position,
                                           design=spec.design):
            pair = self.pairs.get(self._ident(spec, case, kind, severity, repeat))
            if pair is None:
                pair = self._new_pair(spec, case, kind, severity, repeat)
            if pair is None:
                trivial += 1
            else:
                planned.append(pair)
        if spec.noise_floor:
            planned += [self._control(spec, case, CONTROL_KIND, repeat) for repeat in range(spec.repeats)]
        donor = spec.donors.get((case.user_id, case.item_id))
        if donor is not None:
            planned.append(self._control(spec, case, SWAP_KIND, 0, donor=donor))
        return trivial

    @staticmethod
    def _ident(spec: SliceSpec, case: EvalCase, kind: str, severity: int, repeat: int) -> tuple[Any, ...]:
        return (spec.model, case.user_id, case.item_id, kind, severity, repeat, spec.seed)

    def _new_pair(self, spec: SliceSpec, case: EvalCase, kind: str, severity: int, repeat: int
                  ) -> Pair | None:
        key = PairKey(spec.model, case.user_id, case.item_id, kind, severity, repeat)
        if not self.keep and self._surely_changes(kind, case):
            pair = Pair(key, case, None, spec.seed)  # priced unperturbed: it cannot be trivial
            self.pairs[self._ident(spec, case, kind, severity, repeat)] = pair
            return pair
        pert = perturb(case, kind, severity, repeat, seed=spec.seed, catalog=self.catalog, kinds=self.kinds)
        if pert.identical:
            return None  # not kept: the next slice that asks recomputes it and counts it trivial too
        pair = Pair(key, case, pert if self.keep else None, spec.seed)
        self.pairs[self._ident(spec, case, kind, severity, repeat)] = pair
        return pair

    def _surely_changes(self, kind: str, case: EvalCase) -> bool:
        """Whether the kind says it surely changes the case's history (``Perturbation.changes``): a dry run
        then need not make the perturbation to know the pair is not trivial (four of the method's five
        kinds can say so)."""
        from ..perturbations import DEFAULT_REGISTRY  # lazy: loads numpy

        registry = self.kinds or DEFAULT_REGISTRY
        try:
            changes = registry.entry(registry.canonical(kind)).changes
        except (ConfigError, KeyError):
            return False  # perturbing says what is wrong with it
        return changes is not None and changes(case.history, self.catalog)

    def perturbed_call(self, pair: Pair) -> tuple[Any, Any, int, int]:
        """A perturbation pair's second call as the sweep makes it — ``(history, item, seed, repeat)`` —
        from its kept perturbation, or perturbed again (a pure function of the pair's keys)."""
        key, case = pair.key, pair.case
        perturbation = pair.perturbation or perturb(case, key.kind, key.severity, key.repeat,
                                                    seed=pair.sample_seed, catalog=self.catalog,
                                                    kinds=self.kinds)
        return perturbation.perturbed, case.item, pair.sample_seed, key.repeat

    def _control(self, spec: SliceSpec, case: EvalCase, kind: str, repeat: int, **extra: Any) -> Pair:
        severity = 0
        key = PairKey(spec.model, case.user_id, case.item_id, kind, severity, repeat)
        return self.pairs.setdefault(self._ident(spec, case, kind, severity, repeat),
                                     Pair(key, case, None, spec.seed, **extra))
