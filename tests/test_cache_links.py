"""No cache writes through a symbolic link (issue 26 item 6): a link planted in a cache directory — a file
named as the cache's database or one of its journal files, a lock file — is refused with a warning, and
nothing is created, appended to or replaced outside the cache directory."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from pytest_robustexplain.errors import RobustExplainWarning
from pytest_robustexplain.explainers.base import Explanation
from pytest_robustexplain.explainers.cache import ResponseCache
from pytest_robustexplain.safe_files import LinkRefused, check_inside
from pytest_robustexplain.score_cache import CachedScorer, ScoreCache
from pytest_robustexplain.store import DB_NAME

E, E_PRIME = "You will love the Wireless Earbuds Pro.", "The Wireless Earbuds Pro suit you."
KEY = "ab" + "0" * 62


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the cache, with a file a link may point at."""
    there = tmp_path / "outside"
    there.mkdir()
    (there / "victim.txt").write_text("untouched\n", encoding="utf-8")
    return there


def _plant(root: Path, outside: Path, suffix: str) -> dict[str, str]:
    """A link where SQLite would open the database or one of its journal files, to a file outside (the
    database's to an existing file, a journal's to one SQLite would create); what ``outside`` holds before."""
    root.mkdir(parents=True, exist_ok=True)
    target = outside / ("victim.txt" if suffix == "" else f"new{suffix}")
    (root / (DB_NAME + suffix)).symlink_to(target)
    return _snapshot(outside)


def _snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): p.read_text(encoding="utf-8") for p in directory.rglob("*")
            if p.is_file()}


def test_check_inside_refuses_links_and_parents_outside(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "cache"
    (root / "ab").mkdir(parents=True)
    check_inside(root, root / "ab" / "x.json")  # a plain path inside: fine
    check_inside(root, root / "cd" / "x.json")  # not there yet: fine
    (root / "ab" / "link.json").symlink_to(outside / "victim.txt")
    with pytest.raises(LinkRefused, match="is a symbolic link"):
        check_inside(root, root / "ab" / "link.json")
    (root / "cd").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkRefused, match="leads outside"):
        check_inside(root, root / "cd" / "x.json")


SIDE_FILES = ["", "-wal", "-shm", "-journal"]


@pytest.mark.parametrize("suffix", SIDE_FILES)
def test_the_score_cache_never_writes_through_a_link(tmp_path: Path, outside: Path, suffix: str) -> None:
    root = tmp_path / "cache"
    before = _plant(root, outside, suffix)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer = CachedScorer(cache=ScoreCache(root))
        scores = scorer.score(E, E_PRIME)
    assert 0 < scores.combined <= 1  # scored all the same
    assert _snapshot(outside) == before  # nothing written, nothing created
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, RobustExplainWarning))
    assert "not followed" in said


@pytest.mark.parametrize("suffix", SIDE_FILES)
def test_the_response_cache_never_writes_through_a_link(tmp_path: Path, outside: Path, suffix: str) -> None:
    cache = ResponseCache(tmp_path / "responses")
    before = _plant(cache.directory, outside, suffix)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(KEY) is None  # a link is no entry
        assert not cache.put(KEY, {"k": 1}, Explanation(text="hello", model="m"))
    assert _snapshot(outside) == before
    assert any("not followed" in str(w.message) for w in caught)


def test_a_planted_lock_file_is_not_opened_through(tmp_path: Path, outside: Path) -> None:
    cache = ResponseCache(tmp_path / "responses")
    lock = cache.directory / "locks" / f"{KEY[:16]}.lock"
    lock.parent.mkdir(parents=True)
    lock.symlink_to(outside / "new-file")
    with cache.key_lock(KEY):  # no lock possible: the run goes on (duplicates across workers, nothing worse)
        pass
    assert not (outside / "new-file").exists()
    (lock.parent / "x").mkdir()
    lock.unlink()
    lock.parent.rename(tmp_path / "moved")
    (cache.directory / "locks").symlink_to(outside, target_is_directory=True)
    with cache.key_lock(KEY):
        pass
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
