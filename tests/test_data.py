"""Loaders, malformed-input messages, case drawing, MovieLens and the synthetic generator (data/)."""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
from collections import Counter
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from pytest_robustexplain.data import (
    CASE_FIELDS,
    DEFAULT_SEED,
    INTERACTION_FIELDS,
    SYNTHETIC_CATEGORIES,
    Catalog,
    Dataset,
    UserHistory,
    category_counts,
    default_dataset,
    dominant_category,
    draw_cases,
    generate_synthetic,
    load_cases,
    load_catalog,
    load_dataset,
    load_dataset_dir,
    load_histories,
    load_movielens,
    parse_timestamp,
    save_dataset,
)
from pytest_robustexplain.errors import ConfigError, DataError

SAMPLES = Path(__file__).parent / "data_samples"
FIXTURE = Path(__file__).parent.parent / "fixtures" / "synthetic"
CSV_COLUMNS = {"user_id": "userId", "item_id": "itemId", "category": "genre", "timestamp": "time",
               "rating": "stars"}

ALICE_ORDER = ("B1", "E1", "E2", "E3")  # the file lists E1, B1, E2, E3; timestamps decide
BOB_ORDER = ("B2", "B1", "H1")  # one interaction has no timestamp: file order is kept


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def histories_json(*users: object) -> str:
    return json.dumps({"users": list(users)})


def user(user_id: object = "u1", *interactions: object) -> dict[str, object]:
    return {"user_id": user_id, "interactions": list(interactions or [{"item_id": "E1"}])}


def raises_data_error(*fragments: str) -> AbstractContextManager[pytest.ExceptionInfo[DataError]]:
    """A DataError whose message contains every fragment (file, record, field...), in that order."""
    return pytest.raises(DataError, match=".*".join(map(re.escape, fragments)) if fragments else None)


def assert_single_error(excinfo: pytest.ExceptionInfo[DataError]) -> None:
    # One clear error, not a chain of tracebacks: nothing attached as cause or shown as context.
    assert excinfo.value.__cause__ is None
    assert excinfo.value.__suppress_context__ or excinfo.value.__context__ is None


@pytest.fixture(scope="module")
def sample_catalog() -> Catalog:
    return load_catalog(SAMPLES / "catalog.json")


@pytest.fixture(scope="module")
def sample_histories() -> dict[str, UserHistory]:
    return load_histories(SAMPLES / "histories.json")


# ---------------------------------------------------------------------------------------------------------
# Timestamps
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (1704448800, 1704448800),
    (1704448800.9, 1704448800),
    ("1704448800", 1704448800),
    ("1704448800.5", 1704448800),
    ("2024-01-05T10:00:00Z", 1704448800),
    ("2024-01-05T10:00:00", 1704448800),  # naive: UTC
    ("2024-01-05T11:00:00+01:00", 1704448800),
    ("2024-01-05", 1704412800),
])
def test_parse_timestamp_accepts_epoch_and_iso(value: object, expected: int) -> None:
    assert parse_timestamp(value) == expected


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", "", True, float("nan"), [1]])
def test_parse_timestamp_rejects_garbage(value: object) -> None:
    with pytest.raises(ValueError):
        parse_timestamp(value)


# ---------------------------------------------------------------------------------------------------------
# Loaders: every format gives the same data
# ---------------------------------------------------------------------------------------------------------


def test_json_histories(sample_histories: dict[str, UserHistory]) -> None:
    assert list(sample_histories) == ["alice", "bob", "carol"]
    alice = sample_histories["alice"]
    assert alice.item_ids == ALICE_ORDER
    assert [i.timestamp for i in alice] == [1704300000, 1704448800, 1704585600, 1704800000]
    assert alice.interactions[1].rating == 5.0 and isinstance(alice.interactions[1].rating, float)
    assert alice.interactions[2].title is None  # not filled by the plain loader
    assert dict(alice.interactions[3].features) == {"brand": "Arcline"}
    assert sample_histories["bob"].item_ids == BOB_ORDER
    assert sample_histories["bob"].interactions[1].timestamp is None
    assert sample_histories["carol"].interactions[0].timestamp == 1706776200


@pytest.mark.parametrize(("name", "columns"), [
    ("histories.yaml", None),
    ("histories.jsonl", None),
    ("histories.csv", CSV_COLUMNS),
])
def test_every_history_format_loads_the_same(name: str, columns: dict[str, str] | None,
                                             sample_histories: dict[str, UserHistory]) -> None:
    assert load_histories(SAMPLES / name, columns=columns) == sample_histories


def test_bare_list_histories(tmp_path: Path, sample_histories: dict[str, UserHistory]) -> None:
    doc = json.loads((SAMPLES / "histories.json").read_text(encoding="utf-8"))
    path = write(tmp_path, "bare.json", json.dumps(doc["users"]))
    assert load_histories(path) == sample_histories


def test_csv_with_standard_column_names(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "user_id,item_id,rating\nu1,a,4\nu2,b,\nu1,c,2.5\n")
    histories = load_histories(path)
    assert histories["u1"].item_ids == ("a", "c")
    assert histories["u2"].interactions[0].rating is None


