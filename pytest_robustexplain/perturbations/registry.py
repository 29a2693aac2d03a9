"""Registries of perturbation kinds and of attack payload families.

A :class:`KindRegistry` maps names and aliases to perturbation functions and holds the payload families
the injection kind plants. :data:`DEFAULT_REGISTRY` holds the built-ins and what the Python API registers
(:func:`register_perturbation`, :func:`register_payload`: a process's own choice, as
``warnings.filterwarnings`` is). A pytest run owns a ``KindRegistry(base=DEFAULT_REGISTRY)`` that adds what
its conftests register through the ``pytest_robustexplain_register_perturbations`` hook: those live and die
with that run, so two sessions in one process (pytester's inline runs, an IDE's re-run) never see each
other's kinds or payloads, nor refuse the second registration of the same name.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data import Catalog, UserHistory
from ..errors import ConfigError
from ..results import CONTROL_KINDS, COUNTS_PROPORTIONAL, KIND_NAME

PerturbationFn = Callable[[UserHistory, int, Catalog, np.random.Generator],
                          tuple[UserHistory, dict[str, Any]]]
"""A perturbation: ``(history, severity, catalog, rng) -> (new_history, changes)``."""

_FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Perturbation:
    """A registered perturbation kind. ``takes_payloads``: the function also takes ``payloads=`` (the
    registry's payload families), as the built-in injection does; ``takes_counts``: it also takes
    ``counts=`` (the registry's rule for how many items to insert), as noise and dilution do."""

    name: str
    fn: PerturbationFn
    aliases: tuple[str, ...]
    builtin: bool
    takes_payloads: bool = False
    takes_counts: bool = False
    # Says, without perturbing, that the kind surely changes this history over this catalog and raises
    # nothing (noise and dilution insert at least one item): a dry run prices such a pair without making its
    # perturbed history. None: it cannot tell, the pair is perturbed.
    changes: Callable[[UserHistory, Catalog], bool] | None = None


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


class KindRegistry:
    """Perturbation kinds (names, aliases, functions) and payload families (name → template), each layered
    over ``base``: a look-up falls through to it, a registration never changes it (module docstring).
    ``counts`` is the run's rule for the kinds that insert items (``"proportional"`` or ``"paper"``), the
    registry's own — a run that takes the paper's counts layers a registry over the one it was given."""

    def __init__(self, base: KindRegistry | None = None, *, counts: str = COUNTS_PROPORTIONAL) -> None:
        self._base = base
        self.counts = counts
        self._entries: dict[str, Perturbation] = {}
        self._lookup: dict[str, str] = {}  # every accepted spelling (names and aliases) -> canonical name
        self._payloads: dict[str, str] = {}
        self._lock = threading.Lock()

    def _all(self) -> dict[str, Perturbation]:
        return {**(self._base._all() if self._base else {}), **self._entries}

    def _spelling(self, name: str) -> str | None:
        """The canonical name a spelling stands for, here or in the base (a look-up per perturbation)."""
        found = self._lookup.get(name)
        return found if found is not None or self._base is None else self._base._spelling(name)

    def names(self) -> tuple[str, ...]:
        """Canonical names of every kind: the built-ins first, then registered ones in order."""
        return tuple(self._all())

    def entry(self, canonical: str) -> Perturbation:
        found = self._entries.get(canonical)
        if found is not None:
            return found
        if self._base is None:
            raise KeyError(canonical)
        return self._base.entry(canonical)

    def canonical(self, name: str) -> str:
        """The canonical name of a kind given by name or alias (case and ``-``/``_`` ignored)."""
        if not isinstance(name, str):
            raise ConfigError(f"perturbation kind must be a string, got {name!r}; valid kinds: "
                              f"{self._valid_text()}")
        canonical = self._spelling(_normalise(name))
        if canonical is None:
            raise ConfigError(f"unknown perturbation kind {name!r}; valid kinds: {self._valid_text()}")
        return canonical

    def _valid_text(self) -> str:
        return ", ".join(f"{e.name} ({', '.join(e.aliases)})" if e.aliases else e.name
                         for e in self._all().values())

    def register(self, name: str, fn: PerturbationFn, *, aliases: Iterable[str] = (),
                 builtin: bool = False, takes_payloads: bool = False, takes_counts: bool = False,
                 changes: Callable[[UserHistory, Catalog], bool] | None = None) -> None:
        """Add a kind (see :func:`register_perturbation`); a clash with a known spelling is a ConfigError."""
        if isinstance(aliases, str):
            raise ConfigError(f"aliases of perturbation {name!r} must be a list of names, not the string "
                              f"{aliases!r}")
        if not callable(fn):
            raise ConfigError(f"perturbation {name!r} must be registered with a callable, got {fn!r}")
        with self._lock:
            canonical = self._check_new_name(name, "name", ())
            accepted: list[str] = []
            for alias in aliases:
                accepted.append(self._check_new_name(alias, "alias", [canonical, *accepted]))
            self._entries[canonical] = Perturbation(canonical, fn, tuple(accepted), builtin=builtin,
                                                    takes_payloads=takes_payloads, takes_counts=takes_counts,
                                                    changes=changes)
            for spelling in (canonical, *accepted):
                self._lookup[spelling] = canonical

    def unregister(self, name: str) -> None:
        """Remove a kind registered here; built-ins, and kinds of the base registry, stay."""
        with self._lock:
            canonical = self.canonical(name)
            entry = self._entries.get(canonical)
            if self.entry(canonical).builtin:
                raise ConfigError(f"perturbation {canonical!r} is built in and cannot be unregistered")
            if entry is None:
                raise ConfigError(f"perturbation {canonical!r} was not registered here (but for the "
                                  "whole process: unregister it there)")
            del self._entries[canonical]
            for spelling in (canonical, *entry.aliases):
                del self._lookup[spelling]

    def _check_new_name(self, value: object, role: str, taken: Iterable[str]) -> str:
        if not isinstance(value, str) or not KIND_NAME.match(value):
            raise ConfigError(f"perturbation {role} {value!r} is not valid: use lowercase letters, digits "
                              "and underscores, starting with a letter")
        if value in CONTROL_KINDS:
            raise ConfigError(f"perturbation {role} {value!r} is reserved for control pairs")
        owner = self._spelling(value)
        if owner is not None or value in taken:
            owner = owner or "this registration"
            raise ConfigError(f"perturbation {role} {value!r} is already registered (by {owner})")
        return value

    def payloads(self) -> dict[str, str]:
        """Every payload family (name → template): the base's first (the built-ins first of all), then
        those registered here, in order."""
        return {**(self._base.payloads() if self._base else {}), **self._payloads}

    def register_payload(self, family: str, template: str) -> None:
        """Add a payload family (see :func:`register_payload`); a taken or malformed name, or a template
        without ``{canary}`` (or ``{encoded}``: an instruction to write it, in base64), is a ConfigError."""
        if not isinstance(template, str) or ("{canary}" not in template and "{encoded}" not in template):
            raise ConfigError(f"payload {family!r}: the template must contain {{canary}}, the token it asks "
                              "the model to write")
        with self._lock:
            taken = self.payloads()
            if not isinstance(family, str) or not _FAMILY_NAME.fullmatch(family) or family in taken:
                raise ConfigError(f"payload family {family!r}: use a new lowercase name "
                                  f"(taken: {', '.join(taken)})")
            self._payloads[family] = template


DEFAULT_REGISTRY = KindRegistry()  # the built-ins and the Python API's registrations


def canonical_kind(name: str) -> str:
    """The canonical name of a perturbation kind given by name or alias (case and ``-``/``_`` ignored)."""
    return DEFAULT_REGISTRY.canonical(name)


def available_kinds() -> tuple[str, ...]:
    """Canonical names of every perturbation kind: the built-ins first, then registered ones in order."""
    return DEFAULT_REGISTRY.names()


def register_perturbation(name: str, fn: PerturbationFn, *, aliases: Iterable[str] = ()) -> None:
    """Register a custom perturbation kind for this process (the Python API; a conftest registers through
    the ``pytest_robustexplain_register_perturbations`` hook, for its session only).

    ``fn(history, severity, catalog, rng)`` must return ``(new_history, changes)`` like the built-ins:
    a new :class:`UserHistory` (never mutate the input) and a JSON-serialisable dict; it must draw all its
    randomness from ``rng``. Names and aliases are lowercase identifiers and may not clash with any
    registered name or alias (``ConfigError``).
    """
    DEFAULT_REGISTRY.register(name, fn, aliases=aliases)


def unregister_perturbation(name: str) -> None:
    """Remove a custom perturbation kind registered with :func:`register_perturbation`; built-ins stay."""
    DEFAULT_REGISTRY.unregister(name)


def register_payload(family: str, template: str) -> None:
    """Add a payload family of your own for this process (the Python API; a conftest registers through
    the hook's ``register_payload``, for its session only): ``template`` must contain ``{canary}``, the
    token the payload asks the model to write (or ``{encoded}``, an instruction to write it, in base64);
    success is decided on that token."""
    DEFAULT_REGISTRY.register_payload(family, template)


def counted(kinds: KindRegistry | None, counts: str) -> KindRegistry | None:
    """``kinds`` (None: the process's) under a perturbation-counts rule: as given for the default, else a
    registry over them whose noise and dilution insert by ``counts`` (the paper's "s items")."""
    if counts == COUNTS_PROPORTIONAL:
        return kinds
    return KindRegistry(base=kinds if kinds is not None else DEFAULT_REGISTRY, counts=counts)


def register_builtin(name: str, fn: PerturbationFn, aliases: tuple[str, ...], *,
                     takes_payloads: bool = False, takes_counts: bool = False,
                     changes: Callable[[UserHistory, Catalog], bool] | None = None) -> None:
    DEFAULT_REGISTRY.register(name, fn, aliases=aliases, builtin=True, takes_payloads=takes_payloads,
                              takes_counts=takes_counts, changes=changes)
