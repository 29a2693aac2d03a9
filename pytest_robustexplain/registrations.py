"""What a door's registration hooks add to a run: perturbation kinds and payload families, and the user's
own checks and metrics — each kept in a registry the run owns, over the process's, so a conftest's
registrations never leak into another session in the process (pytester).

pytest-free: ``call`` is the hook to call with the registration callbacks (pytest's ``config.hook.…`` or an
item's ``ihook.…``), ``refused(message)`` the exception a refused registration raises, named after the hook.
Nothing is imported until something registers, so a session that registers nothing stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .checks import DEFAULT_CHECKS, CheckRegistry
from .errors import ConfigError

if TYPE_CHECKING:
    from .checks import CheckRegistry
    from .perturbations import KindRegistry

KINDS_HOOK = "pytest_robustexplain_register_perturbations"
CHECKS_HOOK = "pytest_robustexplain_register_checks"

Refused = Callable[[str], Exception]


def registered_kinds(call: Callable[..., Any], refused: Refused) -> KindRegistry | None:
    """The run's perturbation kinds and payload families: the process's plus what ``call``'s
    implementations register; None when nothing is registered (nothing imported either)."""
    kinds: KindRegistry | None = None

    def registry() -> KindRegistry:
        nonlocal kinds
        if kinds is None:
            from .perturbations import DEFAULT_REGISTRY, KindRegistry  # lazy: loads numpy

            kinds = KindRegistry(base=DEFAULT_REGISTRY)
        return kinds

    def register(name: str, fn: Any, aliases: tuple[str, ...] = ()) -> None:
        with _named(KINDS_HOOK, refused):
            registry().register(name, fn, aliases=aliases)

    def register_payload(family: str, template: str) -> None:
        with _named(KINDS_HOOK, refused):
            registry().register_payload(family, template)

    call(register=register, register_payload=register_payload)
    return kinds


def registered_checks(call: Callable[..., Any], refused: Refused) -> CheckRegistry | None:
    """The checks and metrics of the items ``call`` serves (with an item's ``ihook``: the conftests of its
    directory and the ones above it, as for a fixture): the process's plus what they register; None when
    nothing is registered (nothing imported either)."""
    checks: CheckRegistry | None = None

    def register_check(name: Any, predicate: Any = None, *, max_rate: float = 0.0,
                       description: str = "") -> None:
        with _named(CHECKS_HOOK, refused):
            own().register(name, predicate, max_rate=max_rate, description=description)

    def register_metric(name: Any, fn: Any = None, *, version: Any = None, batch: Any = None,
                        description: str = "") -> None:
        with _named(CHECKS_HOOK, refused):
            own().register_metric(name, fn, version=version, batch=batch, description=description)

    def own() -> CheckRegistry:
        nonlocal checks
        if checks is None:

            checks = CheckRegistry(base=DEFAULT_CHECKS)
        return checks

    call(register_check=register_check, register_metric=register_metric)
    return checks


@contextmanager
def _named(hook: str, refused: Refused) -> Iterator[None]:
    """A registration the registry refuses is the session's error, named after the hook."""
    try:
        yield
    except ConfigError as exc:
        raise refused(f"{hook}: {exc}") from None
