"""Tests of the five history perturbations, their determinism and the perturbation registry."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_robustexplain.checks.attacks.measure import ATTACK_KINDS
from pytest_robustexplain.data import Catalog, Interaction, Item, UserHistory
from pytest_robustexplain.errors import ConfigError, DataError
from pytest_robustexplain.perturbations import (
    KINDS,
    PerturbationResult,
    apply_perturbation,
    available_kinds,
    canonical_kind,
    least_engaged_categories,
    register_perturbation,
    stable_hash,
    unregister_perturbation,
)
from pytest_robustexplain.perturbations.flip import FLIP

CATEGORIES = ("Beauty", "Books", "Electronics", "Fashion", "Home", "Sports", "Toys")
T0 = 1_700_000_000
DAY = 86_400


def make_catalog(per_category: int = 30, categories: tuple[str, ...] = CATEGORIES) -> Catalog:
    """A small deterministic catalog: ``per_category`` items in each category, with nested features."""
    items = []
    for c, category in enumerate(categories):
        for k in range(per_category):
            items.append(Item(item_id=f"{category[0]}{c}{k:03d}", title=f"{category} thing {k}",
                              category=category, features={"price": 10 + k, "tags": [category.lower()]}))
    return Catalog(items)


def make_history(n: int, catalog: Catalog, *, user_id: str = "u1",
                 categories: tuple[str, ...] = ("Electronics", "Books")) -> UserHistory:
    """``n`` distinct interactions cycling through ``categories``, a day apart, with ratings 1–5."""
    columns = [catalog.by_category(c) for c in categories]
    pool = [item for group in zip(*columns, strict=True) for item in group]
    assert len(pool) >= n, "test catalog too small"
    interactions = [pool[i].as_interaction(timestamp=T0 + i * DAY, rating=float(1 + i % 5)) for i in range(n)]
    return UserHistory(user_id, tuple(interactions))


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return make_catalog()


def perturb(history: UserHistory, kind: str, severity: int, catalog: Catalog, *, seed: int = 7,
            item_id: str = "target", repeat: int = 0) -> PerturbationResult:
    return apply_perturbation(history, kind, severity, catalog=catalog, seed=seed, item_id=item_id,
                              repeat=repeat)


def without_inserted(result: PerturbationResult) -> tuple[Interaction, ...]:
    inserted = {e["position"] for e in result.changes["inserted"]}
    return tuple(x for p, x in enumerate(result.perturbed.interactions) if p not in inserted)


# Expected counts, written out (not recomputed from the formula) for n = 10 and n = 50, severities 1–5.
INSERTED = {10: [1, 2, 3, 4, 5], 50: [5, 10, 15, 20, 25]}  # round(0.1·s·n), also drift replacements
SHUFFLED = {10: [2, 4, 6, 8, 10], 50: [10, 20, 30, 40, 50]}  # round(s/5·n)
BLANKED = {10: [3, 6, 9, 12, 15], 50: [15, 30, 45, 60, 75]}  # round(0.1·s·3n)
SCALING = [(n, s) for n in (10, 50) for s in range(1, 6)]


# ------------------------------------------------------------------------------------ severity scaling


@pytest.mark.parametrize(("n", "severity"), SCALING)
def test_noise_inserts_scaled_count_of_catalog_items(catalog: Catalog, n: int, severity: int) -> None:
    history = make_history(n, catalog)
    result = perturb(history, "noise_injection", severity, catalog)
    expected = INSERTED[n][severity - 1]
    assert len(result.perturbed) == n + expected
    assert len(result.changes["inserted"]) == expected
    assert without_inserted(result) == history.interactions  # the rest keeps its order untouched
    for entry in result.changes["inserted"]:
        inserted = result.perturbed.interactions[entry["position"]]
        item = catalog[entry["item_id"]]
        assert inserted.item_id == item.item_id
        assert (inserted.title, inserted.category, dict(inserted.features)) == (
            item.title, item.category, dict(item.features))
        assert inserted.rating in {x.rating for x in history}  # drawn from the user's own ratings


@pytest.mark.parametrize(("n", "severity"), SCALING)
def test_shuffle_moves_scaled_count_and_keeps_timestamps(catalog: Catalog, n: int, severity: int) -> None:
    history = make_history(n, catalog)
    result = perturb(history, "temporal_shuffle", severity, catalog)
    moved = result.changes["moved"]
    assert len(moved) == SHUFFLED[n][severity - 1]
    assert sorted(src for src, _ in moved) == sorted(dst for _, dst in moved)  # a permutation of the slots
    assert all(src != dst for src, dst in moved)  # every chosen item moves
    for src, dst in moved:
        before, after = history.interactions[src], result.perturbed.interactions[dst]
        assert (after.item_id, after.rating, after.category) == (
            before.item_id, before.rating, before.category)
    untouched = set(range(n)) - {src for src, _ in moved}
    assert all(result.perturbed.interactions[p] == history.interactions[p] for p in untouched)
    # The timestamp sequence stays in place, so the moved items appear at the wrong times.
    assert [x.timestamp for x in result.perturbed] == [x.timestamp for x in history]
    assert Counter(result.perturbed.item_ids) == Counter(history.item_ids)


@pytest.mark.parametrize(("n", "severity"), SCALING)
def test_dilution_inserts_from_least_engaged_categories(catalog: Catalog, n: int, severity: int) -> None:
    history = make_history(n, catalog, categories=("Electronics", "Books", "Home"))
    result = perturb(history, "behavior_dilution", severity, catalog)
    expected = INSERTED[n][severity - 1]
    assert len(result.perturbed) == n + expected
    assert without_inserted(result) == history.interactions
    pool = set(least_engaged_categories(history, catalog))
    assert pool == {"Beauty", "Fashion", "Sports", "Toys"}  # the user never touched these four
    assert set(result.changes["categories"]) == pool
    inserted = [result.perturbed.interactions[e["position"]] for e in result.changes["inserted"]]
    assert all(x.category in pool for x in inserted)
    assert not {x.item_id for x in inserted} & set(history.item_ids)


@pytest.mark.parametrize(("n", "severity"), SCALING)
def test_drift_replaces_most_recent_with_rare_categories(catalog: Catalog, n: int, severity: int) -> None:
    history = make_history(n, catalog, categories=("Electronics", "Books", "Home", "Sports"))
    result = perturb(history, "category_drift", severity, catalog)
    count = INSERTED[n][severity - 1]
    assert len(result.perturbed) == n
    assert [e["position"] for e in result.changes["replaced"]] == list(range(n - count, n))
    assert result.perturbed.interactions[: n - count] == history.interactions[: n - count]
    targets = result.changes["categories"]
    assert 1 <= len(targets) <= 2
    assert set(targets) <= {"Beauty", "Fashion", "Toys"}
    for before, after in zip(history.interactions[n - count:], result.perturbed.interactions[n - count:],
                             strict=True):
        assert after.category in targets
        assert after.item_id not in history.item_ids
        assert (after.timestamp, after.rating) == (before.timestamp, before.rating)


@pytest.mark.parametrize(("n", "severity"), SCALING)
def test_missing_values_blanks_scaled_count_of_fields(catalog: Catalog, n: int, severity: int) -> None:
    history = make_history(n, catalog)
    result = perturb(history, "missing_values", severity, catalog)
    blanked = {(e["position"], e["field"]) for e in result.changes["blanked"]}
    assert len(blanked) == len(result.changes["blanked"]) == BLANKED[n][severity - 1]
    for p, (before, after) in enumerate(zip(history, result.perturbed, strict=True)):
        for name in ("rating", "timestamp", "category"):
            expected = None if (p, name) in blanked else getattr(before, name)
            assert getattr(after, name) == expected
        assert (after.item_id, after.title) == (before.item_id, before.title)


@pytest.mark.parametrize(
    ("kind", "n", "severity", "count"),
    [("noise", 15, 1, 2), ("noise", 15, 3, 5), ("noise", 25, 1, 3), ("noise", 5, 5, 3), ("noise", 4, 1, 1),
     ("drift", 15, 5, 8), ("shuffle", 15, 1, 3), ("shuffle", 3, 1, 2), ("missing", 5, 1, 2),
     ("missing", 3, 5, 5)],
)
def test_counts_round_half_up_with_a_floor(catalog: Catalog, kind: str, n: int, severity: int,
                                           count: int) -> None:
    result = perturb(make_history(n, catalog), kind, severity, catalog)
    key = {"noise": "inserted", "drift": "replaced", "shuffle": "moved", "missing": "blanked"}[kind]
    assert len(result.changes[key]) == count


@pytest.mark.parametrize("kind", ["noise_injection", "behavior_dilution", "category_drift", "missing_values"])
def test_level_five_touches_half(catalog: Catalog, kind: str) -> None:
    for n in (12, 40):
        history = make_history(n, catalog)
        result = perturb(history, kind, 5, catalog)
        touched = next(len(v) for k, v in result.changes.items() if k != "categories")
        units = 3 * n if kind == "missing_values" else n
        assert touched == units // 2


def test_shuffle_level_five_moves_every_position(catalog: Catalog) -> None:
    history = make_history(30, catalog)
    for repeat in range(5):
        result = perturb(history, "shuffle", 5, catalog, repeat=repeat)
        assert sorted(src for src, _ in result.changes["moved"]) == list(range(30))
        assert all(a.item_id != b.item_id for a, b in zip(history, result.perturbed, strict=True))


# ------------------------------------------------------------------------------------------ timestamps


def known_timestamps(history: UserHistory) -> list[int]:
    return [x.timestamp for x in history if x.timestamp is not None]


@pytest.mark.parametrize("kind", ["noise_injection", "behavior_dilution"])
def test_inserted_timestamps_keep_history_sorted(catalog: Catalog, kind: str) -> None:
    history = make_history(20, catalog)
    first, last = history.interactions[0].timestamp, history.interactions[-1].timestamp
    assert first is not None and last is not None
    for seed in range(30):
        result = perturb(history, kind, 5, catalog, seed=seed)
        stamps = known_timestamps(result.perturbed)
        assert len(stamps) == len(result.perturbed)
        assert stamps == sorted(stamps)
        # At the ends the range extends by the user's typical gap (one day here), no further.
        assert first - DAY <= stamps[0] and stamps[-1] <= last + DAY


@pytest.mark.parametrize("kind", ["noise_injection", "behavior_dilution"])
def test_insertion_around_missing_timestamps(catalog: Catalog, kind: str) -> None:
    base = make_history(12, catalog)
    history = UserHistory("u1", tuple(dataclasses.replace(x, timestamp=None) if p % 3 == 1 else x
                                      for p, x in enumerate(base.interactions)))
    for seed in range(20):
        stamps = known_timestamps(perturb(history, kind, 4, catalog, seed=seed).perturbed)
        assert stamps == sorted(stamps)


def test_no_timestamps_means_none_inserted(catalog: Catalog) -> None:
    history = UserHistory("u1", tuple(dataclasses.replace(x, timestamp=None, rating=None)
                                      for x in make_history(10, catalog).interactions))
    result = perturb(history, "noise", 5, catalog)
    assert all(x.timestamp is None and x.rating is None for x in result.perturbed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("severity", [1, 5])
def test_sparse_histories_do_not_crash(catalog: Catalog, kind: str, severity: int) -> None:
    # Missing categories, timestamps and ratings, an item unknown to the catalog, and a single interaction.
    sparse = UserHistory("u2", (Interaction("X1"), Interaction("B1000", category=None, timestamp=T0),
                                Interaction("E2001", category="Electronics", rating=4.0), Interaction("X2")))
    for history in (sparse, UserHistory("u3", (Interaction("only"),))):
        result = perturb(history, kind, severity, catalog)
        json.dumps(result.to_dict())
        assert result.summary


# ----------------------------------------------------------------------------------------- determinism


def result_fingerprints(catalog: Catalog, kinds: tuple[str, ...]) -> list[Any]:
    history = make_history(25, catalog)
    out = []
    for kind in kinds:
        for severity in (1, 3, 5):
            result = perturb(history, kind, severity, catalog, seed=11, item_id="B1000", repeat=2)
            out.append([result.kind, result.changes, result.perturbed.to_dict()])
    return out


def test_same_keys_same_result_in_any_order(catalog: Catalog) -> None:
    forward = result_fingerprints(catalog, KINDS)
    backward = result_fingerprints(catalog, KINDS[::-1])
    assert forward == [x for i in range(len(KINDS) - 1, -1, -1) for x in backward[3 * i: 3 * i + 3]]
    np.random.seed(123)  # global numpy state must not matter
    assert result_fingerprints(catalog, KINDS) == forward


def test_same_keys_same_result_in_another_process(catalog: Catalog, tmp_path: Path) -> None:
    script = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('perturbation_tests', {str(Path(__file__))!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(json.dumps(module.result_fingerprints(module.make_catalog(), module.KINDS)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4242"}  # a different str hash must not change anything
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(json.dumps(result_fingerprints(catalog, KINDS)))


@pytest.mark.parametrize("kind", KINDS)
def test_other_keys_give_other_results(catalog: Catalog, kind: str) -> None:
    history = make_history(30, catalog)
    base = perturb(history, kind, 3, catalog)
    for variant in (perturb(history, kind, 3, catalog, repeat=1), perturb(history, kind, 3, catalog, seed=8),
                    perturb(history, kind, 3, catalog, item_id="other")):
        assert variant.perturbed != base.perturbed
    other_user = perturb(dataclasses.replace(history, user_id="u9"), kind, 3, catalog)
    assert other_user.changes != base.changes


def test_stable_hash_is_sha256_based() -> None:
    assert stable_hash("abc") == 0xBA7816BF8F01CFEA  # first 8 bytes of SHA-256("abc")
    assert stable_hash("") != stable_hash(" ")


# ------------------------------------------------------------------------------- purity and identity


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_are_not_mutated_or_shared(kind: str) -> None:
    catalog = make_catalog()
    history = make_history(20, catalog)
    before = (json.dumps(history.to_dict()), [json.dumps(i.to_dict()) for i in catalog.items_list])
    result = perturb(history, kind, 5, catalog)
    assert (json.dumps(history.to_dict()), [json.dumps(i.to_dict()) for i in catalog.items_list]) == before
    assert result.original is history
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.kind = "other"  # type: ignore[misc]
    for x in result.perturbed:
        if x.item_id in catalog and x not in history.interactions:
            # New interactions own their features: the catalog's nested lists are not shared.
            assert x.features["tags"] is not catalog[x.item_id].features["tags"]


def test_identical_detection(catalog: Catalog) -> None:
    single = make_history(1, catalog)
    assert perturb(single, "shuffle", 5, catalog).identical
    assert perturb(single, "shuffle", 5, catalog).summary.endswith("(history unchanged)")
    same = UserHistory("u1", tuple(Interaction("B1000", "Books", T0 + i, 4.0) for i in range(6)))
    assert perturb(same, "shuffle", 3, catalog).identical  # moved items are all alike
    bare = UserHistory("u1", tuple(Interaction(f"B10{i:02d}") for i in range(5)))
    assert perturb(bare, "missing", 3, catalog).identical  # nothing left to blank
    assert perturb(bare, "missing", 3, catalog).changes == {"blanked": []}
    assert not perturb(make_history(10, catalog), "noise", 1, catalog).identical


def test_shuffle_finds_a_real_change_among_lookalikes(catalog: Catalog) -> None:
    # Nine identical interactions and one different one: a change is possible, so it must happen.
    twins = [Interaction("B1000", "Books", None, 4.0)] * 9 + [Interaction("E2000", "Electronics", None, 2.0)]
    history = UserHistory("u1", tuple(twins))
    for seed in range(40):
        assert not perturb(history, "shuffle", 1, catalog, seed=seed).identical


def test_recommended_item_is_never_inserted() -> None:
    catalog = Catalog([Item("target", "T", "Books"), Item("other", "O", "Toys")])
    history = UserHistory("u1", (Interaction("h1", "Books", T0),))
    for seed in range(10):
        result = perturb(history, "noise", 5, catalog, seed=seed, item_id="target")
        assert "target" not in result.perturbed.item_ids


# ------------------------------------------------------------------------------ categories and errors


def test_least_engaged_falls_back_when_user_engages_with_everything() -> None:
    catalog = make_catalog(per_category=6, categories=("Books", "Home", "Toys"))
    pool = [*catalog.by_category("Books")[:4], *catalog.by_category("Home")[:2], *catalog.by_category("Toys")]
    history = UserHistory("u1", tuple(x.as_interaction(timestamp=T0 + i) for i, x in enumerate(pool)))
    assert least_engaged_categories(history, catalog) == ("Books", "Home")  # 4 and 2; Toys (6) is most
    drift = perturb(history, "drift", 2, catalog)
    assert set(drift.changes["categories"]) <= {"Home", "Books"}
    dilution = perturb(history, "dilution", 2, catalog)
    assert {e["category"] for e in dilution.changes["inserted"]} <= {"Home", "Books"}


def test_least_engaged_prefers_unseen_categories_and_breaks_ties_by_name() -> None:
    catalog = make_catalog(per_category=4, categories=("Books", "Home", "Sports", "Toys"))
    even = UserHistory("u1", tuple(catalog.by_category(c)[0].as_interaction() for c in catalog.categories))
    assert least_engaged_categories(even, catalog) == ("Books", "Home")  # all tied: first half by name
    heavy = UserHistory("u1", tuple(x.as_interaction() for x in catalog.items_list if x.category != "Toys"))
    assert least_engaged_categories(heavy, catalog) == ("Toys",)  # the one never seen
    drift = perturb(heavy, "drift", 5, catalog)
    assert drift.changes["categories"] == ["Toys"]
    assert [e["category"] for e in drift.changes["replaced"]] == ["Toys"] * 6


def test_uncategorised_history_uses_catalog_categories(catalog: Catalog) -> None:
    history = make_history(10, catalog, categories=("Books",))
    blind = UserHistory("u1", tuple(dataclasses.replace(x, category=None) for x in history))
    assert least_engaged_categories(blind, catalog) == least_engaged_categories(history, catalog)
    assert "Books" not in least_engaged_categories(history, catalog)


@pytest.mark.parametrize("kind", ["behavior_dilution", "category_drift"])
def test_catalog_without_categories_is_a_data_error(kind: str) -> None:
    catalog = Catalog([Item("a"), Item("b")])
    with pytest.raises(DataError, match=r"catalog.*category"):
        perturb(UserHistory("u1", (Interaction("a"),)), kind, 1, catalog)


def test_empty_history_names_the_user(catalog: Catalog) -> None:
    with pytest.raises(DataError, match="user 'lonely'"):
        perturb(UserHistory("lonely", ()), "noise", 1, catalog)


def test_empty_catalog_for_noise() -> None:
    with pytest.raises(DataError, match="catalog"):
        perturb(UserHistory("u1", (Interaction("a"),)), "noise", 1, Catalog([]))


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("noise", "noise_injection"), ("shuffle", "temporal_shuffle"), ("dilution", "behavior_dilution"),
     ("dilute", "behavior_dilution"), ("drift", "category_drift"), ("missing", "missing_values"),
     ("Temporal-Shuffle", "temporal_shuffle"), (" missing_values ", "missing_values")],
)
def test_aliases_resolve(catalog: Catalog, alias: str, canonical: str) -> None:
    assert canonical_kind(alias) == canonical
    history = make_history(10, catalog)
    by_alias, by_name = perturb(history, alias, 2, catalog), perturb(history, canonical, 2, catalog)
    assert by_alias.kind == canonical
    assert by_alias == by_name


def test_unknown_kind_lists_the_valid_ones(catalog: Catalog) -> None:
    with pytest.raises(ConfigError) as info:
        perturb(make_history(3, catalog), "jitter", 1, catalog)
    message = str(info.value)
    assert "'jitter'" in message
    assert all(kind in message for kind in KINDS)
    with pytest.raises(ConfigError, match="None"):
        canonical_kind(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("severity", [0, 6, -1, 2.0, 2.5, "3", True, False, None])
def test_bad_severity_is_a_config_error(catalog: Catalog, severity: Any) -> None:
    with pytest.raises(ConfigError, match="severity") as info:
        perturb(make_history(3, catalog), "noise", severity, catalog)
    assert repr(severity) in str(info.value)


def test_numpy_integer_severity_is_accepted(catalog: Catalog) -> None:
    result = perturb(make_history(10, catalog), "noise", np.int64(3), catalog)
    assert result.severity == 3 and type(result.severity) is int


@pytest.mark.parametrize(("option", "value"), [("seed", -1), ("seed", "7"), ("repeat", -2), ("repeat", 1.5)])
def test_bad_seed_or_repeat_is_a_config_error(catalog: Catalog, option: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=option):
        apply_perturbation(make_history(3, catalog), "noise", 1, catalog=catalog,
                           **{"seed": 1, option: value})


def test_changes_and_summaries_are_readable(catalog: Catalog) -> None:
    history = make_history(20, catalog)
    summaries = {kind: perturb(history, kind, 1, catalog).summary for kind in KINDS}
    assert summaries["noise_injection"].startswith("inserted 2 random items at positions ")
    assert summaries["temporal_shuffle"].startswith("moved 4 items among positions ")
    assert summaries["behavior_dilution"].startswith("inserted 2 items from least-engaged categories ")
    assert summaries["category_drift"].startswith("replaced the 2 most recent items (positions 18, 19) with")
    assert summaries["missing_values"].startswith("blanked 6 fields (")
    long = perturb(make_history(50, catalog), "noise", 5, catalog).summary
    assert "… (+17 more)" in long and "\n" not in long
    for kind in KINDS:
        payload = perturb(history, kind, 4, catalog).to_dict()
        assert json.loads(json.dumps(payload)) == payload


# ------------------------------------------------------------------------------------------- registry


def reverse_history(history: UserHistory, severity: int, catalog: Catalog,
                    rng: np.random.Generator) -> tuple[UserHistory, dict[str, Any]]:
    """A custom perturbation: reverse the last 2·severity interactions, then drop one at random."""
    cut = max(0, len(history) - 2 * severity)
    items = list(history.interactions[:cut]) + list(reversed(history.interactions[cut:]))
    dropped = int(rng.integers(len(items)))
    del items[dropped]
    return UserHistory(history.user_id, tuple(items)), {"reversed_from": cut, "dropped": dropped}


@pytest.fixture
def custom_kind() -> Iterator[str]:
    register_perturbation("reverse_tail", reverse_history, aliases=("reverse",))
    yield "reverse_tail"
    unregister_perturbation("reverse_tail")


def test_custom_perturbation_runs_like_a_builtin(catalog: Catalog, custom_kind: str) -> None:
    assert available_kinds() == (*KINDS, *ATTACK_KINDS, FLIP, custom_kind)
    assert canonical_kind("reverse") == custom_kind
    history = make_history(12, catalog)
    result = perturb(history, "reverse", 2, catalog)
    assert result.kind == custom_kind and len(result.perturbed) == 11
    assert result == perturb(history, custom_kind, 2, catalog)
    assert result.changes != perturb(history, custom_kind, 2, catalog, repeat=1).changes
    assert result.summary.startswith("reverse_tail L2: {")


def test_custom_registration_is_validated(custom_kind: str) -> None:
    cases: list[tuple[Any, Any, Any, str]] = [
        (custom_kind, reverse_history, (), "already registered"),
        ("other", reverse_history, ("reverse",), "already registered"),
        ("noise", reverse_history, (), "already registered"),
        ("other", reverse_history, ("dilute",), "already registered"),
        ("other", reverse_history, ("twin", "twin"), "already registered"),
        ("Bad-Name", reverse_history, (), "not valid"),
        ("", reverse_history, (), "not valid"),
        ("control", reverse_history, (), "reserved"),
        ("other", "not callable", (), "callable"),
        ("other", reverse_history, "twin", "list of names"),
    ]
    for name, fn, aliases, message in cases:
        with pytest.raises(ConfigError, match=message):
            register_perturbation(name, fn, aliases=aliases)
    # Failed registrations leave nothing behind.
    assert available_kinds() == (*KINDS, *ATTACK_KINDS, FLIP, custom_kind)
    with pytest.raises(ConfigError, match="twin"):
        canonical_kind("twin")


def test_unregister(catalog: Catalog) -> None:
    register_perturbation("temp_kind", reverse_history, aliases=("temp",))
    unregister_perturbation("temp")
    assert "temp_kind" not in available_kinds()
    with pytest.raises(ConfigError, match="unknown"):
        canonical_kind("temp")
    with pytest.raises(ConfigError, match="built in"):
        unregister_perturbation("noise")


@pytest.mark.parametrize(
    ("output", "message"),
    [(None, "must return"), ((UserHistory("someone else", ()), {}), "UserHistory of user"),
     ("history", "must return"), ((None, {}), "UserHistory"), ("changes-list", "as a dict"),
     ("unserialisable", "JSON")],
)
def test_bad_custom_output_is_reported(catalog: Catalog, output: Any, message: str) -> None:
    history = make_history(5, catalog)

    def broken(h: UserHistory, s: int, c: Catalog, rng: np.random.Generator) -> Any:
        if output == "changes-list":
            return h, ["x"]
        if output == "unserialisable":
            return h, {"rng": rng}
        return output

    register_perturbation("broken", broken)
    try:
        with pytest.raises(ConfigError, match=message) as info:
            perturb(history, "broken", 1, catalog)
        assert "'broken'" in str(info.value)
    finally:
        unregister_perturbation("broken")


# ------------------------------------------------------------------------------ planning at scale
def _listed_draw(pool: list[Item], count: int, rng: np.random.Generator, avoid: set[str]) -> list[Item]:
    """The draw as it was first written (the pool built, then filtered): what the fast draw must equal."""
    fresh = [item for item in pool if item.item_id not in avoid]
    source = fresh if len(fresh) >= count else list(pool)
    picks = rng.choice(len(source), size=count, replace=count > len(source))
    return [source[int(i)] for i in picks]


@pytest.mark.parametrize("seed", range(40))
def test_the_draw_from_categories_equals_the_pool_built_and_filtered(seed: int) -> None:
    """The dilution's and drift's draw maps an index through the categories and past the avoided items
    instead of building the pool: on catalogs with an item left out (the recommended one), pools mostly
    avoided (the whole-pool fallback) and avoided ids outside the pool or the catalog, the same items."""
    from pytest_robustexplain.perturbations.core import _draw_items

    rand = np.random.default_rng(seed)
    categories = [f"c{i}" for i in range(int(rand.integers(1, 6)))]
    items = [Item(f"i{n}", category=categories[int(rand.integers(len(categories)))] if rand.random() < 0.9
                  else None) for n in range(int(rand.integers(2, 40)))]
    base = Catalog(items)
    catalog = base.without(items[int(rand.integers(len(items)))].item_id) if seed % 2 else base
    chosen = [c for c in categories if rand.random() < 0.6 and catalog.by_category(c)] or \
        [c for c in categories if catalog.by_category(c)]
    pool = [item for c in chosen for item in catalog.by_category(c)]
    if not pool:
        return
    avoid = {i.item_id for i in items if rand.random() < (0.9 if seed % 3 == 0 else 0.3)} | {"nowhere"}
    for count in (1, 2, 5, len(pool), len(pool) + 3):
        ours = _draw_items(catalog, chosen, count, np.random.default_rng(seed + count), avoid)
        assert ours == _listed_draw(pool, count, np.random.default_rng(seed + count), avoid), count


def test_a_dry_run_plans_every_pair_without_holding_its_perturbed_history() -> None:
    """The planner a dry run prices with keeps no perturbation (memory flat in the pairs it plans; kinds that
    say they surely change a history are not even made) and makes one again, the same, when a pair's call
    is asked for (the response-cache lookup) — the same pairs, the same trivial ones skipped."""
    from pytest_robustexplain.data import EvalCase, generate_synthetic
    from pytest_robustexplain.perturbations import KINDS
    from pytest_robustexplain.sweep import PairPlanner, SliceSpec

    data = generate_synthetic(n_users=6, n_cases=6)
    alike = EvalCase(UserHistory("same", (Interaction("i1"),) * 3), data.cases[0].item)  # nothing to move
    cases = (*data.cases, alike)
    spec = SliceSpec("s", "m", cases, tuple(KINDS), (1, 3), 1, 7)
    kept, lean = PairPlanner(data.catalog), PairPlanner(data.catalog, keep=False)
    order = [c.user_id for c in cases]
    a, b = kept.plan(spec, order), lean.plan(spec, order)
    assert a.trivial == b.trivial == 4  # the shuffle and missing values at two severities, for "same"
    assert [p.key for p in a.pairs] == [p.key for p in b.pairs]
    assert all(p.perturbation is None for p in b.pairs) and all(p.perturbation for p in a.pairs)
    for held, made in zip(a.pairs, b.pairs, strict=True):
        assert kept.perturbed_call(held) == lean.perturbed_call(made)


@pytest.mark.parametrize("seed", range(30))
def test_a_kind_that_says_it_surely_changes_a_history_does_and_raises_nothing(seed: int) -> None:
    """Noise, dilution, the shuffle and missing values say, without perturbing, that they change a history
    (a dry run then prices the pair unperturbed): wherever they say so — small catalogs, one category, the
    recommended item the only one of its category, repeated items, ratings and timestamps missing, the
    paper's counts — the perturbation changes it and raises nothing; where the shuffle or missing values
    say no, the perturbation leaves the history as it was."""
    from pytest_robustexplain.perturbations import DEFAULT_REGISTRY, KindRegistry

    rand = np.random.default_rng(seed)
    categories = [f"c{i}" for i in range(int(rand.integers(1, 4)))]
    items = [Item(f"i{n}", category=categories[int(rand.integers(len(categories)))] if rand.random() < 0.6
                  else None) for n in range(int(rand.integers(1, 8 if seed % 4 else 2)))]  # one item: alike
    catalog = Catalog(items)
    blank = 0.3 if seed % 5 else 1.0  # every fifth history has no metadata at all
    history = UserHistory("u", tuple(
        Interaction(items[int(rand.integers(len(items)))].item_id,
                    category=None if rand.random() < blank else "c0",
                    timestamp=None if rand.random() < blank else int(rand.integers(0, 10**6)),
                    rating=None if rand.random() < blank else 4.0)
        for _ in range(int(rand.integers(0, 6)))))
    said = 0
    for registry in (DEFAULT_REGISTRY, KindRegistry(DEFAULT_REGISTRY, counts="paper")):
        for kind in ("noise_injection", "behavior_dilution", "temporal_shuffle", "missing_values"):
            changes = registry.entry(kind).changes
            assert changes is not None
            if not changes(history, catalog):
                if kind in ("temporal_shuffle", "missing_values") and len(history):
                    assert apply_perturbation(history, kind, 3, catalog=catalog, seed=seed).identical
                continue
            said += 1
            for item in items:
                for severity in (1, 5):
                    result = apply_perturbation(history, kind, severity, catalog=catalog, seed=seed,
                                                item_id=item.item_id, kinds=registry)
                    assert not result.identical
    assert said or len(history) == 0 or sum(i.category is not None for i in items) < 2
