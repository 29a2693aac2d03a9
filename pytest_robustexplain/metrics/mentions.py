"""Grounding: what an explanation mentions of the user's history, of the item, and of neither.

The cross-user control (``checks/controls``) catches explanations that *ignore* the history. It cannot tell an
explanation that is built *from* the history from one that merely varies with it, so the guard also
reports, from the text alone (no model call), what each original explanation mentions:

- **history reference**: at least one category, title, brand or attribute phrase of an item in the
  user's history that is not also a term of the recommended item ("you loved *Heat* and other *Crime*
  films" — not "*Toy Story* is an *Animation* film", which only restates the item);
- **unsupported mention**: a catalog category or title that is in neither the history nor the item (a
  made-up preference or a hallucinated past purchase).

Two kinds of text mention the history without referring to it, and are not counted as references:

- **hedging**: naming at least half of the catalog's categories (and at least :data:`HEDGE_MIN`), so
  that whatever the user liked is "mentioned" ("suits someone who enjoys Books, Toys, Home, …");
- **listing**: naming :data:`LISTED_TITLES` or more titles of the user's history — an honest explanation
  names a few as evidence (the template explainer up to five), a list is the history repeated back.

Matching rules, so the numbers can be checked by hand:

- the vocabulary is the catalog's: categories (and ``features["genres"]``), titles of two or more words
  (a trailing "(1995)" year is dropped, "Matrix, The" is also matched as "The Matrix"), brands
  (``features["brand"]``) and multi-word attribute phrases (``features["attributes"]``); one-word titles
  and attributes ("Heat", "foldable") are too ambiguous in running text and are left out;
- text and terms are compared as lowercase word sequences (letters and digits; punctuation separates
  words), so "sci-fi" matches "Sci-Fi" and matches never cut a word in two;
- a one-word category also matches with or without a final "s" ("toy" for "Toys");
- the longest term wins where terms overlap ("Science Fiction" before "Fiction"), scanning left to right.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..data import Interaction, Item, UserHistory

_WORD = re.compile(r"[^\W_]+")
_ARTICLES = ("the", "a", "an")  # moved to the end of a title: "Matrix, The"
# Kinds of terms; only categories and titles can be "unsupported" (brands and attribute phrases also
# occur in ordinary praise of an item).
CATEGORY, TITLE, BRAND, ATTRIBUTE = "category", "title", "brand", "attribute"
HEDGE_SHARE = 0.5  # share of the catalog's categories named that makes a text a hedge
HEDGE_MIN = 4  # ... and at least this many (a catalog of three categories cannot be hedged against)
LISTED_TITLES = 8  # history titles named that make a text a list of the history
_CLAIMS = (CATEGORY, TITLE)

Key = tuple[str, ...]


def words(text: str) -> Key:
    """The lowercase word sequence of ``text`` (the unit every match is made on)."""
    return tuple(_WORD.findall(text.casefold()))


def _title_forms(title: str) -> list[str]:
    r"""The title without its year, and "The Matrix" for "Matrix, The". String methods, not regexes: a
    title is outside text, and ``\s*\(\s*\d{4}\s*\)\s*$`` took 25 s on one of 60,000 spaces."""
    base = _without_year(title).strip()
    forms = [base]
    comma = base.rfind(",")
    rest, article = base[:comma], base[comma + 1:].lstrip()
    if comma > 0 and article.lower() in _ARTICLES:
        forms.append(f"{article} {rest}")
    return forms


def _without_year(title: str) -> str:
    r"""``title`` without a trailing ``(1999)``: what ``re.sub(r"\s*\(\s*\d{4}\s*\)\s*$", "", title)``
    gives, in linear time."""
    end = title.rstrip()
    if not end.endswith(")"):
        return title
    opening = end.rfind("(")
    year = end[opening + 1:-1].strip() if opening >= 0 else ""
    if len(year) != 4 or not all("0" <= c <= "9" for c in year):
        return title
    return end[:opening].rstrip()


def category_forms(category: str) -> list[str]:
    """The category as matched in text: with and without a final "s" when it is one word of 4+ letters."""
    forms = [category]
    if len(words(category)) == 1 and len(category) > 3:
        forms.append(category[:-1] if category.lower().endswith("s") else category + "s")
    return forms


def _as_strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def _terms_of(title: str | None, category: str | None, features: Mapping[str, object]
              ) -> Iterable[tuple[str, str, str]]:
    """(form matched in text, display form, kind) of every term one item (or interaction) contributes;
    the display form names the term in reports ("Crime" for "crimes", "The Matrix" for "Matrix, The")."""
    for name in [category or "", *_as_strings(features.get("genres"))]:
        if name.strip():
            for form in category_forms(name.strip()):
                yield form, name.strip(), CATEGORY
    if title:
        forms = [form for form in _title_forms(title) if len(words(form)) >= 2]
        for form in forms:
            yield form, forms[-1], TITLE
    for brand in _as_strings(features.get("brand")):
        if len(brand.strip()) >= 3:
            yield brand.strip(), brand.strip(), BRAND
    for attribute in _as_strings(features.get("attributes")):
        if len(words(attribute)) >= 2:
            yield attribute.strip(), attribute.strip(), ATTRIBUTE


@dataclass(frozen=True)
class Grounding:
    """What one explanation mentions (display forms, sorted): of the history, of the item, of neither."""

    history: tuple[str, ...]
    item: tuple[str, ...]
    unsupported: tuple[str, ...]
    hedging: bool = False  # names most of the catalog's categories
    listed: bool = False  # names LISTED_TITLES or more history titles

    @property
    def references_history(self) -> bool:
        """A history mention that is neither a hedge nor a list of the history."""
        return bool(self.history) and not self.hedging and not self.listed

    def to_dict(self) -> dict[str, Any]:
        return {"history": list(self.history), "item": list(self.item), "unsupported": list(self.unsupported),
                "hedging": self.hedging, "listed": self.listed}


class Vocabulary:
    """The catalog's terms, matched by word sequence, longest first."""

    def __init__(self, catalog: Mapping[str, Item]) -> None:
        self._catalog = catalog
        self._terms: dict[Key, tuple[str, str]] = {}  # words matched -> (display form, kind)
        for item in catalog.values():
            self._add(_terms_of(item.title, item.category, item.features))
        self._longest = max((len(k) for k in self._terms), default=0)
        # display words -> (display form, kind): how a found term is named and judged
        self._display = {words(display): (display, kind) for display, kind in self._terms.values()}
        self._n_categories = sum(1 for _, kind in self._display.values() if kind == CATEGORY)

    def _add(self, terms: Iterable[tuple[str, str, str]]) -> None:
        for form, display, kind in terms:
            key = words(form)
            # The first kind seen wins, categories before titles within an item ("Drama" the genre).
            if key:
                self._terms.setdefault(key, (display, kind))

    def mentions(self, text: str) -> list[Key]:
        """Catalog terms found in ``text`` (as the words of their display form), left to right, the
        longest match at each position."""
        tokens = words(text)
        found: list[Key] = []
        i = 0
        while i < len(tokens):
            for size in range(min(self._longest, len(tokens) - i), 0, -1):
                key = tokens[i:i + size]
                if key in self._terms:
                    found.append(words(self._terms[key][0]))
                    i += size
                    break
            else:
                i += 1
        return found

    def _keys(self, terms: Iterable[tuple[str, str, str]]) -> set[Key]:
        return {words(display) for _, display, _ in terms} - {()}

    def _interaction_keys(self, interaction: Interaction) -> set[Key]:
        keys = self._keys(_terms_of(interaction.title, interaction.category, interaction.features))
        known = self._catalog.get(interaction.item_id)
        if known is not None:
            keys |= self._keys(_terms_of(known.title, known.category, known.features))
        return keys

    def item_terms(self, item: Item) -> set[Key]:
        """The terms of ``item`` itself (title, category, genres, brand, attribute phrases), as the words of
        their display forms: what names the item rather than the user's history."""
        return self._keys(_terms_of(item.title, item.category, item.features))

    def ground(self, text: str, history: UserHistory, item: Item) -> Grounding:
        """Sort the terms ``text`` mentions into history references, item terms and unsupported ones."""
        item_keys = self.item_terms(item)
        history_keys: set[Key] = set()
        for interaction in history:
            history_keys |= self._interaction_keys(interaction)
        history_keys -= item_keys
        mentioned = set(self.mentions(text))

        def display(keys: Iterable[Key]) -> tuple[str, ...]:
            return tuple(sorted({self._display[k][0] for k in keys}))

        unsupported = {k for k in mentioned - history_keys - item_keys if self._display[k][1] in _CLAIMS}
        named = {k for k in mentioned if self._display[k][1] == CATEGORY}
        titles = {k for k in mentioned & history_keys if self._display[k][1] == TITLE}
        hedging = len(named) >= max(HEDGE_MIN, HEDGE_SHARE * self._n_categories)
        return Grounding(history=display(mentioned & history_keys), item=display(mentioned & item_keys),
                         unsupported=display(unsupported), hedging=hedging,
                         listed=len(titles) >= LISTED_TITLES)