def test_csv_with_bom_and_integer_ids(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_bytes("\ufeffuser_id,item_id\n7,42\n".encode())
    assert load_histories(path)["7"].item_ids == ("42",)


@pytest.mark.parametrize(("name", "columns"), [
    ("catalog.yaml", None),
    ("catalog.jsonl", None),
    ("catalog.csv", None),
])
def test_every_catalog_format_loads_the_same(name: str, columns: dict[str, str] | None,
                                             sample_catalog: Catalog) -> None:
    loaded = load_catalog(SAMPLES / name, columns=columns)
    assert loaded == sample_catalog
    assert list(loaded) == list(sample_catalog)


def test_catalog_contents(sample_catalog: Catalog) -> None:
    assert len(sample_catalog) == 9
    assert sample_catalog.categories == ("Books", "Electronics", "Home")
    e1 = sample_catalog["E1"]
    assert e1.title == "Aurora Wireless Earbuds"
    assert dict(e1.features) == {"brand": "Voltix", "price": 59.99,
                                 "attributes": ["bluetooth 5.3", "noise cancelling"]}


def test_cases_json_and_csv(sample_histories: dict[str, UserHistory], sample_catalog: Catalog) -> None:
    cases = load_cases(SAMPLES / "cases.json", sample_histories, sample_catalog)
    assert [(c.user_id, c.item_id) for c in cases] == [("alice", "E4"), ("bob", "B3"), ("carol", "E2")]
    assert cases[0].history is sample_histories["alice"]
    assert cases[0].item is sample_catalog["E4"]
    assert load_cases(SAMPLES / "cases.csv", sample_histories, sample_catalog) == cases


def test_cases_wrapped_form(tmp_path: Path, sample_histories: dict[str, UserHistory],
                            sample_catalog: Catalog) -> None:
    path = write(tmp_path, "cases.yaml", "cases:\n  - {user_id: bob, item_id: B3}\n")
    assert [c.item_id for c in load_cases(path, sample_histories, sample_catalog)] == ["B3"]


# ---------------------------------------------------------------------------------------------------------
# Malformed input: one DataError naming file, record and field
# ---------------------------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with raises_data_error("nope.json", "file not found") as excinfo:
        load_histories(tmp_path / "nope.json")
    assert_single_error(excinfo)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    with raises_data_error("dir.json", "is a directory"):
        load_catalog(tmp_path / "dir.json")


def test_unknown_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "histories.txt", "{}")
    with raises_data_error("histories.txt", "unsupported file type ('.txt')",
                           ".json, .jsonl, .yaml, .yml, .csv"):
        load_histories(path)


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", '{"users": [\n  {"user_id": "u1",\n   "interactions": [}\n]}\n')
    with raises_data_error("h.json", "line 3", "invalid JSON") as excinfo:
        load_histories(path)
    assert_single_error(excinfo)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "h.yaml", "users:\n  - user_id: u1\n    interactions: [\n  - {item_id: : }\n")
    with raises_data_error("h.yaml", "line 4", "invalid YAML") as excinfo:
        load_histories(path)
    assert_single_error(excinfo)


def test_invalid_jsonl_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "h.jsonl", json.dumps(user("u1")) + "\n\n{broken\n")
    with raises_data_error("h.jsonl", "line 3", "invalid JSON"):
        load_histories(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_bytes(b'{"users": "\xff"}')
    with raises_data_error("h.json", "not UTF-8"):
        load_histories(path)


@pytest.mark.parametrize("text", ['{"users": []}', "[]", ""])
def test_no_users(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "h.json" if text else "h.yaml", text)
    with raises_data_error(path.name, "no users" if text else "empty file"):
        load_histories(path)


def test_empty_history(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1"), {"user_id": "u2", "interactions": []}))
    with raises_data_error("h.json", "user 'u2' (index 1)", "field 'interactions'", "empty history"):
        load_histories(path)


def test_missing_interactions(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json({"user_id": "u1"}))
    with raises_data_error("h.json", "user 'u1' (index 0)", "field 'interactions'", "missing"):
        load_histories(path)


def test_duplicate_user_ids(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1"), user("u2"), user("u1")))
    with raises_data_error("h.json", "user 'u1' (index 2)", "field 'user_id'", "duplicate user id",
                           "first at index 0"):
        load_histories(path)


def test_duplicate_user_ids_across_jsonl_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "h.jsonl", json.dumps(user("u1")) + "\n" + json.dumps(user("u1")) + "\n")
    with raises_data_error("h.jsonl", "user 'u1' (line 2)", "field 'user_id'", "first at line 1"):
        load_histories(path)


def test_missing_user_id(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json({"interactions": [{"item_id": "a"}]}))
    with raises_data_error("h.json", "index 0", "field 'user_id'", "missing user_id"):
        load_histories(path)


def test_unknown_field_lists_allowed_fields(tmp_path: Path) -> None:
    bad = user("u1", {"item_id": "a"}, {"item_id": "b", "ratng": 4})
    path = write(tmp_path, "h.json", histories_json(bad))
    with raises_data_error("h.json", "user 'u1' (index 0), interaction index 1", "field 'ratng'",
                           "allowed fields: " + ", ".join(INTERACTION_FIELDS)):
        load_histories(path)


def test_unknown_user_field(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json({**user("u1"), "age": 3}))
    with raises_data_error("h.json", "index 0", "field 'age'", "allowed fields: user_id, interactions"):
        load_histories(path)


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", json.dumps({"users": [user()], "extra": 1}))
    with raises_data_error("h.json", "unknown top-level key(s) 'extra'"):
        load_histories(path)


def test_missing_item_id(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1", {"item_id": "a"}, {"title": "no id"})))
    with raises_data_error("h.json", "user 'u1' (index 0), interaction index 1", "field 'item_id'",
                           "missing item_id"):
        load_histories(path)


def test_interaction_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1", "a")))
    with raises_data_error("h.json", "interaction index 0", "expected an interaction object, got a string"):
        load_histories(path)


def test_non_numeric_rating(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1", {"item_id": "a", "rating": "great"})))
    with raises_data_error("h.json", "user 'u1' (index 0), interaction index 0", "field 'rating'",
                           "not a number: 'great'") as excinfo:
        load_histories(path)
    assert_single_error(excinfo)


def test_boolean_rating(tmp_path: Path) -> None:
    path = write(tmp_path, "h.yaml", "- user_id: u1\n  interactions:\n    - {item_id: a, rating: yes}\n")
    with raises_data_error("h.yaml", "user 'u1' (index 0), interaction index 0", "field 'rating'", "boolean"):
        load_histories(path)


def test_unparseable_timestamp(tmp_path: Path) -> None:
    bad = user("u1", {"item_id": "a", "timestamp": "last tuesday"})
    path = write(tmp_path, "h.json", histories_json(bad))
    with raises_data_error("h.json", "user 'u1' (index 0), interaction index 0", "field 'timestamp'",
                           "'last tuesday'") as excinfo:
        load_histories(path)
    assert_single_error(excinfo)


def test_bad_features(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1", {"item_id": "a", "features": ["x"]})))
    with raises_data_error("h.json", "interaction index 0", "field 'features'", "got a list"):
        load_histories(path)


def test_id_of_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user({"id": 1})))
    with raises_data_error("h.json", "index 0", "field 'user_id'", "got an object"):
        load_histories(path)


def test_csv_bad_rating_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "user_id,item_id,rating\nu1,a,4\nu1,b,five\n")
    with raises_data_error("h.csv", "line 3 (user 'u1')", "field 'rating'", "not a number: 'five'"):
        load_histories(path)


def test_csv_bad_timestamp_with_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "userId,itemId,time\nu1,a,2024-02-30\n")
    with raises_data_error("h.csv", "line 2 (user 'u1')", "field 'timestamp'", "'2024-02-30'"):
        load_histories(path, columns={"user_id": "userId", "item_id": "itemId", "timestamp": "time"})


def test_csv_missing_item_id_cell(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "user_id,item_id\nu1,a\nu1,\n")
    with raises_data_error("h.csv", "line 3 (user 'u1')", "field 'item_id'", "missing item_id"):
        load_histories(path)


def test_csv_unknown_column_lists_allowed_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "user_id,item_id,stars\nu1,a,4\n")
    with raises_data_error("h.csv", "line 1", "field 'stars'", "unknown column 'stars'",
                           "allowed columns: user_id, item_id, category, timestamp, rating, title, features"):
        load_histories(path)


