"""The MovieLens loader (``ratings.csv`` and ``movies.csv``, ml-latest format)."""

from __future__ import annotations

import csv
import math
import operator
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError, DataError
from .datasets import check_count
from .io import EPOCH_RANGE, MAX_RATING, PathLike, Where, as_id, as_rating, as_timestamp, read_text
from .records import Catalog, Dataset, EvalCase, Item, UserHistory
from .seeded import DEFAULT_SEED, STREAM_CASES, STREAM_SAMPLE, Rand

_NO_GENRES = "(no genres listed)"
_YEAR = re.compile(r"\((\d{4})\)\s*$")


def load_movielens(directory: PathLike, *, max_users: int | None = None, min_ratings: int = 10,
                   max_history: int | None = 50, n_cases: int | None = None,
                   seed: int = DEFAULT_SEED) -> Dataset:
    """A dataset from a MovieLens directory (``ratings.csv`` and ``movies.csv``, ml-latest format).

    Items are the movies: the category is the first listed genre, ``features["genres"]`` the full list and
    ``features["year"]`` the year in the title when there is one. Users with fewer than ``min_ratings``
    ratings are dropped; ``max_users`` keeps a seeded sample of the rest (file order kept); each history is
    the user's ``max_history`` most recent ratings, oldest first. Each kept user (or a seeded sample of
    ``n_cases`` of them) gets one case: a movie they have never rated that has their most frequent genre,
    drawn with probability proportional to its number of ratings (a recommender suggests known films, and
    the model can say something about them).
    """
    check_count(max_users, "max_users")
    check_count(min_ratings, "min_ratings")
    check_count(max_history, "max_history")
    check_count(n_cases, "n_cases")
    root = Path(directory)
    catalog = _movielens_movies(root / "movies.csv")
    ratings = _movielens_ratings(root / "ratings.csv", catalog)
    eligible = [uid for uid, rows in ratings.items() if len(rows) >= min_ratings]
    if not eligible:
        raise DataError(f"no user has at least min_ratings={min_ratings} ratings",
                        source=str(root / "ratings.csv"))
    if max_users is not None and max_users < len(eligible):
        keep = set(Rand(seed, STREAM_SAMPLE).sample(eligible, max_users))
        eligible = [uid for uid in eligible if uid in keep]
    histories = {uid: ratings[uid].history(uid, catalog.items_list, max_history) for uid in eligible}
    case_users = eligible
    if n_cases is not None:
        if n_cases > len(eligible):
            raise ConfigError(f"n_cases={n_cases} but only {len(eligible)} MovieLens users are kept")
        keep = set(Rand(seed, STREAM_SAMPLE + 1).sample(eligible, n_cases))
        case_users = [uid for uid in eligible if uid in keep]
    cases = _movielens_cases(case_users, histories, ratings, catalog, seed)
    return Dataset(catalog=catalog, histories=MappingProxyType(histories), cases=cases,
                   name=f"movielens:{root.resolve().name}")


def _movielens_movies(path: Path) -> Catalog:
    items = []
    seen: set[str] = set()
    for lineno, (movie_id, title, genre_list) in _csv_rows(path, ("movieId", "title", "genres")):
        where = Where(str(path), f"line {lineno}")
        movie_id = as_id(movie_id, where, "movieId")
        if movie_id in seen:
            raise where.error("duplicate movieId", "movieId")
        seen.add(movie_id)
        genres = [g for g in genre_list.split("|") if g and g != _NO_GENRES]
        features: dict[str, Any] = {"genres": genres}
        match = _YEAR.search(title)
        if match:
            features["year"] = int(match.group(1))
        items.append(Item(movie_id, title=title.strip() or None, category=genres[0] if genres else None,
                          features=features))
    if not items:
        raise DataError("no movies", source=str(path))
    return Catalog(items)


class _Ratings:
    """One user's ratings as the file gives them, compact: the movie's place in the catalog, the rating (NaN:
    none) and the timestamp (``_NO_TIME``: none) in three arrays, 24 bytes a rating. An interaction of each
    rating, as read before, was about 400 bytes: 1 million ratings took 594 MB for a 25 MB file, although a
    history keeps only the user's ``max_history`` most recent (:meth:`history`)."""

    __slots__ = ("movies", "ratings", "times")

    def __init__(self) -> None:
        self.movies, self.ratings, self.times = array("q"), array("d"), array("q")

    def add(self, movie: int, rating: float | None, timestamp: int | None) -> None:
        self.movies.append(movie)
        self.ratings.append(math.nan if rating is None else rating)
        self.times.append(_NO_TIME if timestamp is None else timestamp)

    def __len__(self) -> int:
        return len(self.movies)

    def history(self, user_id: str, movies: Sequence[Item], max_history: int | None) -> UserHistory:
        """The user's history: oldest first when every rating has a timestamp (a stable sort, as
        :func:`~.io.in_time_order`), else in file order; the ``max_history`` most recent kept — the only
        ratings made into interactions."""
        order: Sequence[int] = range(len(self))
        if _NO_TIME not in self.times:
            order = sorted(order, key=self.times.__getitem__)
        if max_history is not None:
            order = order[-max_history:]  # the most recent ones: what a recommender would condition on
        return UserHistory(user_id, tuple(movies[self.movies[i]].as_interaction(
            timestamp=None if self.times[i] == _NO_TIME else self.times[i],
            rating=None if math.isnan(self.ratings[i]) else self.ratings[i]) for i in order))


