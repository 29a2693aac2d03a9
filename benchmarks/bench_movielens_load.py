"""Loading MovieLens at 100 k, 1 M and 10 M ratings: wall time and peak memory of ``load_movielens`` with
its defaults (users with at least 10 ratings, each history their 50 most recent).

The ratings are generated in the ml-latest format (``userId,movieId,rating,timestamp``, users in file
order, about 150 ratings a user, movies drawn from ``../shared/data/movielens-small/movies.csv`` when it is
beside the checkout, else from a generated catalog of 10,000 movies), so only the size changes between
rows. Each size loads in a fresh interpreter that reports its own peak RSS. Memory should follow what is
kept (the histories, 50 interactions a user) and the ratings' compact arrays (24 bytes a rating), not the
file: the table gives the memory per rating above the smallest size's, and the file's size beside it.

    .venv/bin/python benchmarks/bench_movielens_load.py [--ratings 100000,1000000,10000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SHARED_MOVIES = Path(__file__).resolve().parents[2] / "shared" / "data" / "movielens-small" / "movies.csv"
PER_USER = 150

CHILD = """
import json, resource, sys
from pytest_robustexplain.data.movielens import load_movielens
data = load_movielens(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"users": len(data.histories), "rss_kb": peak}))
"""


def movies_csv(out: Path) -> list[str]:
    """movies.csv in ``out``; the movie ids."""
    if SHARED_MOVIES.is_file():
        text = SHARED_MOVIES.read_text(encoding="utf-8")
    else:
        text = "movieId,title,genres\n" + "".join(f"{i},Movie {i} (2000),Drama|Comedy\n"
                                                  for i in range(1, 10_001))
    (out / "movies.csv").write_text(text, encoding="utf-8")
    return [line.split(",", 1)[0] for line in text.splitlines()[1:]]


def ratings_csv(out: Path, count: int, movie_ids: list[str]) -> int:
    """ratings.csv of ``count`` ratings in ``out`` (seeded); its size in bytes."""
    rng = np.random.default_rng(count)
    users = np.sort(rng.integers(1, max(2, count // PER_USER) + 1, size=count))
    movies = rng.integers(0, len(movie_ids), size=count)
    stars = rng.integers(1, 11, size=count) / 2
    times = rng.integers(946_684_800, 1_700_000_000, size=count)
    path = out / "ratings.csv"
    with path.open("w", encoding="utf-8") as f:
        f.write("userId,movieId,rating,timestamp\n")
        step = 200_000
        for start in range(0, count, step):
            stop = min(count, start + step)
            f.write("".join(f"{u},{movie_ids[m]},{s:.1f},{t}\n" for u, m, s, t in zip(
                users[start:stop].tolist(), movies[start:stop].tolist(), stars[start:stop].tolist(),
                times[start:stop].tolist(), strict=True)))
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ratings", default="100000,1000000,10000000", help="sizes, comma-separated")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(n) for n in args.ratings.split(",")):
            out = Path(tmp) / str(count)
            out.mkdir()
            size = ratings_csv(out, count, movies_csv(out))
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True, text=True,
                                  check=False)
            wall = time.perf_counter() - started
            if proc.returncode:
                raise SystemExit(f"loading {count:,} ratings failed:\n{proc.stderr}")
            found = json.loads(proc.stdout.strip().splitlines()[-1])
            rss = found["rss_kb"] / 1024
            rows.append((count, size, wall, rss))
            print(f"{count:>11,} ratings ({size / 2**20:6.1f} MB file, {found['users']:,} users): "
                  f"{wall:6.1f} s, peak {rss:6.0f} MB", flush=True)
    first_count, _, _, first_rss = rows[0]
    print("\nabove the smallest size, per rating:")
    for count, size, wall, rss in rows[1:]:
        more = count - first_count
        print(f"  {count:>11,}: {(rss - first_rss) * 2**20 / more:5.0f} bytes of memory a rating "
              f"(the file: {size / count:.0f} bytes a rating), {wall / count * 1e6:.1f} µs a rating")


if __name__ == "__main__":
    main()
