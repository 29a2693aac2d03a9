"""YAML from outside (a settings file, a data file) may not expand beyond a budget.

An alias re-uses a node, so ten levels of nine aliases ("billion laughs") are a few hundred bytes that
stand for 9¹⁰ values: PyYAML builds them as shared references, but anything that walks the result — a
repr, a prompt's rendering of an item's features — walks every one. The composed node graph is measured
before anything is built, each alias counted as often as it is used (sizes memoised per node, so the
measuring itself stays linear in the document).
"""

from __future__ import annotations

from typing import Any

# Values a YAML document may stand for, aliases expanded: far above any settings file or data file (the
# MovieLens-style catalogs are JSON or CSV), far below what makes a walk over it slow.
MAX_YAML_VALUES = 1_000_000


class YamlTooLarge(ValueError):
    """The document stands for more values than :data:`MAX_YAML_VALUES`."""


def check_expansion(node: Any, limit: int = MAX_YAML_VALUES) -> None:
    """Raise :class:`YamlTooLarge` when ``node`` (a composed PyYAML node) expands to more than ``limit``
    values, counting every use of an alias."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        key = id(current)
        if key in sizes:
            continue
        children = _children(current)
        if not expanded and children:
            stack.append((current, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(child), 0) for child in children)
        if total > limit:
            raise YamlTooLarge(f"it expands to more than {limit:,} values (YAML aliases used over and over)")
        sizes[key] = total


def _children(node: Any) -> list[Any]:
    value = getattr(node, "value", None)
    if not isinstance(value, list):  # a scalar
        return []
    out: list[Any] = []
    for entry in value:
        out.extend(entry if isinstance(entry, tuple) else (entry,))  # mapping pairs, sequence items
    return out