_NO_TIME = -(2**63)  # far outside EPOCH_RANGE: no timestamp


def _movielens_ratings(path: Path, catalog: Catalog) -> dict[str, _Ratings]:
    by_user: dict[str, _Ratings] = {}
    ids: dict[str, str] = {}  # each userId cell as read -> the id it names, checked once (as_id)
    low, high = EPOCH_RANGE
    for lineno, cells in _csv_rows(path, ("userId", "movieId", "rating", "timestamp")):
        user_id, movie_id, rating, timestamp = cells
        try:
            # The fast path: 100k rows of plain numbers. Anything unusual takes the validating path.
            value, seconds = float(rating), int(timestamp)
            movie = catalog.position(movie_id)
            if not math.isfinite(value) or abs(value) > MAX_RATING or not low <= seconds <= high:
                raise ValueError(rating)
            found: tuple[int, float | None, int | None] = (movie, value, seconds)
            user = ids.get(user_id)
            if user is None:  # the same rules as every other loader's ids: " 1" is "1", no control characters
                user = ids[user_id] = as_id(user_id, Where(str(path), f"line {lineno}"), "userId")
        except (KeyError, ValueError):
            user, found = _movielens_rating_slow(cells, catalog, Where(str(path), f"line {lineno}"))
        rows = by_user.get(user)
        if rows is None:
            rows = by_user[user] = _Ratings()
        rows.add(*found)
    if not by_user:
        raise DataError("no ratings", source=str(path))
    return by_user


def _movielens_rating_slow(cells: tuple[str, ...], catalog: Catalog,
                           where: Where) -> tuple[str, tuple[int, float | None, int | None]]:
    user_id = as_id(cells[0], where, "userId")
    movie_id = as_id(cells[1], where, "movieId")
    if movie_id not in catalog:
        raise where.error(f"movie {movie_id!r} is not in movies.csv", "movieId")
    rating = as_rating(cells[2] or None, where)
    timestamp = as_timestamp(cells[3] or None, where)
    return user_id, (catalog.position(movie_id), rating, timestamp)


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` (read_text's: every line break is ``\n``), each with its break, one at a time:
    a ``StringIO`` of a 25 MB file held 100 MB (four bytes a character) beside the text."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """(line number, cells of the ``required`` columns) of a fixed-format CSV file; other columns ignored."""
    where = Where(str(path))
    reader = csv.reader(_lines(read_text(path)))
    try:
        header = [h.strip() for h in next(reader, [])]
        missing = [name for name in required if name not in header]
        if missing:
            raise where.at("line 1").error(
                f"missing column(s) {', '.join(missing)} (header: {', '.join(header)})", missing[0])
        pick = operator.itemgetter(*(header.index(name) for name in required))
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise where.at(f"line {reader.line_num}").error(
                    f"{len(row)} cells but the header has {len(header)} columns")
            yield reader.line_num, pick(row)
    except csv.Error as exc:
        raise where.at(f"line {reader.line_num}").error(f"invalid CSV: {exc}") from None


def _movielens_cases(users: list[str], histories: Mapping[str, UserHistory],
                     ratings: Mapping[str, _Ratings], catalog: Catalog,
                     seed: int) -> tuple[EvalCase, ...]:
    import numpy as np  # lazy: loads numpy

    movies = catalog.items_list
    popularity = np.ones(len(movies), dtype=np.int64)  # +1: a never-rated movie stays possible, if unlikely
    for rows in ratings.values():
        popularity += np.bincount(np.frombuffer(rows.movies, dtype=np.int64), minlength=len(movies))
    by_genre: dict[str, list[int]] = {}
    for i, item in enumerate(movies):
        for genre in item.features["genres"]:
            by_genre.setdefault(genre, []).append(i)
    pools = {genre: np.array(members, dtype=np.int64) for genre, members in by_genre.items()}
    everything = np.arange(len(movies), dtype=np.int64)
    rand = Rand(seed, STREAM_CASES)
    cases = []
    for user_id in users:
        rated = np.unique(np.frombuffer(ratings[user_id].movies, dtype=np.int64))
        # The user's genres from most to least frequent, then the whole catalog as a last resort.
        ranked = [pools[g] for g in _genre_ranking(histories[user_id])] + [everything]
        chosen = _popular_unrated(ranked, rated, popularity, rand)
        if chosen is None:
            raise DataError(f"user {user_id!r} has rated every movie; no case can be drawn")
        cases.append(EvalCase(histories[user_id], movies[chosen]))
    return tuple(cases)


def _genre_ranking(history: UserHistory) -> list[str]:
    counts: dict[str, int] = {}
    for interaction in history:
        for genre in interaction.features.get("genres", ()):
            counts[genre] = counts.get(genre, 0) + 1
    return [g for g, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _popular_unrated(pools: Iterable[Any], rated: Any, popularity: Any, rand: Rand) -> int | None:
    """Index of a movie from the first pool with unrated movies, drawn in proportion to its popularity."""
    import numpy as np  # lazy: loads numpy

    for pool in pools:
        candidates = pool[~np.isin(pool, rated, assume_unique=True)]
        if candidates.size:
            # Integer running sums are exact, so the draw is the same on every platform.
            cumulative = np.cumsum(popularity[candidates])
            target = rand.random() * float(cumulative[-1])
            return int(candidates[int(np.searchsorted(cumulative, target, side="right"))])
    return None
