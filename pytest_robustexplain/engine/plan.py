"""What a run will do, before any call: the gated slices of a gate, their sweep specs, and their cost."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..checks import SliceDesign
from ..errors import ConfigError
from ..results import CONTROL_KIND, OVERALL, PASS, SWAP_KIND, is_control, money
from ..settings import Spelling
from ..sweep import CONTROL_SEED_OFFSET, PairPlanner, SequentialConfig, SliceSpec, grid, planned_users
from ..wording import count_noun

if TYPE_CHECKING:
    from ..checks import Check, CheckRegistry, Probe
    from ..data import Catalog, EvalCase, Item, UserHistory
    from ..metrics.user import Metric
    from ..perturbations import KindRegistry
    from ..perturbations.donors import DonorPool
    from ..settings import GateSettings, Settings
    from ..sweep import PairPlanner, SliceSpec
    from ..sweep.records import Pair

    Call = tuple[UserHistory, Item, int, int]  # the arguments the sweep gives an explainer


@dataclass(frozen=True)
class GatedSlice:
    """A slice of the sweep and how its verdict is recorded: test id, slice label and gate settings."""

    spec: SliceSpec
    nodeid: str
    slice: str  # a perturbation kind, or OVERALL for all the spec's kinds together
    gate: GateSettings


def gate_slices(gate: GateSettings) -> list[str]:
    """What one gate decides: each of its perturbation kinds, plus ``overall`` when it has several.

    The one definition both entry points use: a marked test is expanded into these items, and
    ``robustexplain run`` gates the same slices, so the two never give different answers.
    """
    kinds = list(gate.perturbations)
    return [*kinds, OVERALL] if len(kinds) > 1 else kinds


@dataclass(frozen=True)
class SliceParam:
    """What a marked test is expanded over: one model × one of :func:`gate_slices`. ``label`` is the
    item id's part (the kind; ``model-kind`` when the run gates several models), as pytest shows it and
    ``robustexplain run`` names its items."""

    model: str  # "" when no model name is configured (a test's own explainer, or none at all)
    kind: str
    label: str

    def __str__(self) -> str:
        return self.label


def expand(models: Sequence[str], gate: GateSettings) -> list[SliceParam]:
    """The items one gated test becomes: each model (or one unnamed) × each slice of the gate."""
    several = len(models) > 1
    return [SliceParam(model, kind, f"{model}-{kind}" if several else kind)
            for model in (models or ("",)) for kind in gate_slices(gate)]


@dataclass
class ItemPlan:
    """One item a door will ask about, registered before its slice is planned (the slice waits for its
    model: an xdist worker's item, or a test with its own explainer, is planned when it runs)."""

    ref: str  # the item's node id (the door's name for it)
    gate: GateSettings
    param: SliceParam
    own_explainer: bool = False
    slice_id: str = ""  # set once the slice is planned
    checks: CheckRegistry | None = None  # the checks gating it (None: the run's)


def guarded(gate: GateSettings) -> bool:
    """Whether a gate needs the cross-user controls (the guard, or the grounding gate that reads them)."""
    # The grounding gate is on by default and rides on the guard's controls; set on its own (guard off), it
    # still needs them.
    return gate.guard != "off" or gate.explicit("min_history_reference")


def noise_floor_on(settings: Settings, gate: GateSettings) -> bool:
    """Whether the gate measures the model's noise floor ("auto": when sampling, temperature > 0)."""
    return settings.temperature > 0 if gate.noise_floor == "auto" else gate.noise_floor == "on"


def calls_per_user(settings: Settings, gate: GateSettings) -> int:
    """Model calls one user costs the gate at most: the original, each kind at its severities and repeats,
    the noise-floor controls and the cross-user control."""
    severities = 1 if gate.design == "balanced" else len(gate.severities)
    return (1 + len(gate.perturbations) * severities * gate.repeats
            + (gate.repeats if noise_floor_on(settings, gate) else 0) + (1 if guarded(gate) else 0))


def users_within(settings: Settings, gate: GateSettings, users: int) -> tuple[int, str | None]:
    """``users``, or fewer so that the gate's calls fit ``max-calls``, and the note that says so (never
    fewer than two users: one decides nothing)."""
    budget = settings.max_calls
    per_user = calls_per_user(settings, gate)
    if budget is None or users * per_user <= budget:
        return users, None
    fitting, over = _fitting(users, per_user, budget)
    return fitting, (f"max-calls {budget:,}: this test's gate costs up to {per_user} calls a user, so it "
                     f"runs {fitting} of {users} users ({fitting * per_user:,} calls at most){over}; a "
                     "gate its users cannot decide is INCONCLUSIVE and says how many it would need")


def _fitting(users: int, per_user: float, budget: float) -> tuple[int, str]:
    """How many of ``users`` a budget holds at ``per_user`` (never fewer than two: one decides nothing),
    and the clause that says when even two are above it."""
    fitting = min(users, max(2, int(budget // per_user)))
    over = fitting * per_user > budget
    return fitting, " — still above it: two users are the fewest a gate can use" if over else ""


def users_within_cost(settings: Settings, gate: GateSettings, users: int, per_call: float, basis: str,
                      judged: tuple[float, str] = (0.0, "")) -> tuple[int, str | None]:
    """``users``, or fewer so that the gate's calls on each model fit ``max-cost`` at ``per_call`` (the
    most a call costs on the run's models; ``basis`` says where that figure comes from) — with ``judged``,
    what the judges' calls on a user cost at most and the clause that says so — and the note that says
    so, as :func:`users_within` does for ``max-calls``."""
    budget = settings.max_cost
    calls = calls_per_user(settings, gate)
    per_user = calls * per_call + judged[0]
    if budget is None or users * per_user <= budget:
        return users, None
    fitting, over = _fitting(users, per_user, budget)
    return fitting, (f"max-cost {budget:g}: this test's gate costs up to {money(per_user)} a user on "
                     f"a model ({calls} calls at {money(per_call)}, {basis}{judged[1]}), so it runs "
                     f"{fitting} of {users} users (≈ {money(fitting * per_user)} at most){over}; a gate its "
                     "users cannot decide is INCONCLUSIVE and says how many it would need")


def slice_spec(settings: Settings, gate: GateSettings, *, slice_id: str, model: str,
               cases: Sequence[EvalCase], kind: str | None = None,
               donor_pool: DonorPool | None = None, metrics: tuple[Metric, ...] = (),
               checks: Iterable[Check] = (), probes: Mapping[str, Probe] | None = None) -> SliceSpec:
    """The sweep slice of one gate: its cases × kinds (``kind`` alone, or all the gate's kinds when
    None) × severities × repeats, with the noise floor, the cross-user controls (donors drawn from
    ``donor_pool``), the sequential gate the settings ask for (with the stop rules of its ``checks``) and
    the user's own ``metrics`` its test measures. ``probes``: the engine's services by check name (the
    judge's), for the checks measured with one (``SliceDesign.probe``)."""
    sequential = None
    noise_floor = noise_floor_on(settings, gate)
    if gate.decision == "sequential":
        # Every check with a test of its own may end the slice early too (each says when it has one: the
        # control-based checks only when the guard enforces them, an attack when its kind is planned).
        checks, services = list(checks), probes or {}
        design = SliceDesign(gate, kind, floor_is_one=not noise_floor, cases=cases,
                             planned=planned_users(cases, gate.max_users))
        designs = {check.name: replace(design, probe=services.get(check.name)) for check in checks}
        rules = {check.name: check.stop_rules(designs[check.name]) for check in checks}
        stops = tuple(rule for mine in rules.values() for rule in mine)
        # A PASS waits until each check that passes unless shown to fail has seen the users it needs.
        hold = max((c.users_needed(designs[c.name], rules[c.name]) for c in checks), default=0)
        if hold >= design.planned:
            # A PASS waits for every planned user anyway (an enforced R): a PASS rule's test could end no
            # slice, and its alpha would only weaken its check's fixed rule (docs/statistics.md).
            stops = tuple(rule for rule in stops if rule.verdict != PASS)
        sequential = SequentialConfig(gate.thresholds(kind), alpha=gate.alpha, max_users=gate.max_users,
                                      stops=stops, hold=hold)
    # A test's own weights only re-weight ρ of its slice; the run's weights stay the reports' ρ.
    weights = gate.weights if gate.weights != settings.weights else None
    donors = donor_pool.donors(cases, settings.seed) if donor_pool is not None and guarded(gate) else {}
    return SliceSpec(slice_id=slice_id, model=model, cases=tuple(cases),
                     kinds=gate.perturbations if kind is None else (kind,), severities=gate.severities,
                     repeats=gate.repeats, seed=settings.seed, noise_floor=noise_floor,
                     sequential=sequential, weights=weights, donors=donors, design=gate.design,
                     metrics=tuple(metrics))


LARGE_PLAN_CALLS = 2000  # above this, a run says how big it is and how to shrink it before it starts


def max_calls(specs: Sequence[SliceSpec]) -> int:
    """Model calls the specs need at most (nothing cached, no perturbation trivial), shared pairs,
    originals and controls counted once: cheap, no perturbation is computed."""
    pairs: set[tuple[Any, ...]] = set()
    originals: set[tuple[Any, ...]] = set()

    for spec in specs:
        for position, case in enumerate(spec.cases):
            if spec.users is not None and case.user_id not in spec.users:
                continue  # another shard's user (its position still sets this one's severities)
            originals.add((spec.model, case.user_id, case.item_id, spec.seed))
            pairs.update((spec.model, case.user_id, case.item_id, kind, severity, repeat, spec.seed)
                         for kind, severity, repeat in grid(spec.kinds, spec.severities, spec.repeats,
                                                            position=position, design=spec.design))
            for repeat in range(spec.repeats):
                if spec.noise_floor:
                    pairs.add((spec.model, case.user_id, case.item_id, CONTROL_KIND, 0, repeat, spec.seed))
            if (case.user_id, case.item_id) in spec.donors:
                pairs.add((spec.model, case.user_id, case.item_id, SWAP_KIND, 0, 0, spec.seed))
    return len(pairs) + len(originals)


# Above this a slice is refused before it is planned: at one second a call, a million calls take 11 days,
# and planning them alone (each perturbation computed) took minutes and gigabytes (issue 41: repeats=10000).
MAX_SLICE_CALLS = 1_000_000


def check_slice_size(spec: SliceSpec, *, nodeid: str, spelling: Spelling) -> None:
    """A ConfigError when the slice's calls, bounded by arithmetic before anything is allocated (users ×
    (kinds × severities + a noise floor + a control) × repeats), exceed :data:`MAX_SLICE_CALLS`."""
    bound = len(spec.cases) * ((len(spec.kinds) * len(spec.severities) + 2) * spec.repeats + 1)
    if bound > MAX_SLICE_CALLS:
        sizes = " × ".join(f"{n} {one if n == 1 else many}" for n, one, many in (
            (len(spec.cases), "user", "users"), (len(spec.kinds), "kind", "kinds"),
            (len(spec.severities), "severity", "severities"), (spec.repeats, "repeat", "repeats")))
        raise ConfigError(
            f"{nodeid}: its gate would plan up to {bound:,} model calls ({sizes}); more than "
            f"{MAX_SLICE_CALLS:,} is refused. Shrink it with {spelling.flag('repeats')}, "
            f"{spelling.flag('users')} or {spelling.flag('severities')}.")


def large_plan_note(calls: int, *, spelling: Spelling) -> str | None:
    """What a run above :data:`LARGE_PLAN_CALLS` model calls says before it starts, or None."""
    if calls <= LARGE_PLAN_CALLS:
        return None
    return (f"this run plans up to {calls:,} model calls (above {LARGE_PLAN_CALLS:,}); on a real model that "
            f"can take hours. Shrink it with {spelling.flag('users')}=N, {spelling.flag('severities')}=1,3,5 "
            f"or {spelling.flag('perturbations')}=..., or stop early with {spelling.flag('decision')}="
            "sequential; the "
            "response cache makes a rerun free.")


@dataclass(frozen=True)
class SlicePlan:
    """What a slice will cost, before any call: its pairs and the model calls they need at most."""

    slice_id: str
    model: str
    pairs: int  # perturbation pairs to run
    trivial: int  # planned pairs skipped because the perturbation left the history unchanged
    controls: int  # noise-floor pairs (same history, resampled)
    originals: int  # original explanations (one per user with anything to run)
    swaps: int = 0  # cross-user controls (the item explained for a donor user), one per case
    judge_calls: int = 0  # the faithfulness judge's calls at most (judge-model), not model calls

    @property
    def planned(self) -> int:
        """Every (user, kind, severity, repeat) combination, skipped ones included."""
        return self.pairs + self.trivial

    @property
    def max_calls(self) -> int:
        """Model calls if nothing is cached (shared originals counted once per slice)."""
        return self.pairs + self.controls + self.swaps + self.originals


def dry_run_lines(plans: Sequence[SlicePlan], labels: Mapping[str, str], calls: int, *,
                  noun: str = "gated item", design: Sequence[str] = (), judge_model: str | None = None,
                  cached: int | None = None) -> list[str]:
    """The one rendering of ``--dry-run``, for both doors: the total (with the ``cached`` calls the response
    cache already answers, when it can tell), the design lines the door adds (the CLI's protocol and grid),
    then each plan on one line under the door's label for it (pytest: the node id and model of each gated
    item; ``robustexplain run``: each model's largest slice, by model)."""
    count = count_noun(len(plans), noun)
    # "at most 540 model calls" when 340 were in the cache read as 540 to pay for (issue 43).
    hits = ("cache hits are free" if cached is None else f"{min(cached, calls):,} already in the response "
            f"cache, so at most {max(calls - cached, 0):,} to make")
    lines = [f"dry run — no model is called: {count}, at most {calls:,} model calls in all (shared originals "
             f"and pairs counted once; {hits})", *design]
    width = max((len(labels[p.slice_id]) for p in plans), default=0) + 1
    for plan in plans:
        skipped = f" ({plan.trivial} leave the history unchanged and are skipped)" if plan.trivial else ""
        extra = f" · {plan.swaps} cross-user controls (guard)" if plan.swaps else ""
        extra += f" · {plan.controls} noise-floor pairs" if plan.controls else ""
        judge = f" · at most {plan.judge_calls} judge calls" if plan.judge_calls else ""
        judge += f" ({judge_model})" if judge and judge_model else ""
        label = f"{labels[plan.slice_id]}:"
        lines.append(f"  {label:<{width}} {plan.planned} pairs planned{skipped}{extra} · at most "
                     f"{plan.max_calls} model calls{judge}")
    return lines


def plan_slices(slices: Sequence[GatedSlice], catalog: Catalog, kinds: KindRegistry | None = None, *,
                judge: str | None = None, planner: PairPlanner | None = None, judges: int = 1
                ) -> list[SlicePlan]:
    """Plan the slices exactly as the sweep will (the same :class:`~pytest_robustexplain.sweep.PairPlanner`),
    without a sweep, an explainer or a model call; ``judge`` is the judge's scope when it is on, asked of
    ``judges`` models. A ``planner`` passed in keeps the planned pairs (:func:`planned_calls` reads them)."""
    from .judging import planned_judge_calls  # cycle: engine.judging imports this module

    planner = planner if planner is not None else PairPlanner(catalog, kinds)
    plans = []
    for entry in slices:
        spec = entry.spec
        cases = [c for c in spec.cases if spec.users is None or c.user_id in spec.users]  # a shard's own
        planned = planner.plan(spec, [c.user_id for c in cases])
        perturbed = [p for p in planned.pairs if not is_control(p.key.kind)]
        users = {p.key.user_id for p in perturbed}
        controls = len(cases) * spec.repeats if spec.noise_floor else 0
        if controls:
            users |= {c.user_id for c in cases}
        donors = [user for user, _ in spec.donors if spec.users is None or user in spec.users]
        swaps = len(donors)
        users |= set(donors)
        judged = 0 if judge is None else judges * planned_judge_calls(len(cases), judge,
                                                                      len(perturbed) + controls + swaps)
        plans.append(SlicePlan(spec.slice_id, spec.model, len(perturbed), planned.trivial, controls,
                               len(users), swaps, judged))
    return plans


def planned_calls(planner: PairPlanner) -> dict[str, Iterator[Call]]:
    """Every model call the planned pairs make, by model, each once — the original of each (user, item,
    seed) and each pair's other explanation — as ``(history, item, seed, repeat)``, the arguments the sweep
    passes the explainer (``Sweep._run_pair``), so a dry run can look them up in the response cache. Made
    one at a time as they are read: a perturbed history the planner did not keep is made again and let go."""
    calls: dict[str, dict[tuple[Any, ...], Call | Pair]] = {}
    for pair in planner.pairs.values():
        case, key, seed = pair.case, pair.key, pair.sample_seed
        mine = calls.setdefault(key.model, {})
        mine.setdefault(("original", case.user_id, case.item_id, seed), (case.history, case.item, seed, 0))
        other: Call | Pair = pair  # a perturbation pair: its perturbed history, when its call is read
        if pair.donor is not None:
            other = (pair.donor.history, case.item, seed, key.repeat)
        elif key.kind == CONTROL_KIND:
            other = (case.history, case.item, seed + CONTROL_SEED_OFFSET + key.repeat, key.repeat)
        mine[(key.kind, key.severity, key.repeat, case.user_id, case.item_id, seed)] = other
    return {model: (c if isinstance(c, tuple) else planner.perturbed_call(c) for c in found.values())
            for model, found in calls.items()}