def test_csv_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "userId,rating\nu1,4\n")
    with raises_data_error("h.csv", "line 1", "field 'item_id'", "missing column 'item_id'"):
        load_histories(path, columns={"user_id": "userId"})


def test_csv_ragged_row(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "user_id,item_id\nu1,a,extra\n")
    with raises_data_error("h.csv", "line 2", "3 cells but the header has 2 columns"):
        load_histories(path)


def test_csv_empty_file(tmp_path: Path) -> None:
    with raises_data_error("h.csv", "no header row"):
        load_histories(write(tmp_path, "h.csv", ""))


def test_column_mapping_with_unknown_field_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "user_id,item_id\nu1,a\n")
    with pytest.raises(ConfigError, match=r"unknown field 'stars'.*allowed fields"):
        load_histories(path, columns={"stars": "rating"})


def test_column_mapping_on_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a CSV file"):
        load_histories(SAMPLES / "histories.json", columns={"user_id": "userId"})


def test_duplicate_item_ids_in_catalog(tmp_path: Path) -> None:
    items = [{"item_id": "a"}, {"item_id": "b"}, {"item_id": "a"}]
    path = write(tmp_path, "c.json", json.dumps({"items": items}))
    with raises_data_error("c.json", "item 'a' (index 2)", "field 'item_id'", "duplicate item id",
                           "first at index 0"):
        load_catalog(path)


