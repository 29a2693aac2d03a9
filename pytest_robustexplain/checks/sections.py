"""The report sections the checks' rows go in, in the order every writer shows them: each a title, what it
holds and its table's columns, and the order of its checks' rows. A check names its section
(``Check.section``) and gives its rows (``Check.section_rows``); a section not listed here is shown after
these, titled by its name; a check without one is a row of the table of further checks (``FURTHER``). A
row whose check the writer does not have (a conftest's, or the JSON read elsewhere) stands in the section
its finding names (``Finding.section``), in its words."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    about: str = ""
    columns: tuple[str, str] = ("Check", "Value")  # a Markdown table's header
    order: tuple[str, ...] = ()  # its checks' rows in this order; any other check's after, in the registry's


STABILITY = "stability"  # the writers' own tables (ρ overall, by perturbation, by metric): no rows here
FURTHER = "checks"  # every check without a section of its own: the user's, in the one vocabulary

SECTIONS: tuple[Section, ...] = (
    Section("sensitivity", "Sensitivity", "cross-user control: the same item explained for another user",
            ("Guard", "Value")),
    Section("faithfulness", "Faithfulness", "liked vs disliked, from the ratings",
            order=("polarity", "flip", "faithfulness")),
    Section(FURTHER, "More checks", "outcome · value [bounds] · limit · reason"),
    Section("security", "Security", "adversarial histories: prompt injection, shilling",
            ("Attack", "Outcome")),
)


def own_section(name: str | None) -> bool:
    """Whether a check naming section ``name`` has rows of its own: not none, not the further checks', and
    not stability's (the writers' own tables, which hold the built-in check's rows only)."""
    return bool(name) and name not in (STABILITY, FURTHER)


def section_named(name: str) -> Section:
    """The section ``name``: one of :data:`SECTIONS`, or a new check's own, titled by its name."""
    return next((s for s in SECTIONS if s.name == name), Section(name, name.replace("_", " ").capitalize()))
