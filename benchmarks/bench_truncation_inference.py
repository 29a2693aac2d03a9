"""How often the prompt sizer infers a context the server never stated (``explainers/context.py``): falsely,
on servers that truncate nothing, and how soon, on servers that truncate at a context they do not state.

The rule: four replies whose counts lie within 2 % of the largest count so far, their prompts' lengths
spread by half again or more, and three quarters of the prompts at least as long as the shortest of them
there too, show a ceiling. Simulated replies, each run a fresh sizer fed N replies in
order (no stated context, no whole counts, so only that rule can fire):

- prompt lengths log-normal around 3,000 characters (σ 0.5: a fifth to five times the median), the
  characters a token of each prompt drawn around 3.7 (sd 0.3, or t₃-tailed with the same scale, clipped to
  2–6: ids, dates and prose mixed differently per user);
- an honest server counts every token (``exact``); or counts only what its prompt cache did not hold (Ollama
  before 0.30): with probability 0.5 a reply counts a uniform 2–100 % of its tokens (``cache``), or every
  reply after the first does (``cache-all``);
- a truncating server reads at most C tokens (current Ollama: exactly C; ``jitter``: C less 0–1 %, as keep
  rules may leave), C set so that 10 %, 30 % or 60 % of the prompts are longer.

Prints the false-inference rate per honest server and N (runs × N replies), and for the truncating ones the
share of runs that inferred the context, how many replies that took, and how many truncated replies came
before it (those are not flagged; the later ones are).

    .venv/bin/python benchmarks/bench_truncation_inference.py [--runs 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from pytest_robustexplain.explainers.context import PromptSizer


def _prompts(rng: np.random.Generator, n: int, tail: str) -> tuple[np.ndarray, np.ndarray]:
    """(characters, true tokens) of ``n`` prompts."""
    chars = np.maximum(200, np.round(3000 * np.exp(rng.normal(0.0, 0.5, n)))).astype(int)
    noise = rng.standard_t(3, n) * 0.3 / np.sqrt(3.0) if tail == "t3" else rng.normal(0.0, 0.3, n)
    per_token = np.clip(3.7 + noise, 2.0, 6.0)
    return chars, np.maximum(1, np.round(chars / per_token)).astype(int)


def _honest(rng: np.random.Generator, tokens: np.ndarray, kind: str) -> np.ndarray:
    if kind == "exact":
        return tokens
    cached = rng.random(len(tokens)) < (0.5 if kind == "cache" else 1.0)
    cached[0] = False  # the first prompt of a run finds nothing cached
    share = rng.uniform(0.02, 1.0, len(tokens))
    return np.where(cached, np.maximum(1, np.round(tokens * share)), tokens).astype(int)


def _truncating(rng: np.random.Generator, tokens: np.ndarray, ceiling: int, jitter: bool) -> np.ndarray:
    read = np.full(len(tokens), ceiling)
    if jitter:
        read = np.round(ceiling * (1 - rng.uniform(0.0, 0.01, len(tokens)))).astype(int)
    return np.where(tokens > ceiling, read, tokens)


def _first_inference(chars: np.ndarray, counts: np.ndarray) -> int | None:
    """The reply (1-based) at which a fresh sizer inferred a context, or None."""
    sizer = PromptSizer()
    for k, (c, n) in enumerate(zip(chars.tolist(), counts.tolist(), strict=True), start=1):
        sizer.truncated("x" * c, n, None)
        if sizer.inferred is not None:
            return k
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"honest servers: runs that inferred a context (false), of {args.runs} a cell")
    print(f"{'server':<12}{'tail':<7}" + "".join(f"{f'N={n}':>16}" for n in (50, 200, 1000)))
    for kind in ("exact", "cache", "cache-all"):
        for tail in ("normal", "t3"):
            rates = []
            for n in (50, 200, 1000):
                runs = args.runs if n < 1000 else max(1, args.runs // 4)
                false = sum(_first_inference(c, _honest(rng, t, kind)) is not None
                            for c, t in (_prompts(rng, n, tail) for _ in range(runs)))
                rates.append(f"{false / runs:.2%} ({runs})")
            print(f"{kind:<12}{tail:<7}" + "".join(f"{r:>16}" for r in rates))
    print()
    print("truncating servers, 200 replies a run: inferred, replies until then (median, 95th), truncated "
          "replies before it (median, 95th)")
    for over in (0.1, 0.3, 0.6):
        for jitter in (False, True):
            found, until, before = 0, [], []
            for _ in range(args.runs):
                chars, tokens = _prompts(rng, 200, "normal")
                ceiling = int(np.quantile(tokens, 1 - over))
                counts = _truncating(rng, tokens, ceiling, jitter)
                k = _first_inference(chars, counts)
                if k is not None:
                    found += 1
                    until.append(k)
                    before.append(int(np.sum(tokens[:k] > ceiling)))
            print(f"  {over:.0%} of prompts over the context, {'jitter' if jitter else 'exact C '}: "
                  f"{found / args.runs:.1%} inferred; after {_median(until)} replies (95th "
                  f"{_p95(until)}); {_median(before)} truncated before (95th {_p95(before)})")


def _median(values: list[int]) -> str:
    return f"{statistics.median(values):g}" if values else "-"


def _p95(values: list[int]) -> str:
    return f"{int(np.quantile(values, 0.95))}" if values else "-"


if __name__ == "__main__":
    main()