def test_duplicate_item_ids_in_csv_catalog(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", "item_id,title\na,A\na,B\n")
    with raises_data_error("c.csv", "item 'a' (line 3)", "field 'item_id'", "first at line 2"):
        load_catalog(path)


def test_catalog_unknown_field_and_missing_id(tmp_path: Path) -> None:
    path = write(tmp_path, "c.json", json.dumps([{"item_id": "a", "colour": "red"}]))
    with raises_data_error("c.json", "index 0", "field 'colour'",
                           "allowed fields: item_id, title, category, features"):
        load_catalog(path)
    path = write(tmp_path, "c.json", json.dumps([{"item_id": "a"}, {"title": "no id"}]))
    with raises_data_error("c.json", "index 1", "field 'item_id'", "missing item_id"):
        load_catalog(path)


def test_catalog_features_cell_must_be_a_json_object(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", "item_id,features\na,{not json}\n")
    with raises_data_error("c.csv", "line 2", "field 'features'", "invalid JSON object"):
        load_catalog(path)


def test_empty_catalog(tmp_path: Path) -> None:
    with raises_data_error("c.json", "no items"):
        load_catalog(write(tmp_path, "c.json", '{"items": []}'))


@pytest.mark.parametrize(("case", "fragments"), [
    ({"user_id": "zoe", "item_id": "E4"}, ("case index 0 (user 'zoe', item 'E4')", "field 'user_id'",
                                           "unknown user")),
    ({"user_id": "alice", "item_id": "X9"}, ("case index 0 (user 'alice', item 'X9')", "field 'item_id'",
                                             "unknown item")),
    ({"user_id": "alice", "item_id": "E1"}, ("case index 0 (user 'alice', item 'E1')", "field 'item_id'",
                                             "already in the user's history")),
    ({"user_id": "alice"}, ("case index 0", "field 'item_id'", "missing item_id")),
    ({"user_id": "alice", "item_id": "E4", "why": "x"}, ("case index 0", "field 'why'",
                                                         "allowed fields: " + ", ".join(CASE_FIELDS))),
])
def test_bad_cases(tmp_path: Path, case: dict[str, str], fragments: tuple[str, ...],
                   sample_histories: dict[str, UserHistory], sample_catalog: Catalog) -> None:
    path = write(tmp_path, "cases.json", json.dumps([case]))
    with raises_data_error("cases.json", *fragments) as excinfo:
        load_cases(path, sample_histories, sample_catalog)
    assert_single_error(excinfo)


def test_duplicate_case(tmp_path: Path, sample_histories: dict[str, UserHistory],
                        sample_catalog: Catalog) -> None:
    path = write(tmp_path, "cases.jsonl", '{"user_id": "bob", "item_id": "B3"}\n' * 2)
    with raises_data_error("cases.jsonl", "case line 2", "duplicate case (first at line 1)"):
        load_cases(path, sample_histories, sample_catalog)


def test_error_attributes_are_set(tmp_path: Path) -> None:
    path = write(tmp_path, "h.json", histories_json(user("u1", {"item_id": "a", "rating": "x"})))
    with pytest.raises(DataError) as excinfo:
        load_histories(path)
    assert excinfo.value.source == str(path)
    assert excinfo.value.record == "user 'u1' (index 0), interaction index 0"
    assert excinfo.value.field == "rating"


# ---------------------------------------------------------------------------------------------------------
# Datasets: drawing cases, loading, saving
# ---------------------------------------------------------------------------------------------------------


def test_dominant_category(sample_histories: dict[str, UserHistory], sample_catalog: Catalog) -> None:
    assert dominant_category(sample_histories["alice"]) == "Electronics"
    assert category_counts(sample_histories["bob"]) == {"Books": 2}
    assert category_counts(sample_histories["bob"], sample_catalog) == {"Books": 2, "Home": 1}
    assert dominant_category(UserHistory("x", ())) is None


def test_draw_cases_from_the_dominant_category(sample_histories: dict[str, UserHistory],
                                               sample_catalog: Catalog) -> None:
    cases = draw_cases(sample_histories, sample_catalog)
    by_user = {c.user_id: c.item_id for c in cases}
    assert list(by_user) == ["alice", "bob", "carol"]  # histories order
    assert by_user["alice"] == "E4"  # the only unseen Electronics item
    assert by_user["bob"] == "B3"  # the only unseen Books item
    # carol has seen all of Home, her dominant category: the next one (Electronics) is used.
    assert by_user["carol"] in {"E2", "E3", "E4"}
    assert draw_cases(sample_histories, sample_catalog) == cases


def test_draw_cases_samples_users_deterministically(sample_histories: dict[str, UserHistory],
                                                    sample_catalog: Catalog) -> None:
    picks = {draw_cases(sample_histories, sample_catalog, 1, seed=s)[0].user_id for s in range(12)}
    assert len(picks) > 1  # different seeds pick different users
    assert draw_cases(sample_histories, sample_catalog, 2, seed=5) == draw_cases(
        sample_histories, sample_catalog, 2, seed=5)


def test_draw_cases_too_many(sample_histories: dict[str, UserHistory], sample_catalog: Catalog) -> None:
    with raises_data_error("asked for 4 cases but only 3 of 3 users"):
        draw_cases(sample_histories, sample_catalog, 4)
    with pytest.raises(ConfigError, match="n_cases"):
        draw_cases(sample_histories, sample_catalog, 0)


def test_draw_cases_skips_users_who_have_seen_everything() -> None:
    catalog = Catalog([load_catalog(SAMPLES / "catalog.json")["E1"]])
    histories = load_histories(SAMPLES / "histories.json")
    cases = draw_cases(histories, catalog)
    assert {c.user_id for c in cases} == {"bob"}  # alice and carol have seen E1


def test_load_dataset_without_cases_fills_metadata() -> None:
    dataset = load_dataset(SAMPLES / "histories.json", SAMPLES / "catalog.json")
    assert dataset.name == "data_samples"
    alice = dataset.histories["alice"]
    assert alice.interactions[2].title == "Nimbus Bluetooth Speaker"  # from the catalog
    assert dataset.histories["bob"].interactions[2].category == "Home"
    assert [c.user_id for c in dataset.cases] == ["alice", "bob", "carol"]
    assert dataset.cases[0].history is alice


def test_load_dataset_with_cases_and_n_cases() -> None:
    histories = load_histories(SAMPLES / "histories.csv", columns=CSV_COLUMNS)
    dataset = load_dataset(histories, SAMPLES / "catalog.csv", SAMPLES / "cases.csv", n_cases=2, name="csv")
    assert dataset.name == "csv"
    assert [(c.user_id, c.item_id) for c in dataset.cases] == [("alice", "E4"), ("bob", "B3")]
    with raises_data_error("cases.csv", "n_cases=5 but the file has only 3 cases"):
        load_dataset(SAMPLES / "histories.json", SAMPLES / "catalog.json", SAMPLES / "cases.csv", n_cases=5)


def test_save_and_load_dataset_dir(tmp_path: Path) -> None:
    dataset = load_dataset(SAMPLES / "histories.json", SAMPLES / "catalog.json", SAMPLES / "cases.json")
    save_dataset(dataset, tmp_path / "out")
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["cases.json", "catalog.json", "histories.json"]
    again = load_dataset_dir(tmp_path / "out")
    assert again.name == "out"
    assert again.catalog == dataset.catalog
    assert again.histories == dataset.histories
    assert again.cases == dataset.cases
    # Saving what was loaded gives the same bytes: the format is canonical.
    save_dataset(again, tmp_path / "again")
    for name in ("histories.json", "catalog.json", "cases.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()


def test_load_dataset_dir_mixed_formats_and_drawn_cases(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "histories.yaml", tmp_path / "histories.yaml")
    shutil.copy(SAMPLES / "catalog.jsonl", tmp_path / "catalog.jsonl")
    dataset = load_dataset_dir(tmp_path, n_cases=2, seed=7)
    assert len(dataset.cases) == 2
    assert dataset == load_dataset_dir(tmp_path, n_cases=2, seed=7)


def test_load_dataset_dir_errors(tmp_path: Path) -> None:
    with raises_data_error("missing", "directory not found"):
        load_dataset_dir(tmp_path / "missing")
    shutil.copy(SAMPLES / "catalog.json", tmp_path / "catalog.json")
    with raises_data_error(str(tmp_path), "no histories file"):
        load_dataset_dir(tmp_path)
    shutil.copy(SAMPLES / "histories.json", tmp_path / "histories.json")
    shutil.copy(SAMPLES / "histories.yaml", tmp_path / "histories.yaml")
    with raises_data_error("several histories files (histories.json, histories.yaml)"):
        load_dataset_dir(tmp_path)


def test_save_dataset_rejects_unserialisable_features(tmp_path: Path) -> None:
    from pytest_robustexplain.data import Item

    catalog = Catalog([Item("a", features={"x": float("nan")})])
    dataset = Dataset(catalog=catalog, histories={}, cases=())
    with raises_data_error("item 'a'", "cannot be written as JSON"):
        save_dataset(dataset, tmp_path)


# ---------------------------------------------------------------------------------------------------------
# MovieLens
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def movielens() -> Dataset:
    return load_movielens(SAMPLES / "movielens", min_ratings=3)


def test_movielens_items(movielens: Dataset) -> None:
    assert len(movielens.catalog) == 12
    shawshank = movielens.catalog["4"]
    assert shawshank.title == "Shawshank Redemption, The (1994)"
    assert shawshank.category == "Crime"
    assert dict(shawshank.features) == {"genres": ["Crime", "Drama"], "year": 1994}
    assert dict(movielens.catalog["8"].features) == {"genres": ["Documentary"]}  # no year in the title
    untitled = movielens.catalog["9"]
    assert untitled.category is None and dict(untitled.features) == {"genres": [], "year": 2018}
    assert movielens.catalog["12"].title == "Amélie (2001)"


def test_movielens_histories(movielens: Dataset) -> None:
    assert list(movielens.histories) == ["1", "2", "4"]  # user 3 has only 2 ratings
    one = movielens.histories["1"]
    assert one.item_ids == ("10", "7", "3", "11")
    first = one.interactions[0]
    assert (first.rating, first.timestamp) == (3.5, 100)
    assert (first.title, first.category) == ("Speed (1994)", "Action")
    assert isinstance(first.rating, float) and isinstance(first.timestamp, int)
    assert first.features["genres"] == ["Action", "Romance", "Thriller"]


def test_movielens_cases(movielens: Dataset) -> None:
    by_user = {c.user_id: c.item_id for c in movielens.cases}
    assert list(by_user) == ["1", "2", "4"]
    # Action is exhausted; Thriller (tied, alphabetically next) has only Pulp Fiction left.
    assert by_user["1"] == "6"
    assert by_user["2"] == "6"  # Comedy, the dominant genre: Pulp Fiction is the only unrated comedy
    assert by_user["4"] in {"1", "12"}  # Drama exhausted; Comedy (tied with Crime, alphabetically first)
    for case in movielens.cases:
        assert case.item_id not in case.history.item_ids


def test_movielens_options() -> None:
    short = load_movielens(SAMPLES / "movielens", min_ratings=3, max_history=2)
    assert short.histories["1"].item_ids == ("3", "11")  # the two most recent, oldest first
    # Genres are ranked on the kept history: Action (exhausted), then Crime (tied, alphabetically first).
    assert short.cases[0].item_id in {"4", "6"}
    sampled = load_movielens(SAMPLES / "movielens", min_ratings=3, max_users=2, n_cases=1, seed=3)
    assert len(sampled.histories) == 2 and len(sampled.cases) == 1
    assert sampled == load_movielens(SAMPLES / "movielens", min_ratings=3, max_users=2, n_cases=1, seed=3)
    with raises_data_error("ratings.csv", "no user has at least min_ratings=10"):
        load_movielens(SAMPLES / "movielens")
    with pytest.raises(ConfigError, match="n_cases=4 but only 3"):
        load_movielens(SAMPLES / "movielens", min_ratings=3, n_cases=4)


RATINGS_HEAD = "userId,movieId,rating,timestamp\n"


@pytest.mark.parametrize(("rows", "said"), [
    ("1,1,4.0,10\n1,99,4.0,11\n", ("line 3", "field 'movieId'", "movie '99' is not in movies.csv")),
    ("1,1,good,10\n", ("line 2", "field 'rating'", "not a number: 'good'")),
    ("1,1,nan,10\n", ("line 2", "field 'rating'", "not a finite number")),
    # The fast path for plain numeric rows checks what the validating one does (issue 41, item 5): it took
    # a control character in an id, and 1.7e12 (milliseconds) as a timestamp.
    ("1,1,4.0,10\nu\x072,2,3.0,11\n", ("line 3", "field 'userId'", "control")),
    ("1,1,4.0,1700000000000\n", ("line 2", "field 'timestamp'", "milliseconds")),
    ("1,1,1e308,10\n", ("line 2", "field 'rating'", "is beyond ±1,000,000")),
])
def test_movielens_errors(tmp_path: Path, rows: str, said: tuple[str, ...]) -> None:
    shutil.copy(SAMPLES / "movielens" / "movies.csv", tmp_path / "movies.csv")
    write(tmp_path, "ratings.csv", RATINGS_HEAD + rows)
    with raises_data_error("ratings.csv", *said):
        load_movielens(tmp_path, min_ratings=1)


def test_movielens_file_errors(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "movielens" / "movies.csv", tmp_path / "movies.csv")
    with raises_data_error("ratings.csv", "file not found"):
        load_movielens(tmp_path)
    write(tmp_path, "ratings.csv", "userId,movieId,stars,timestamp\n1,1,4,10\n")
    with raises_data_error("ratings.csv", "line 1", "field 'rating'", "missing column(s) rating"):
        load_movielens(tmp_path, min_ratings=1)


def test_movielens_plain_rows_read_ids_as_every_loader_does(tmp_path: Path) -> None:
    """" 1" is "1" on the fast path too, where it used to be a second user (issue 41, item 5)."""
    shutil.copy(SAMPLES / "movielens" / "movies.csv", tmp_path / "movies.csv")
    write(tmp_path, "ratings.csv", RATINGS_HEAD + "1,1,4.0,10\n 1,2,3.0,11\n1 ,3,5.0,12\n")
    loaded = load_movielens(tmp_path, min_ratings=1)
    assert list(loaded.histories) == ["1"] and loaded.histories["1"].item_ids == ("1", "2", "3")


def test_movielens_keeps_ratings_compact_and_makes_interactions_of_the_kept_history_only(
        tmp_path: Path) -> None:
    """A rating is three array entries until it is in a kept history (what made 1 million ratings 594 MB);
    missing ratings and timestamps survive the arrays as None, and a user whose ratings lack a timestamp
    keeps the file's order."""
    shutil.copy(SAMPLES / "movielens" / "movies.csv", tmp_path / "movies.csv")
    write(tmp_path, "ratings.csv", RATINGS_HEAD + "1,1,,30\n1,2,3.0,10\n1,3,4.5,20\n2,1,4.0,5\n2,2,2.0,\n"
                                                  "2,3,1.0,1\n")
    loaded = load_movielens(tmp_path, min_ratings=1, max_history=2)
    one, two = loaded.histories["1"], loaded.histories["2"]
    assert one.item_ids == ("3", "1") and [i.rating for i in one] == [4.5, None]  # by time, the last two
    assert two.item_ids == ("2", "3") and [i.timestamp for i in two] == [None, 1]  # file order: no sort


# ---------------------------------------------------------------------------------------------------------
# The synthetic dataset
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic() -> Dataset:
    return generate_synthetic()


def test_synthetic_is_determined_by_the_seed(synthetic: Dataset) -> None:
    again = generate_synthetic(DEFAULT_SEED)
    assert again.catalog == synthetic.catalog
    assert again.histories == synthetic.histories
    assert again.cases == synthetic.cases
    other = generate_synthetic(DEFAULT_SEED + 1)
    assert other.catalog != synthetic.catalog
    assert other.histories != synthetic.histories
    assert [c.user_id for c in other.cases] != [c.user_id for c in synthetic.cases]


def test_synthetic_leaves_global_random_state_alone() -> None:
    np.random.seed(123)
    random.seed(123)
    expected = (np.random.random(), random.random())
    np.random.seed(123)
    random.seed(123)
    generate_synthetic(5, n_users=3, n_cases=1)
    assert (np.random.random(), random.random()) == expected


def test_synthetic_catalog_shape(synthetic: Dataset) -> None:
    catalog = synthetic.catalog
    assert len(catalog) == 200
    assert set(catalog.categories) == {"Electronics", "Fashion", "Home", "Beauty", "Sports", "Books", "Toys"}
    sizes = Counter(item.category for item in catalog.values())
    assert set(sizes.values()) <= {28, 29}
    titles = [item.title for item in catalog.values()]
    assert len(set(titles)) == 200
    for item in catalog.values():
        assert item.title is not None and item.category is not None
        assert item.title.split(" ", 1)[1] in SYNTHETIC_CATEGORIES[item.category].products
        assert item.features["brand"] in SYNTHETIC_CATEGORIES[item.category].brands
        price = item.features["price"]
        assert isinstance(price, float) and price > 0 and round(price * 100) % 100 == 99
        attributes = item.features["attributes"]
        assert 2 <= len(attributes) <= 3 and len(set(attributes)) == len(attributes)
    # Ids say nothing about the category: each category's ids are spread over the whole range.
    electronics = sorted(int(i.item_id[1:]) for i in catalog.by_category("Electronics"))
    assert electronics[0] < 50 and electronics[-1] > 150


def test_synthetic_histories_shape(synthetic: Dataset) -> None:
    histories = synthetic.histories
    assert len(histories) == 100
    assert list(histories)[:2] == ["U001", "U002"]
    lengths = [len(h) for h in histories.values()]
    assert min(lengths) >= 10 and max(lengths) <= 50 and max(lengths) - min(lengths) >= 25
    start_2024, start_2025 = 1704067200, 1735689600
    for history in histories.values():
        stamps = [i.timestamp or 0 for i in history]
        assert all(i.timestamp is not None for i in history)
        assert start_2024 <= stamps[0] < start_2025
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert min(gaps) >= 3600 and max(gaps) <= 42 * 86400  # strictly increasing, hours to weeks
        assert len(set(history.item_ids)) == len(history)  # distinct items
        for interaction in history:
            item = synthetic.catalog[interaction.item_id]
            assert (interaction.title, interaction.category) == (item.title, item.category)
            assert interaction.rating is not None and 1.0 <= interaction.rating <= 5.0
            assert (interaction.rating * 2).is_integer()
    all_gaps = sorted((b.timestamp or 0) - (a.timestamp or 0) for h in histories.values()
                      for a, b in itertools.pairwise(h.interactions))
    median = all_gaps[len(all_gaps) // 2]
    assert 6 * 3600 < median < 5 * 86400


def test_synthetic_users_have_dominant_categories(synthetic: Dataset) -> None:
    singles = doubles = 0
    liked: list[float] = []
    others: list[float] = []
    for history in synthetic.histories.values():
        counts = [*sorted(category_counts(history).values(), reverse=True), 0, 0]
        # One or two categories lead strictly: top > second, or top two > third.
        assert counts[0] > counts[2]
        assert counts[0] + counts[1] >= len(history) / 2
        singles += counts[0] > 2 * counts[1]  # one clear favourite
        doubles += counts[0] == counts[1] > counts[2]  # two favourites, evenly split
        top = next(iter(category_counts(history)))
        for interaction in history:
            (liked if interaction.category == top else others).append(interaction.rating or 0.0)
    assert singles > 10 and doubles > 10  # both kinds of users exist
    assert sum(liked) / len(liked) > sum(others) / len(others) + 0.4  # preferred categories rated higher


def test_synthetic_cases(synthetic: Dataset) -> None:
    cases = synthetic.cases
    assert len(cases) == 20
    assert len({c.user_id for c in cases}) == 20
    for case in cases:
        assert case.history is synthetic.histories[case.user_id]
        assert case.item_id not in case.history.item_ids
        counts = category_counts(case.history)
        ranked = [*sorted(counts.values(), reverse=True), 0, 0]
        # The item's category is a dominant one: it beats every category outside the leading one or two.
        assert case.item.category in counts
        assert counts[case.item.category] > ranked[2]
        if ranked[0] > ranked[1] and ranked[1] == ranked[2]:
            assert counts[case.item.category] == ranked[0]


def test_synthetic_parameters() -> None:
    small = generate_synthetic(11, n_items=70, n_users=8, n_cases=3, min_len=4, max_len=12)
    assert len(small.catalog) == 70 and len(small.histories) == 8 and len(small.cases) == 3
    assert all(4 <= len(h) <= 12 for h in small.histories.values())
    with pytest.raises(ConfigError, match="n_cases=9 is more than n_users=8"):
        generate_synthetic(n_users=8, n_cases=9)
    with pytest.raises(ConfigError, match="max_len"):
        generate_synthetic(min_len=10, max_len=5)
    with pytest.raises(ConfigError, match="seed"):
        generate_synthetic(-1)
    with pytest.raises(ConfigError, match="cannot fit 60 distinct items"):
        generate_synthetic(n_items=14, n_users=2, n_cases=1, min_len=60, max_len=60)


def test_default_dataset_is_cached(synthetic: Dataset) -> None:
    assert default_dataset() is default_dataset()
    assert default_dataset().histories == synthetic.histories


def test_committed_fixture_matches_the_generator(tmp_path: Path, synthetic: Dataset) -> None:
    save_dataset(synthetic, tmp_path)
    for name in ("histories.json", "catalog.json", "cases.json"):
        assert (FIXTURE / name).read_bytes() == (tmp_path / name).read_bytes(), (
            f"fixtures/synthetic/{name} drifted from generate_synthetic(); regenerate it with\n"
            "python -c \"from pytest_robustexplain.data import generate_synthetic, save_dataset; "
            "save_dataset(generate_synthetic(), 'fixtures/synthetic')\"")
    loaded = load_dataset_dir(FIXTURE)
    assert loaded.catalog == synthetic.catalog
    assert loaded.histories == synthetic.histories
    assert loaded.cases == synthetic.cases


def test_millisecond_timestamps_are_rejected_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text('{"users": [{"user_id": "u1", "interactions": '
                    '[{"item_id": "a", "timestamp": 1700000000000}]}]}', encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_histories(path)
    message = str(info.value)
    assert str(path) in message and "timestamp" in message and "milliseconds" in message


def _run_on(histories: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``robustexplain run`` on these histories (and a one-item catalog beside them): its usage error."""
    from pytest_robustexplain import cli

    catalog = histories.parent / "c.json"
    catalog.write_text('[{"item_id": "i1", "title": "T", "category": "c"}]', encoding="utf-8")
    code = cli.main(["run", "--backend", "template", "--histories", str(histories), "--catalog", str(catalog),
                     "--progress", "off", "-q"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    return err


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_json_object_naming_a_key_twice_is_refused_like_yaml(tmp_path: Path, suffix: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    record = ('{"user_id": "u1", "user_id": "u2", "interactions": '
              '[{"item_id": "i1", "timestamp": 1, "rating": 4}]}')
    histories = tmp_path / f"h{suffix}"
    histories.write_text(f"[{record}]" if suffix == ".json" else record + "\n", encoding="utf-8")
    err = _run_on(histories, capsys)
    assert f"h{suffix}" in err and "key 'user_id' appears twice" in err and "Traceback" not in err


@pytest.mark.parametrize("bad", ["a\x00b", "\u202eevil", "x\x1b[31my", "line\nbreak", "bell\x07", "u\u200b1",
                                 "\ufeffu1", "u\u20601"])
def test_an_id_with_control_or_bidi_characters_is_refused_at_the_door(
        bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    histories = tmp_path / "h.json"
    histories.write_text(json.dumps([{"user_id": bad, "interactions": [
        {"item_id": "i1", "timestamp": 1, "rating": 4}]}]), encoding="utf-8")
    err = _run_on(histories, capsys)
    assert "holds control, line-break, bidi or zero-width characters" in err
    assert not any(ch in err for ch in "\x00\u202e\x1b\x07\u200b\ufeff\u2060") and err.count("\n") == 1


def test_plain_ids_with_colons_and_non_ascii_letters_stay_as_they_are() -> None:
    from pytest_robustexplain.data.io import Where, as_id

    for good in ("ml::42", "Zoë", "user-7", "東京", 42):
        assert as_id(good, Where("t"), "user_id") == str(good)


@pytest.mark.parametrize("blank", ["\u3164", "\u115f", "\uffa0", "\u2800"])
def test_an_id_with_a_letter_that_prints_as_nothing_is_refused(blank: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Hangul fillers and the blank Braille pattern are letters and symbols, not format characters, so no
    escape shows them: "u\u31641" prints as "u1" beside user "u1"."""
    import json

    histories = tmp_path / "h.json"
    histories.write_text(json.dumps([{"user_id": f"u{blank}1", "interactions": [
        {"item_id": "i1", "timestamp": 1, "rating": 4}]}]), encoding="utf-8")
    err = _run_on(histories, capsys)
    assert f"id 'u\\u{ord(blank):04x}1' holds U+{ord(blank):04X} " in err
    assert "a character that prints as nothing" in err and blank not in err


def test_ids_in_a_compatibility_form_load_and_are_flagged(tmp_path: Path) -> None:
    """A fullwidth "ｕser1" reads as "user1" in most fonts (issue 41, item 3): flagged like mixed scripts;
    plain non-Latin ids are not."""
    from pytest_robustexplain.data.ids import compatibility_form, lookalike_note

    assert compatibility_form("\uff55ser1") and compatibility_form("\U0001d42eser1")
    assert not any(compatibility_form(i) for i in ("user1", "Zoë", "東京", "ユーザー1"))
    note = lookalike_note(["user1", "\uff55ser1", "東京"], "user")
    assert note == ("1 user id writes letters in a compatibility form (fullwidth, styled or decomposed) and "
                    "may imitate other ids in the reports: '\\uff55ser1'")


def test_ids_wholly_in_cyrillic_or_greek_letters_that_look_latin_are_flagged() -> None:
    """"аре" in three Cyrillic letters reads as "ape" without mixing scripts (issue 41, item 3); a real
    Russian or Greek id has letters that look like no Latin one, and is not flagged."""
    from pytest_robustexplain.data.ids import lookalike_note, whole_script_lookalike

    imitations = ("\u0430\u0440\u0435", "\u0441\u0430\u0445_42", "\u039a\u039f\u0391", "\u03bf\u03bd")
    assert all(whole_script_lookalike(i) for i in imitations)
    genuine = ("ape", "user1", "\u043f\u043e\u043b\u044c", "\u0431\u0430\u0440",
               "\u03a9\u03bc\u03b5\u03b3\u03b1", "\u6771\u4eac", "42")
    assert not any(whole_script_lookalike(i) for i in genuine)
    note = lookalike_note(["ape", "\u0430\u0440\u0435", "\u043f\u043e\u043b\u044c", "u\u0455er1"],
                          "user")
    assert note == ("1 user id mixes Latin, Cyrillic or Greek letters and may imitate other ids in the "
                    "reports: 'u\\u0455er1'; 1 user id writes only Cyrillic or Greek letters that look "
                    "Latin and may imitate other ids in the reports: '\\u0430\\u0440\\u0435'")


def test_ids_that_mix_lookalike_scripts_load_and_are_flagged(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """"uѕer1" with a Cyrillic ѕ (U+0455) reads as "user1" in every report and is another user (issue 41,
    item 3): it loads — "user_Ω" and Cyrillic or Greek ids alone are legitimate — and a warning names it."""
    import json

    from pytest_robustexplain import cli
    from pytest_robustexplain.data.ids import mixed_script
    from pytest_robustexplain.errors import RobustExplainWarning

    assert mixed_script("u\u0455er1") and mixed_script("\u0430dmin") and mixed_script("user_\u03a9")
    assert not any(mixed_script(i) for i in ("user1", "\u043f\u043e\u043b\u044c", "ユーザー1"))
    users = [{"user_id": uid, "interactions": [{"item_id": "i1", "timestamp": 1, "rating": 4},
                                               {"item_id": "i2", "timestamp": 2, "rating": 5}]}
             for uid in ("user1", "u\u0455er1", "user2")]
    (tmp_path / "h.json").write_text(json.dumps(users), encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps([{"item_id": i, "title": i, "category": "c"}
                                                 for i in ("i1", "i2", "i3")]), encoding="utf-8")
    with pytest.warns(RobustExplainWarning, match=r"1 user id mixes Latin, Cyrillic or Greek letters and may "
                                                  r"imitate other ids in the reports: 'u\\u0455er1'"):
        code = cli.main(["run", "--backend", "template", "--histories", str(tmp_path / "h.json"),
                         "--catalog", str(tmp_path / "c.json"), "--dry-run", "--progress", "off", "-q"])
    assert code == 0, capsys.readouterr().err


def test_two_ids_that_are_one_text_in_two_unicode_forms_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 61: "José" composed (NFC) and decomposed (NFD) were two users that read as one in every
    report."""
    import json
    import unicodedata

    from pytest_robustexplain import cli

    composed, decomposed = "Jos\u00e9", unicodedata.normalize("NFD", "Jos\u00e9")
    users = [{"user_id": uid, "interactions": [{"item_id": "i1", "timestamp": 1, "rating": 4},
                                               {"item_id": "i2", "timestamp": 2, "rating": 5}]}
             for uid in (composed, decomposed, "user2")]
    (tmp_path / "h.json").write_text(json.dumps(users), encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps([{"item_id": i, "title": i, "category": "c"}
                                                 for i in ("i1", "i2", "i3")]), encoding="utf-8")
    code = cli.main(["run", "--backend", "template", "--histories", str(tmp_path / "h.json"),
                     "--catalog", str(tmp_path / "c.json"), "--dry-run", "--progress", "off", "-q"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "user ids 'Jose\\u0301' and 'Jos\\xe9' are one text in two Unicode forms" in err, err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------------------
# Values at their edges (issue 41, item 5): one data error naming the place, never a crash later
# ---------------------------------------------------------------------------------------------------------


def _deep(levels: int) -> dict[str, object]:
    root: dict[str, object] = {}
    node = root
    for _ in range(levels - 1):
        child: dict[str, object] = {}
        node["a"] = child
        node = child
    return root


@pytest.mark.parametrize(("name", "text", "said"), [
    # Loaded, 900 levels then overflowed the recursion limit where a perturbation copies the features.
    ("deep.json", histories_json({"user_id": "u1",
                                  "interactions": [{"item_id": "i1", "features": _deep(900)}]}),
     ("deep.json", "interaction index 0", "field 'features'", "nested more than 32 levels deep")),
    # Loaded, and overflowed the preference polarity's means to infinity.
    ("big.json", histories_json({"user_id": "u1", "interactions": [{"item_id": "i1", "rating": 1e308}]}),
     ("big.json", "field 'rating'", "rating 1e+308 is beyond ±1,000,000")),
    ("low.json", histories_json({"user_id": "u1", "interactions": [{"item_id": "i1", "rating": -1e300}]}),
     ("low.json", "field 'rating'", "is beyond ±1,000,000")),
    # A raw ValueError with Python's advice to raise its limit on long integers.
    ("long.json", '{"users": [{"user_id": ' + "9" * 5000 + ', "interactions": [{"item_id": "i1"}]}]}',
     ("long.json", "invalid JSON: a number too long to read (5,000 digits)")),
    ("long.jsonl", '{"user_id": "u1", "item_id": "i1", "rating": ' + "9" * 5000 + "}\n",
     ("long.jsonl", "line 1", "a number too long to read")),
    ("cell.csv", 'user_id,item_id,features\nu1,i1,"{""n"": ' + "9" * 5000 + '}"\n',
     ("cell.csv", "field 'features'", "a number too long to read")),
])
def test_a_value_beyond_what_anything_downstream_can_hold_is_one_data_error(
        tmp_path: Path, name: str, text: str, said: tuple[str, ...]) -> None:
    with raises_data_error(*said) as caught:
        load_histories(write(tmp_path, name, text))
    assert_single_error(caught)
    assert "set_int_max_str_digits" not in str(caught.value)


def test_a_utf16_file_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A spreadsheet's "Unicode text" export (UTF-16 with its byte-order mark): said as such, where it was
    "not UTF-8 text (bad byte at offset 0)"."""
    path = tmp_path / "h.csv"
    path.write_bytes("user_id,item_id\nu1,i1\n".encode("utf-16"))
    with raises_data_error("h.csv", "UTF-16 text, not UTF-8", "save it as UTF-8"):
        load_histories(path)


def test_features_as_deep_as_the_limit_load(tmp_path: Path) -> None:
    path = write(tmp_path, "ok.json", histories_json(
        {"user_id": "u1", "interactions": [{"item_id": "i1", "features": _deep(32)}]}))
    assert len(load_histories(path)["u1"]) == 1
