"""Planning at scale: a dry run (``robustexplain run --users all --dry-run``) of the paper's 5 kinds × 5
severities on generated datasets up to 6,000 users × 10,000 items, and how its time and memory grow.

A dry run prices every pair without a model call: it perturbs each history (a perturbation that leaves the
history unchanged is skipped, and a warm response cache is looked up with the perturbed prompt), chooses
each cross-user control's donor, and prints the plan. Each size runs in a fresh interpreter that reports its
own peak RSS (``ru_maxrss``); the wall time includes loading the dataset. Prints, per size, the wall time,
the peak RSS, the time and memory per planned pair (the memory above a 100-user run's, so a flat column
means linear growth), and at the largest size the ratios to issue 41's targets: ≤ 30 s and ≤ 1 GB.

    .venv/bin/python benchmarks/bench_planning.py [--sizes 100x500,1500x2500,6000x10000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_robustexplain.data import generate_synthetic, save_dataset

TARGET_S = 30.0
TARGET_MB = 1024.0
PAIRS_PER_USER = 25  # 5 kinds × 5 severities, one repeat

# Run in the child: the dry run as the command line runs it, then its own peak memory.
CHILD = """
import json, resource, sys
from pytest_robustexplain.cli.entry import main
code = main(["run", "--model", "fake-model", "--dataset", sys.argv[1], "--users", "all", "--dry-run",
             "--cache-dir", sys.argv[2], "--progress", "off"])
print(json.dumps({"code": code, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def measure(root: Path, users: int, items: int) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB and the plan's first line, for one size."""
    data = root / f"data-{users}x{items}"
    if not data.exists():
        save_dataset(generate_synthetic(n_users=users, n_cases=users, n_items=items), data)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(data), str(root / "cache")], capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - started
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        raise SystemExit(f"the dry run of {users} users failed:\n{proc.stdout}\n{proc.stderr}")
    found = json.loads(lines[-1])
    plan = next((line for line in lines if line.startswith("dry run")), "")
    return wall, found["rss_kb"] / 1024, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100x500,1500x2500,6000x10000",
                        help="USERSxITEMS,... (the last is held to the targets)")
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in size.split("x")) for size in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for users, items in sizes:
            wall, rss, plan = measure(root, users, items)
            rows.append((users, items, wall, rss))
            print(f"{users:>6,} users × {items:>6,} items: {wall:6.1f} s, peak {rss:6.0f} MB — {plan[:90]}",
                  flush=True)
    first_users, first_rss = rows[0][0], rows[0][3]
    print("\nper planned pair (memory above the smallest size's):")
    for users, _, wall, rss in rows:
        pairs, more = users * PAIRS_PER_USER, (users - first_users) * PAIRS_PER_USER
        extra = (rss - first_rss) * 1024 / more if more > 0 else 0.0
        print(f"  {users:>6,} users: {wall / pairs * 1e3:.2f} ms a pair, {extra:5.2f} KB a pair")
    users, items, wall, rss = rows[-1]
    ok = wall <= TARGET_S and rss <= TARGET_MB
    print(f"\n{users:,} × {items:,}: time ×{wall / TARGET_S:.2f} of {TARGET_S:.0f} s, memory "
          f"×{rss / TARGET_MB:.2f} of {TARGET_MB:.0f} MB — {'OK' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
