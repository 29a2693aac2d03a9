"""Throughput of the metrics: pairs scored per second on one core, against a 1,000 pairs/s target.

Workload as in a run: 20 original explanations of ~80 words, each compared with 25 perturbed
explanations that are edited variants of it (words swapped, a sentence dropped, added or moved), with
a fresh :class:`~pytest_robustexplain.metrics.Scorer` cache each round so every one of the 520
distinct texts is tokenised and tagged inside the timed region. One-off costs (imports, building the
Scorer, loading the tagger's lexicon) are reported separately.

    python benchmarks/bench_metrics.py [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import time

TARGET_PAIRS_PER_S = 1000.0
N_ORIGINALS = 20
N_PERTURBED = 25

_TITLES = ["Inception", "The Matrix", "Interstellar", "Blade Runner", "Toy Story", "Heat", "Alien",
           "Amélie", "Casablanca", "Fargo", "Arrival", "Up", "Jaws", "Memento", "Her", "Gravity"]
_GENRES = ["science fiction", "thriller", "animated", "crime", "romantic", "drama", "horror",
           "documentary", "adventure", "mystery", "comedy", "fantasy"]
_TRAITS = ["clever plotting", "strong characters", "a haunting score", "striking visuals",
           "sharp dialogue", "emotional depth", "a slow-burning tension", "dark humour", "big ideas"]
_SENTENCES = [
    "Based on your history, you clearly enjoy {genre} films with {trait} and {trait2}.",
    "You rated {title} and {title2} highly, which suggests a taste for {trait}.",
    "{item} shares the {genre} roots of {title}, and it pairs that with {trait2}.",
    "Like {title2}, it rewards attention with {trait}, so it should suit your viewing habits well.",
    "Its {genre} premise and {trait2} echo the movies you have returned to most often recently.",
    "Viewers who loved {title} often find {item} just as gripping, thanks to its {trait}.",
    "Because you also gave {title2} five stars, the {trait} in {item} is likely to appeal to you.",
]


def _fill(template: str, rng: random.Random, item: str) -> str:
    title, title2 = rng.sample(_TITLES, 2)
    trait, trait2 = rng.sample(_TRAITS, 2)
    return template.format(genre=rng.choice(_GENRES), title=title, title2=title2, trait=trait,
                           trait2=trait2, item=item)


def make_original(rng: random.Random) -> list[str]:
    """An ~80-word explanation, as a list of sentences."""
    item = rng.choice(_TITLES)
    return [_fill(t, rng, item) for t in rng.sample(_SENTENCES, 5)]


def perturb(sentences: list[str], rng: random.Random) -> str:
    """An edited variant: the kind of drift a perturbed history causes in the explanation."""
    edited = list(sentences)
    for _ in range(rng.randint(1, 3)):
        action = rng.choice(("swap_words", "drop", "add", "move", "reword"))
        if action == "drop" and len(edited) > 3:
            edited.pop(rng.randrange(len(edited)))
        elif action == "add":
            edited.insert(rng.randrange(len(edited) + 1), _fill(rng.choice(_SENTENCES), rng, "it"))
        elif action == "move":
            edited.insert(rng.randrange(len(edited)), edited.pop(rng.randrange(len(edited))))
        elif action == "reword":
            i = rng.randrange(len(edited))
            edited[i] = _fill(rng.choice(_SENTENCES), rng, "this film")
        else:
            i = rng.randrange(len(edited))
            words = edited[i].split()
            for _ in range(rng.randint(1, 4)):
                words[rng.randrange(len(words))] = rng.choice(_GENRES + _TRAITS).split()[0]
            edited[i] = " ".join(words)
    return " ".join(edited)


def make_workload(seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    for _ in range(N_ORIGINALS):
        sentences = make_original(rng)
        original = " ".join(sentences)
        pairs.extend((original, perturb(sentences, rng)) for _ in range(N_PERTURBED))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the top functions of one round")
    args = parser.parse_args()

    t0 = time.perf_counter()
    from pytest_robustexplain.metrics import Scorer, word_tokens

    t1 = time.perf_counter()
    scorer = Scorer()
    scorer.score("Warm-up text for the tagger lexicon.", "Another warm-up sentence.")
    t2 = time.perf_counter()
    print(f"import metrics: {t1 - t0:.3f} s; build Scorer + first pair (imports TextBlob's tagger module, "
          f"regex, sacrebleu; loads the lexicon): {t2 - t1:.3f} s")

    pairs = make_workload()
    words = [len(word_tokens(e)) for pair in pairs for e in pair]
    print(f"workload: {len(pairs)} pairs ({N_ORIGINALS} originals x {N_PERTURBED} perturbed), "
          f"{len(set(e for pair in pairs for e in pair))} distinct texts, "
          f"{statistics.mean(words):.0f} words per text on average")

    wall_rates, cpu_rates = [], []
    for _ in range(args.rounds):
        scorer.clear_cache()
        wall, cpu = time.perf_counter(), time.process_time()
        for e, e_prime in pairs:
            scorer.score(e, e_prime)
        cpu_rates.append(len(pairs) / (time.process_time() - cpu))
        wall_rates.append(len(pairs) / (time.perf_counter() - wall))
    # CPU time is what one core delivers; wall-clock also counts time lost to other processes.
    cpu_median, wall_median = statistics.median(cpu_rates), statistics.median(wall_rates)
    print(f"pairs/s (cold cache each round, median of {args.rounds} rounds): {cpu_median:,.0f} per CPU "
          f"second, {wall_median:,.0f} per wall-clock second (best {max(wall_rates):,.0f})")
    print(f"ratio to the {TARGET_PAIRS_PER_S:,.0f} pairs/s target: {cpu_median / TARGET_PAIRS_PER_S:.2f}x "
          f"(CPU), {wall_median / TARGET_PAIRS_PER_S:.2f}x (wall-clock)")

    if args.profile:
        scorer.clear_cache()
        profiler = cProfile.Profile()
        profiler.enable()
        for e, e_prime in pairs:
            scorer.score(e, e_prime)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
