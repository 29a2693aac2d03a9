"""The guide's evaluation fixture: a few users, each with their history and the items recommended to them,
and the catalog the perturbations draw from — one JSON file (``fixtures/robustness_eval.json``), which the
method's CI example loads with ``load_test_fixture``.

:func:`eval_fixture` builds it from a dataset (the committed file is the synthetic set's first ten cases,
three items each; ``tests/test_guide_api.py`` regenerates it and compares the bytes);
:func:`read_eval_fixture` reads one back, every record checked as a data file's is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .datasets import category_counts
from .io import PathLike, Where, check_fields, interaction_from, item_from_obj, loads, read_text, required_id
from .records import Catalog, Dataset, Item, UserHistory

EVAL_FORMAT = "robustexplain-eval/1"
EVAL_FIELDS = ("format", "source", "catalog", "users")
EVAL_USER_FIELDS = ("user_id", "history", "items")


def eval_fixture(dataset: Dataset, *, users: int = 10, items: int = 3) -> dict[str, Any]:
    """The first ``users`` cases of ``dataset``, each with ``items`` recommended items: the case's own item,
    then items the user has not seen — of its category first, then of the user's other categories, most
    frequent first — each category's in a fixed pseudo-random order (a hash of user and item, so the choice
    never depends on a random generator's version)."""
    chosen = []
    for case in dataset.cases[:users]:
        seen = {i.item_id for i in case.history} | {case.item.item_id}
        ranked = [case.item.category, *category_counts(case.history, dataset.catalog)]
        rank = {category: n for n, category in enumerate(dict.fromkeys(ranked))}
        unseen = [it for it in dataset.catalog.values() if it.category in rank and it.item_id not in seen]
        others = sorted(unseen, key=lambda it: (rank[it.category], hashlib.sha256(
            f"{case.user_id}:{it.item_id}".encode()).hexdigest()))
        recommended = [case.item, *others[:items - 1]]
        chosen.append({"user_id": case.user_id, "history": case.history.to_dicts(),
                       "items": [it.to_dict() for it in recommended]})
    source = (f"{dataset.name}: the first {len(chosen)} evaluation cases, each with its item and "
              f"{items - 1} more the user has not seen, of that item's category first")
    return {"format": EVAL_FORMAT, "source": source,
            "catalog": [it.to_dict() for it in dataset.catalog.values()], "users": chosen}


def write_eval_fixture(fixture: dict[str, Any], path: PathLike) -> None:
    """Write the fixture with one interaction or item per line, so the same fixture gives the same bytes
    and a diff shows what changed."""
    def line(record: Any) -> str:
        return json.dumps(record, ensure_ascii=False, sort_keys=True, allow_nan=False)

    def block(records: list[Any], indent: str) -> str:
        return "[\n" + ",\n".join(indent + line(r) for r in records) + "\n" + indent[:-2] + "]"

    users = [f'    {{"user_id": {line(u["user_id"])},\n     "history": {block(u["history"], "       ")},\n'
             f'     "items": {block(u["items"], "       ")}}}' for u in fixture["users"]]
    head = f'{{\n  "format": {line(fixture["format"])},\n  "source": {line(fixture["source"])},\n'
    body = f'  "catalog": {block(fixture["catalog"], "    ")},\n  "users": [\n' + ",\n".join(users)
    text = head + body + "\n  ]\n}\n"
    Path(path).write_text(text, encoding="utf-8")


Fixture = tuple[Catalog, list[tuple[UserHistory, tuple[Item, ...]]]]  # its catalog; each user with its items


def read_eval_fixture(path: PathLike) -> Fixture:
    """The fixture's catalog and its users, each with the items recommended to them; a record that is not
    what the format says is a DataError naming the file and the record."""
    where = Where(str(path))
    text = read_text(Path(path))  # a missing or unreadable file says so (a DataError naming it)
    try:
        document = loads(text)
    except ValueError as exc:  # not JSON, or a key given twice
        raise where.error(f"not valid JSON ({exc})") from None
    return eval_fixture_from(document, where)


def eval_fixture_from(document: Any, where: Where) -> Fixture:
    """:func:`read_eval_fixture` of a fixture already read (``where`` names it in every error)."""
    data = check_fields(document, EVAL_FIELDS, where, "an evaluation fixture")
    if data.get("format") != EVAL_FORMAT:
        raise where.error(f"format must be {EVAL_FORMAT!r} (got {data.get('format')!r})")
    catalog = Catalog(item_from_obj(obj, where.at(f"catalog item {n}"))
                      for n, obj in enumerate(_list(data.get("catalog", []), where, "catalog")))
    users = []
    for n, obj in enumerate(_list(data.get("users"), where, "users")):
        at = where.at(f"user {n}")
        user = check_fields(obj, EVAL_USER_FIELDS, at, "a user")
        user_id = required_id(user, at, "user_id")
        interactions = _list(user.get("history"), at, "history")
        history = UserHistory(user_id, tuple(interaction_from(i, where.at(f"user {n}, interaction {k}"))
                                             for k, i in enumerate(interactions)))
        recommended = tuple(item_from_obj(i, where.at(f"user {n}, item {k}"))
                            for k, i in enumerate(_list(user.get("items"), at, "items")))
        if not recommended:
            raise at.error("has no recommended items")
        users.append((history, recommended))
    if not users:
        raise where.error("has no users")
    return catalog, users


def _list(value: Any, where: Where, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise where.error(f"{field} must be a list")
    return value
