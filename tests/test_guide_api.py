"""The practitioner's guide's Python surface (issue 40, item 1): ``import robustexplain``, its evaluation
fixture, the five perturbations as functions, one generation a call — and the guide's own CI module, run as
written against the fake server: a stable explainer passes it, a fragile one fails it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import robustexplain
from pytest_robustexplain import api
from pytest_robustexplain.data import default_dataset
from pytest_robustexplain.data.evalset import EVAL_FORMAT, eval_fixture, read_eval_fixture, write_eval_fixture
from pytest_robustexplain.errors import ConfigError, DataError
from pytest_robustexplain.testing import FakeOllamaServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "robustness_eval.json"
EXAMPLE = ROOT / "examples" / "guide_ci"
KINDS = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")


@pytest.fixture
def quiet_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ROBUSTEXPLAIN_* setting from the machine, and a directory without project files to start in."""
    for name in list(os.environ):
        if name.startswith("ROBUSTEXPLAIN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def _closed() -> object:
    yield
    api.close_explainers()


# ------------------------------------------------------------------------------ the fixture file
def test_the_committed_fixture_is_the_generators(tmp_path: Path) -> None:
    write_eval_fixture(eval_fixture(default_dataset()), tmp_path / "eval.json")
    assert FIXTURE.read_bytes() == (tmp_path / "eval.json").read_bytes(), (
        "fixtures/robustness_eval.json drifted from eval_fixture(); regenerate it with\npython -c \"from "
        "pytest_robustexplain.data import default_dataset; from pytest_robustexplain.data.evalset import *; "
        "write_eval_fixture(eval_fixture(default_dataset()), 'fixtures/robustness_eval.json')\"")


def test_the_guides_fixture_loads_from_any_directory_and_a_missing_one_says_so(quiet_env: Path) -> None:
    """Outside a checkout (no fixtures/ folder here), ``load_test_fixture()`` gives the fixture the file was
    written from; a path given that is not there is "file not found", not "not valid JSON" (issue 62)."""
    bundled = api.load_test_fixture()
    from_file = api.load_test_fixture(FIXTURE)
    assert [(u.user_id, u.history, i) for u, i in bundled] == [
        (u.user_id, u.history, i) for u, i in from_file]
    with pytest.raises(DataError, match=r"missing\.json: file not found") as raised:
        api.load_test_fixture("missing.json")
    assert "JSON" not in str(raised.value)


def test_the_fixture_holds_ten_users_with_three_unseen_items_each() -> None:
    catalog, users = read_eval_fixture(FIXTURE)
    assert len(users) == 10 and len(catalog) == 200
    for history, items in users:
        assert len(items) == 3 and len({i.item_id for i in items}) == 3
        assert not {i.item_id for i in items} & {i.item_id for i in history}  # recommended, never seen
        assert all(i.item_id in catalog for i in items)


@pytest.mark.parametrize(("text", "said"), [
    ("{", "not valid JSON"),
    ('{"format": "other/1", "users": []}', "format must be 'robustexplain-eval/1'"),
    (f'{{"format": "{EVAL_FORMAT}", "users": []}}', "has no users"),
    (f'{{"format": "{EVAL_FORMAT}", "users": [{{"user_id": "u1", "history": [], "items": []}}]}}',
     "has no recommended items"),
    (f'{{"format": "{EVAL_FORMAT}", "users": [{{"user_id": "u1", "history": [{{"rating": 5}}], '
     '"items": [{"item_id": "i1"}]}]}', "user 0, interaction 0"),
    (f'{{"format": "{EVAL_FORMAT}", "users": [], "extra": 1}}', "extra"),
])
def test_a_bad_fixture_is_one_data_error_naming_the_record(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "eval.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=said) as info:
        read_eval_fixture(path)
    assert str(path) in str(info.value)


# ----------------------------------------------------------------------------- the API under the guide's name
def test_robustexplain_is_the_public_api_under_the_methods_name() -> None:
    import pytest_robustexplain

    for name in pytest_robustexplain.__all__:
        assert getattr(robustexplain, name) is getattr(pytest_robustexplain, name), name
    with pytest.raises(AttributeError):
        robustexplain.not_a_name  # noqa: B018


def test_importing_robustexplain_loads_nothing_heavy() -> None:
    code = ("import sys, robustexplain; heavy = [m for m in ('numpy', 'pytest', 'pytest_robustexplain.api', "
            "'httpx') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_load_test_fixture_gives_user_and_item_pairs_whose_history_knows_its_catalog() -> None:
    pairs = robustexplain.load_test_fixture(FIXTURE)
    assert len(pairs) == 30
    user, item = pairs[0]
    assert user.user_id == "U010" and isinstance(item, dict) and "item_id" in item
    assert isinstance(user.history, list) and all("item_id" in i for i in user.history)
    # noise draws from the fixture's catalog, not from the user's own items, without being told
    noisy = robustexplain.apply_perturbation(user.history, "noise_injection", 5)
    own = {i["item_id"] for i in user.history}
    added = {i["item_id"] for i in noisy} - own
    assert added and len(noisy) > len(user.history)
    assert noisy.catalog is user.history.catalog  # a perturbed history perturbs on from the same catalog


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_a_function_of_a_history_and_a_severity(kind: str) -> None:
    user, _ = robustexplain.load_test_fixture(FIXTURE)[3]
    function = getattr(robustexplain, kind)
    assert function.__name__ == kind and kind in (function.__doc__ or "")
    assert function(user.history, 4) == robustexplain.apply_perturbation(user.history, kind, 4)
    seeded = robustexplain.apply_perturbation(user.history, kind, 4, seed=7)
    assert function(user.history, 4, seed=7) == seeded


def _frame(history: list[dict[str, object]]) -> object:
    """A history as the guide allows it: a pandas DataFrame, a column per field, features as columns."""
    pd = pytest.importorskip("pandas")  # in the dev extras: always there in CI
    rows = [{**{k: v for k, v in i.items() if k != "features"}, **dict(i.get("features") or {})}  # type: ignore[call-overload]
            for i in history]
    return pd.DataFrame([{"user_id": "U010", **row} for row in rows])


@pytest.mark.parametrize("kind", KINDS)
def test_a_dataframe_history_perturbs_as_its_records_do_and_comes_back_a_dataframe(kind: str) -> None:
    user, _ = robustexplain.load_test_fixture(FIXTURE)[0]
    frame = _frame(user.history)
    catalog = user.history.catalog
    out = robustexplain.apply_perturbation(frame, kind, 4, catalog=catalog)
    expected = robustexplain.apply_perturbation(user.history, kind, 4, catalog=catalog, user_id="U010")
    assert type(out) is type(frame) and list(out["user_id"].unique()) == ["U010"]
    assert out["item_id"].tolist() == [i["item_id"] for i in expected]
    # missing cells stay missing (NaN in the frame), numbers stay numbers
    ratings = [None if r != r else r for r in out["rating"].tolist()]  # NaN != NaN
    assert ratings == [i.get("rating") for i in expected]


def test_a_dataframe_is_one_users_history_with_numpy_values_and_timestamps_made_plain() -> None:
    pd = pytest.importorskip("pandas")
    from pytest_robustexplain.data import history_from

    frame = pd.DataFrame({"item_id": ["a", "b", "c"], "rating": [5, None, 3],
                          "timestamp": pd.to_datetime(["2024-01-01", None, "2024-01-03"]),
                          "category": ["Books", None, "Toys"], "brand": ["X", None, "Y"]})
    history = history_from(frame)
    assert [i.rating for i in history] == [5.0, None, 3.0] and history.interactions[0].timestamp == 1704067200
    assert [dict(i.features) for i in history] == [{"brand": "X"}, {}, {"brand": "Y"}]
    assert history.interactions[1].category is None and history.user_id == "user"
    with pytest.raises(DataError, match="holds 2 users' interactions; pass one user's rows"):
        history_from(pd.DataFrame({"user_id": ["u1", "u2"], "item_id": ["a", "b"]}))
    with pytest.raises(DataError, match="needs an item_id column"):
        history_from(pd.DataFrame({"item": ["a"]}))
    with pytest.raises(DataError, match="rating"):  # checked like a data file's row
        history_from(pd.DataFrame({"item_id": ["a"], "rating": ["great"]}))


# ------------------------------------------------------------------------------ generate_explanation
def test_without_a_model_generation_says_how_to_name_one(quiet_env: Path) -> None:
    assert robustexplain.explanation_model() is None
    history, item = [{"item_id": "a", "category": "Books"}], {"item_id": "b", "category": "Books"}
    with pytest.raises(ConfigError, match=r"generate_explanation: no model configured.*pass model=NAME.*"
                                          r"set ROBUSTEXPLAIN_MODEL"):
        robustexplain.generate_explanation(history, item)
    with pytest.raises(ConfigError, match="unknown setting 'temprature'; did you mean 'temperature'"):
        robustexplain.generate_explanation(history, item, model="m", temprature=0.1)


def test_one_generation_a_call_over_one_preflight_and_the_response_cache(quiet_env: Path) -> None:
    pairs = robustexplain.load_test_fixture(FIXTURE)[:3]
    with FakeOllamaServer() as server:
        os.environ["ROBUSTEXPLAIN_HOST"] = server.url  # from the environment, as any setting
        try:
            assert robustexplain.explanation_model(model="fake-model") == "fake-model"
            texts = [robustexplain.generate_explanation(u.history, i, model="fake-model") for u, i in pairs]
            assert all(isinstance(t, str) and t for t in texts)
            assert server.chat_calls == 3 + 1  # one warm-up call of the preflight, then one per explanation
            tags = server.calls["/api/tags"]
            again = [robustexplain.generate_explanation(u.history, i, model="fake-model") for u, i in pairs]
            assert again == texts and server.chat_calls == 4  # the response cache answers
            assert server.calls["/api/tags"] == tags  # no second preflight
            robustexplain.close_explainers()
            assert [robustexplain.generate_explanation(u.history, i, model="fake-model", cache="off")
                    for u, i in pairs] == texts  # deterministic, and asked again with the cache off
            assert server.chat_calls > 4
        finally:
            del os.environ["ROBUSTEXPLAIN_HOST"]
    assert (quiet_env / ".robustexplain-cache").is_dir()


# ------------------------------------------------------------------------ the guide's CI module, as written
def _run_example(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    shutil.copytree(EXAMPLE, tmp_path / "guide_ci")
    (tmp_path / "fixtures").mkdir()
    shutil.copy(FIXTURE, tmp_path / "fixtures" / FIXTURE.name)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ROBUSTEXPLAIN_")}
    command = [sys.executable, "-m", "pytest", "guide_ci", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=tmp_path, env={**clean, **env}, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize(("mode", "passes"), [("stable", True), ("fragile", False)])
def test_the_guides_module_passes_a_stable_explainer_and_fails_a_fragile_one(tmp_path: Path, mode: str,
                                                                             passes: bool) -> None:
    with FakeOllamaServer() as server:
        server.mode = mode
        done = _run_example(tmp_path, {"ROBUSTEXPLAIN_MODEL": "fake-model", "ROBUSTEXPLAIN_HOST": server.url})
        assert server.chat_calls == 1 + 10 * 3 * 6  # warm-up, then 30 pairs x (original + 5 kinds)
    assert (done.returncode == 0) is passes, done.stdout[-3000:]
    if not passes:
        assert "AssertionError: combined robustness 0.3" in done.stdout


def test_the_guides_module_without_a_model_is_skipped_saying_how_to_run_it(tmp_path: Path) -> None:
    done = _run_example(tmp_path, {}, "-rs")
    assert done.returncode == 0 and "1 skipped" in done.stdout, done.stdout
    assert "calls the model itself: set ROBUSTEXPLAIN_MODEL" in done.stdout


def test_the_fixture_is_plain_json() -> None:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert data["format"] == EVAL_FORMAT and len(data["users"]) == 10
