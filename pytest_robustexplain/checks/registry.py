"""The checks a run decides with, in order: the built-ins, then what the Python API added for the process
(:func:`register_check`), then what this session's conftests registered (the hook
``pytest_robustexplain_register_checks``) — the last two layered like perturbation kinds, so a conftest's
check never leaks into another session in the same process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..metrics.api import BUILTIN_METRICS
from ..metrics.user import RESERVED, make_metric
from ..options import hint
from ..results import ALL_METRICS, KIND_NAME, METRICS
from .attacks import Hijack, Injection
from .base import MEASUREMENT, Check
from .copying import Copying
from .grounding import Grounding
from .judge import Faithfulness
from .polarity import Flip, Polarity
from .predicate import PredicateCheck
from .relative import Relative
from .sections import SECTIONS, Section, own_section, section_named
from .sensitivity import Sensitivity
from .stability import Stability

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ..metrics.user import Metric
    from ..results import Finding
    from .base import Gate
    from .predicate import Predicate

# The order in which an item's checks are decided (the combining rule reads them in this order): the
# paper's stability first, the attacks, the cross-user control's four, then what reads the text after the
# "not measured" rules — the flip, the judge, polarity — and the user's own checks last.
BUILTIN: tuple[Check, ...] = (Stability(), Injection(), Hijack(), Sensitivity(), Relative(), Copying(),
                              Grounding(), Flip(), Faithfulness(), Polarity())


# The checks the writers show in sections of their own; every other check's row is in their checks table.
SECTIONED: frozenset[str] = frozenset({*(c.name for c in BUILTIN if c.section), MEASUREMENT})


def sections(checks: Iterable[Check], findings: Iterable[Finding] = ()
             ) -> list[tuple[Section, list[Check], list[Finding]]]:
    """The report's sections in the writers' order, each with the checks giving its rows in row order (the
    table of further checks with none: its rows are the other checks' findings), and the rows of checks not
    among ``checks`` that name it (``Finding.section``: a conftest's check, a report read elsewhere)."""
    known = {c.name: c for c in checks}
    members: dict[str, list[Check]] = {}
    for check in known.values():
        if own_section(check.section):
            members.setdefault(str(check.section), []).append(check)
    foreign: dict[str, list[Finding]] = {}
    for f in findings:
        placed = section_of(f, known)
        if f.check not in known and placed is not None:
            foreign.setdefault(placed, []).append(f)
    listed = {s.name for s in SECTIONS}
    named = [*SECTIONS, *(section_named(n) for n in {**members, **foreign} if n not in listed)]
    out = []
    for section in named:
        ranked = sorted(members.get(section.name, ()), key=lambda c: (
            section.order.index(c.name) if c.name in section.order else len(section.order)))
        out.append((section, ranked, foreign.get(section.name, [])))
    return out


def section_of(f: Finding, known: Mapping[str, Check]) -> str | None:
    """The section of its own a finding's rows stand in — its check's when the writer has the check, else
    the one the row names — or None (the table of further checks)."""
    name = known[f.check].section if f.check in known else f.section
    return name if own_section(name) else None


def further(checks: Iterable[Check], findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """The rows of the table of further checks: every finding but stability's (the writers' own tables),
    the measurement's and those standing in a section of their own (:func:`sections`)."""
    known = {c.name: c for c in checks}
    return tuple(f for f in findings
                 if f.check not in (MEASUREMENT, Stability.name) and section_of(f, known) is None)


class CheckRegistry:
    """Checks by name, over a base registry (the process's) whose checks come first; and the user's own
    metrics (``metrics.user``), registered the same way and layered the same way."""

    def __init__(self, checks: tuple[Check, ...] = (), *, base: CheckRegistry | None = None,
                 metrics: tuple[Metric, ...] = ()) -> None:
        self.base = base
        self._own: dict[str, Check] = {}
        self._metrics: dict[str, Metric] = {m.name: m for m in metrics}
        for check in checks:
            self.add(check)

    def metrics(self) -> tuple[Metric, ...]:
        """The metrics of the tests this registry serves: the paper's four (``Metric.builtin``), then the
        user's, the process's first."""
        return (*(self.base.metrics() if self.base is not None else ()), *self._metrics.values())

    def register_metric(self, name: Any, fn: Any = None, *, version: Any = None, batch: Any = None,
                        description: str = "") -> None:
        """Add a metric ``fn(e, e_prime) -> float in [0, 1]`` (or ``batch=``) under ``name@version``."""
        metric = make_metric(name, fn, version=version, batch=batch, description=description)
        known = tuple(m.name for m in self.metrics() if not m.builtin)
        if metric.name in known:
            raise ConfigError(f"metric {metric.name!r} is registered already (metrics: {', '.join(known)})")
        self._metrics[metric.name] = metric

    def __iter__(self) -> Iterator[Check]:
        if self.base is not None:
            yield from self.base
        yield from self._own.values()

    def __contains__(self, name: object) -> bool:
        return any(check.name == name for check in self)

    def names(self) -> tuple[str, ...]:
        return tuple(check.name for check in self)

    def add(self, check: Check) -> None:
        """Register a check object (a :class:`Check` subclass instance)."""
        name = getattr(check, "name", "")
        if not isinstance(check, Check):
            raise ConfigError("a check must be a pytest_robustexplain.checks.Check, got "
                              f"{type(check).__name__}")
        if not isinstance(name, str) or not KIND_NAME.match(name):
            raise _bad_name(name)
        if name in self or name == MEASUREMENT:
            raise ConfigError(f"check {name!r} is registered already (checks: {', '.join(self.names())})")
        if name in RESERVED and check not in BUILTIN:  # a row beside the metric's, under one name
            raise ConfigError(f"check {name!r}: the name of a built-in metric or quantity "
                              f"({', '.join(sorted(RESERVED))}); name the check otherwise")
        _check_declared_limit(check)
        if check.options and check not in BUILTIN:
            # The option table is made when pytest adds its options, before a conftest registers a check.
            declared = ", ".join(spec.name for spec in check.options)
            raise ConfigError(f"check {name!r} declares options ({declared}): only the built-in checks can; "
                              "give yours a limit (default_limit), set per test with check_limits")
        self._own[name] = check

    def register(self, name: Any, predicate: Predicate | None = None, *, max_rate: float = 0.0,
                 description: str = "") -> None:
        """``register(name, predicate, max_rate=…, description=…)`` for a per-explanation predicate;
        ``register(check)`` for a :class:`Check` object."""
        if isinstance(name, Check):
            self.add(name)
            return
        if not isinstance(name, str) or not KIND_NAME.match(name):
            raise _bad_name(name)
        if predicate is None:
            raise ConfigError(f"check {name!r}: give a predicate (text, history, item) -> bool, or a Check")
        self.add(PredicateCheck(name, predicate, max_rate=max_rate, description=description))


def _check_declared_limit(check: Check) -> None:
    limit, bound = check.default_limit, check.limit_bound
    if limit is not None and not (isinstance(limit, (int, float)) and not isinstance(limit, bool)
                                  and 0 <= limit <= 1):
        raise ConfigError(f"check {check.name!r}: default_limit must be a number between 0 and 1 or None, "
                          f"got {limit!r:.40}")
    if bound not in ("max", "min"):
        raise ConfigError(f"check {check.name!r}: limit_bound must be 'max' or 'min', got {bound!r:.40}")


def check_limits_known(limits: Mapping[str, float], registry: Iterable[Check], where: str) -> None:
    """Refuse a ``check-limits`` entry for a check the test does not have, or one that declares no limit
    (the method's checks have settings of their own), naming the one meant."""
    checks = list(registry)
    limited = tuple(c.name for c in checks if c.default_limit is not None)
    for name in limits:
        if name in limited:
            continue
        if any(c.name == name for c in checks):
            raise ConfigError(f"{where}: check-limits names {name!r}, whose limits are settings of their own "
                              "(check-limits is for the checks you register)")
        said = hint(name, limited) if limited else " (this test has no check of your own)"
        raise ConfigError(f"{where}: check-limits names {name!r}, which is not a registered check{said}")


def metric_names_known(gate: Gate, registry: CheckRegistry, ref: str) -> None:
    """Refuse a user metric that a test's ``min_metric`` (per kind too) or ``weights`` names but its
    conftests did not register, naming the one meant."""
    known = tuple(m.name for m in registry.metrics() if not m.builtin)  # the four: refused before
    gated = {m for kind in (None, *gate.per_kind) for m in gate.gated_metrics(kind)} - set(METRICS)
    weighted = set(gate.weights) - set(ALL_METRICS) if isinstance(gate.weights, Mapping) else set()
    for setting, names in (("min_metric", gated), ("weights", weighted)):
        for name in sorted(names - set(known)):
            said = hint(name, known) if known else " (this test has no metric of your own)"
            where = gate.sources.get(setting, setting)
            raise ConfigError(f"{ref}: {where}: {setting} names {name!r}, which is not a registered "
                              f"metric{said}")


def _bad_name(name: object) -> ConfigError:
    return ConfigError(f"check name {name!r}: use lower-case letters, digits and underscores, starting with "
                       "a letter")


DEFAULT_CHECKS = CheckRegistry(base=CheckRegistry(BUILTIN, metrics=BUILTIN_METRICS))


def register_check(name: Any, predicate: Predicate | None = None, *, max_rate: float = 0.0,
                   description: str = "") -> None:
    """Add a check for every run in this process (a conftest uses the hook instead: its session only)."""
    DEFAULT_CHECKS.register(name, predicate, max_rate=max_rate, description=description)


def register_metric(name: Any, fn: Any = None, *, version: Any = None, batch: Any = None,
                    description: str = "") -> None:
    """Add a metric for every run in this process (a conftest uses the hook's ``register_metric``)."""
    DEFAULT_CHECKS.register_metric(name, fn, version=version, batch=batch, description=description)
