"""How often the guard's rules err, at every number of users from 3 to 100.

Every number about the guard's error rates in docs/guard.md comes from this script. It draws simulated
runs user by user from distributions shaped like measured scores (clipped to [0, 1], right-skewed,
heavy-tailed; see ``population`` and ``relative_population``) and applies the guard's own rules
(``simulation.simulate`` and ``simulation.simulate_relative``, which the tests check against
``guard.evaluate``)
with the default settings: min_sensitivity 0.05, max_insensitive_share 0.2, max_identical_share 0.05,
min_relative 0.5, alpha 0.05, combined threshold 0.5.

1. INSENSITIVE. A user "ignores the history" when their S is below min_sensitivity (share ``q`` of the
   population); half of such users, or a set share, get a word-for-word identical text (S = 0; share
   ``i``). A false INSENSITIVE is one in a population where both nulls hold: q ≤ 0.2 and i ≤ 0.05. The
   rate must stay ≤ alpha at every G; the table also shows power where either is violated.
2. Burden of proof. The share of runs the guard leaves INCONCLUSIVE ("no evidence that the explanations
   depend on the user") on populations that do read the history (the price of never passing without
   evidence), and the false PASS rate where the mean S is at or below min_sensitivity.
3. Relative robustness. Per user S (how far another user's interactions move the explanation) and
   Δ = r·S with a heavy-tailed per-user r, clipped so that ρ stays in [0, 1]; the true R is the population
   ratio E[Δ]/E[S] (by Monte Carlo). And case by case (``moving_population``): a perturbation whose move
   does not grow with S, niche users whose control lies far away, 1–25 cases a user, replies lost from both
   sides — the populations whose terms skew right (issue 63). A false relative FAIL is a FAIL where the true
   R ≥ 0.5; the rule at alpha beside the gate's, at ``FIELLER_SHARE`` of it. Table 1 ends with the
   INSENSITIVE rules computed exactly at both limits (``at_both_limits``), where their union is largest.
4. Which second INSENSITIVE rule (issue 23, item 3): the shipped rule on identical texts, or the share
   rule applied per tercile of history length. Users are ranked by history length; an explainer that
   ignores long histories ignores the top third or half of the ranks. Each sits beside the overall share
   rule with alpha split between the rules (Bonferroni), so that their union holds alpha even with both
   nulls at their limits; the first column shows the rules at alpha each, as the guard had them before.

    .venv/bin/python benchmarks/bench_guard.py [--runs 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from simulation import simulate, simulate_relative

from pytest_robustexplain.checks.controls import FIELLER_SHARE, GuardSettings
from pytest_robustexplain.results import INCONCLUSIVE, INSENSITIVE, PASS

Rng = np.random.Generator
Draw = Callable[[Rng, tuple[int, int]], tuple[np.ndarray, np.ndarray]]
SETTINGS = GuardSettings()
THRESHOLD = 0.5
SIZES = (3, 5, 8, 10, 20, 50, 100)


def _sensitive_s(rng: Rng, shape: tuple[int, int], median: float, spread: float = 0.45) -> np.ndarray:
    """S of users who read the history: log-normal (right-skewed) with Student-t(3) log-noise (heavy
    tails both ways), clipped to [0, 1]. Median 0.18–0.38 matches the fake stable model and the template
    explainer (measured 0.13–0.43 per user against the content-only control)."""
    log_s = np.log(median) + spread * rng.standard_t(3, size=shape)
    return np.clip(np.exp(log_s), 0.0, 1.0)


def _ignoring_s(rng: Rng, shape: tuple[int, int], identical: float) -> np.ndarray:
    """S of users whose explanation ignores the history: identical texts (S = 0, as the constant
    explainers and SmolLM2's long prompts gave) with probability ``identical``, else a few words apart
    (|t3| · 0.01)."""
    words = np.clip(np.abs(rng.standard_t(3, size=shape)) * 0.01, 1e-4, 1.0)
    return np.where(rng.random(shape) < identical, 0.0, words)


def _perturbed(rng: Rng, shape: tuple[int, int], ignoring: np.ndarray) -> np.ndarray:
    """ρ_pert: Beta(6, 2) (mean 0.75, left-skewed) for readers, near 1 for users whose text is ignored."""
    readers = rng.beta(6.0, 2.0, size=shape)
    blind = 1.0 - np.abs(rng.standard_t(3, size=shape)) * 0.01
    return np.clip(np.where(ignoring, blind, readers), 0.0, 1.0)


def population(q: float, median: float = 0.25, identical: float = 0.5, spread: float = 0.45) -> Draw:
    """A share ``q`` of users ignore the history (of them a share ``identical`` word for word); the
    others read it with median S ``median``."""
    def draw(rng: Rng, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        ignoring = rng.random(shape) < q
        s = np.where(ignoring, _ignoring_s(rng, shape, identical), _sensitive_s(rng, shape, median, spread))
        return s, _perturbed(rng, shape, ignoring)
    return draw


def truth(draw: Draw, rng: Rng) -> tuple[float, float, float]:
    """(share with S < min_sensitivity, share identical, mean S) of the population."""
    s, _ = draw(rng, (1, 400_000))
    return (float((s < SETTINGS.min_sensitivity).mean()), float((s == 0).mean()), float(s.mean()))


SCENARIOS: list[tuple[str, Draw]] = [
    ("every user reads (template-like, median S 0.35)", population(0.0, 0.35)),
    ("every user reads (fake stable model, median S 0.18)", population(0.0, 0.18)),
    ("weak readers only (median S 0.10, heavy low tail)", population(0.0, 0.10)),
    ("bunched just above 0.05 (median 0.07, tight)", population(0.0, 0.07, spread=0.12)),
    ("bunched at 0.07 + 15 % ignored, none identical", population(0.15, 0.07, 0.0, 0.12)),
    ("bunched at 0.07 + 20 % ignored, none identical", population(0.185, 0.07, 0.0, 0.12)),
    ("10 % ignored, half identical (i = 0.05)", population(0.10)),
    ("at the share limit: 20 % ignored, none identical", population(0.185, identical=0.0)),
    ("both limits: 20 % ignored, i = 0.05", population(0.185, identical=0.27)),
    ("20 % ignored, half identical (i = 0.10)", population(0.185)),
    ("35 % ignored, none identical", population(0.35, identical=0.0)),
    ("50 % ignored, half identical", population(0.50)),
    ("every user ignored (constant or item-only)", population(1.0)),
]


def outcome_rates(draw: Draw, outcome: str, runs: int, rng: Rng) -> list[float]:
    """The share of ``runs`` simulated runs the guard decides as ``outcome``, at each of SIZES users."""
    rates = []
    for n in SIZES:
        s, p = draw(rng, (runs, n))
        decided = simulate(s, p, combined_threshold=THRESHOLD, settings=SETTINGS)
        rates.append(float(np.mean([o == outcome for o in decided])))
    return rates


def insensitive_table(runs: int, rng: Rng) -> None:
    print(f"1. P(INSENSITIVE) over {runs} simulated runs per cell (q: share with S < 0.05, i: identical)")
    print(f"{'population':<52}{'q':>6}{'i':>6}" + "".join(f"{f'G={n}':>8}" for n in SIZES))
    worst = 0.0
    for label, draw in SCENARIOS:
        q, i, _ = truth(draw, rng)
        rates = outcome_rates(draw, INSENSITIVE, runs, rng)
        if q <= SETTINGS.max_insensitive_share and i <= SETTINGS.max_identical_share:
            worst = max(worst, *rates)
        print(f"{label:<52}{q:>6.3f}{i:>6.3f}" + "".join(f"{100 * r:>7.1f}%" for r in rates), flush=True)
    corner = []
    for label, inside in (("identical users among the ignored", True), ("apart from them", False)):
        rate, users = max((at_both_limits(n, inside), n) for n in range(3, 101))
        corner.append(f"{label} {100 * rate:.1f} % (G = {users})")
        worst = max(worst, rate)
    print(f"exact at both limits (q = 0.2, i = 0.05), largest over G = 3–100: {'; '.join(corner)}")
    verdict = "OK" if worst <= SETTINGS.alpha else "MISSED"
    print(f"largest false INSENSITIVE rate (q ≤ 0.2 and i ≤ 0.05), G = 3–100: {100 * worst:.1f} % — target "
          f"≤ {100 * SETTINGS.alpha:g} % {verdict}\n")


def at_both_limits(n: int, inside: bool) -> float:
    """P(INSENSITIVE) with exactly the share limit of users ignored and the identical limit identical, by
    enumeration (no simulation): the two exact rules at alpha / 2 each. ``inside``: the identical users are
    among the ignored (an identical text ignores the history); else a separate share, the worst case."""
    from scipy import stats as sps

    alpha = SETTINGS.alpha / 2
    q, i = SETTINGS.max_insensitive_share, SETTINGS.max_identical_share
    same = np.arange(n + 1)[:, None]
    flagged = np.arange(n + 1)[None, :]  # ignored users (the identical ones among them when ``inside``)
    rest = n - same - flagged if not inside else n - flagged
    shares = [i, q, 1 - q - i] if not inside else [i, q - i, 1 - q]
    counts = np.stack(np.broadcast_arrays(same, flagged - same if inside else flagged, rest), axis=-1)
    possible = (counts >= 0).all(axis=-1)
    chance = np.where(possible, sps.multinomial.pmf(np.maximum(counts, 0), n, shares), 0.0)
    rule = (_share_low(flagged, n, alpha) > q) | (_share_low(same, n, alpha) > i)
    return float((chance * rule).sum())


def evidence_table(runs: int, rng: Rng) -> None:
    print("2. burden of proof: P(INCONCLUSIVE: no evidence of dependence) on readers; P(PASS) where the "
          "mean S ≤ 0.05")
    print(f"{'population':<52}{'mean S':>7}" + "".join(f"{f'G={n}':>8}" for n in SIZES))
    worst = 0.0
    cells = [("every user reads (template-like)", population(0.0, 0.35), INCONCLUSIVE),
             ("every user reads (fake stable model)", population(0.0, 0.18), INCONCLUSIVE),
             ("weak readers only (median S 0.10)", population(0.0, 0.10), INCONCLUSIVE),
             ("readers (S 0.3) + 15 % ignored", population(0.15, 0.3, 0.0), INCONCLUSIVE),
             ("mean S at 0.05 (median 0.037, wide)", population(0.0, 0.037, spread=0.6), PASS),
             ("mean S at 0.05, a few words apart", population(0.0, 0.045, spread=0.12), PASS),
             ("half ignored, half weak readers", population(0.5, 0.08, 0.0), PASS),
             # issue 44's cells: a share ignored, the readers bunched so that the mean S is exactly 0.05
             ("15 % ignored, readers bunched, mean S 0.05", at_mean(0.15, rng), PASS),
             ("25 % ignored, readers bunched, mean S 0.05", at_mean(0.25, rng), PASS),
             ("ignored share 0.28 > 0.2, readers S 0.3", population(0.28, 0.3, 0.0), PASS),
             ("ignored share 0.35 > 0.2, readers S 0.3", population(0.35, 0.3, 0.0), PASS)]
    above = 0.0
    for label, draw, outcome in cells:
        q, _, mean_s = truth(draw, rng)
        rates = outcome_rates(draw, outcome, runs, rng)
        if outcome == PASS and mean_s <= SETTINGS.min_sensitivity + 1e-3:
            worst = max(worst, *rates)
        if outcome == PASS and q > SETTINGS.max_insensitive_share:
            above = max(above, *rates[SIZES.index(20):])
        print(f"{label + f' → {outcome}':<52}{mean_s:>7.3f}" + "".join(f"{100 * r:>7.1f}%" for r in rates),
              flush=True)
    print(f"largest false PASS where mean S ≤ 0.05, G = 3–100: {100 * worst:.1f} % — target ≤ "
          f"{100 * SETTINGS.alpha:g} % {'OK' if worst <= SETTINGS.alpha + 0.005 else 'MISSED'}")
    print(f"largest PASS where the ignored share is above its limit, G = 20–100: {100 * above:.1f} % "
          "(a point rule: see docs/guard.md)\n")


def at_mean(q: float, rng: Rng, target: float = 0.05) -> Draw:
    """A share ``q`` ignored (a few words apart) and readers bunched (spread 0.12) with the median that
    puts the population's mean S at ``target``, by bisection."""
    low, high = 0.01, 0.3
    for _ in range(30):
        mid = (low + high) / 2
        _, _, mean_s = truth(population(q, mid, 0.0, 0.12), rng)
        low, high = (mid, high) if mean_s < target else (low, mid)
    return population(q, high, 0.0, 0.12)


def relative_population(center: float, noise: float = 0.25, median: float = 0.3, niche: float = 0.0
                        ) -> Draw:
    """Per user S (log-normal, t3) and Δ = r·S, r = center + noise·t3, clipped so that ρ_pert ∈ [0, 1]; a
    share ``niche`` of users whose control is far away (S uniform in [0.6, 0.95]: no one shares their
    taste)."""
    def draw(rng: Rng, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        s = np.clip(_sensitive_s(rng, shape, median), 0.02, 1.0)
        s = np.where(rng.random(shape) < niche, rng.uniform(0.6, 0.95, shape), s)
        r = center + noise * rng.standard_t(3, size=shape)
        delta = np.clip(r * s, -(1.0 - s), s)  # ρ_pert = ρ_swap + Δ stays within [0, 1]
        return delta, s
    return draw


def moving_population(move: float, niche: float = 0.0, cases: int = 1, failed: float = 0.0) -> Draw:
    """Case by case, the perturbation's move apart from S: each user's control ρ_swap Beta(mean 0.55, sd
    0.12) — a share ``niche`` of users U(0.05, 0.35), no one sharing their taste — and ρ_pert 1 − Beta(mean
    ``move``, sd 0.08) whatever S is; each of the user's ``cases`` adds normal noise (sd 0.1) to both,
    clipped to [0, 1], and fails with probability ``failed`` (left out of both sides). The users' mean Δ and
    S (NaN: every case failed): a niche user's large S lifts R's terms, so they skew right."""
    def beta(rng: Rng, mean: float, sd: float, shape: tuple[int, ...]) -> np.ndarray:
        k = mean * (1 - mean) / sd**2 - 1
        return rng.beta(mean * k, (1 - mean) * k, shape)

    def block(rng: Rng, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        niche_user, far = rng.random(shape) < niche, rng.uniform(0.05, 0.35, shape)
        swap = np.where(niche_user, far, beta(rng, 0.55, 0.12, shape))
        kept = 1.0 - beta(rng, move, 0.08, shape)
        full = (*shape, cases)
        p = np.clip(kept[..., None] + 0.1 * rng.standard_normal(full), 0.0, 1.0)
        w = np.clip(swap[..., None] + 0.1 * rng.standard_normal(full), 0.0, 1.0)
        ok = rng.random(full) >= failed
        with np.errstate(invalid="ignore"):
            return ((p - w) * ok).sum(-1) / ok.sum(-1), ((1.0 - w) * ok).sum(-1) / ok.sum(-1)

    def draw(rng: Rng, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        parts = [block(rng, (min(1000, shape[0] - i), shape[1])) for i in range(0, shape[0], 1000)]
        return np.concatenate([d for d, _ in parts]), np.concatenate([s for _, s in parts])
    return draw


def population_r(draw: Draw, rng: Rng) -> float:
    """The population R = E[Δ]/E[S] over users, by Monte Carlo."""
    d, s = draw(rng, (1, 200_000))
    return float(np.nansum(d) / np.nansum(s))


def at_r(make: Callable[[float], Draw], target: float, rng: Rng, low: float, high: float) -> Draw:
    """Bisect ``make``'s parameter in [low, high] until the population R is ``target`` (+0.002)."""
    rising = population_r(make(high), rng) > population_r(make(low), rng)
    for _ in range(30):
        mid = (low + high) / 2
        above = population_r(make(mid), rng) >= target + 0.002
        low, high = (low, mid) if above == rising else (mid, high)
    return make(high if rising else low)


def relative_table(runs: int, rng: Rng) -> None:
    print("3. P(relative FAIL: R's one-sided upper bound < 0.5): Fieller at alpha (before) | at 0.8·alpha "
          "(shipped)")
    print(f"{'population':<56}{'true R':>7}" + "".join(f"{f'G={n}':>12}" for n in SIZES))
    worst = [0.0, 0.0]
    limit = SETTINGS.min_relative

    def scaled(noise: float, median: float = 0.3, niche: float = 0.0) -> Callable[[float], Draw]:
        return lambda center: relative_population(center, noise, median, niche)

    def moved(niche: float = 0.0, cases: int = 1, failed: float = 0.0) -> Callable[[float], Draw]:
        return lambda move: moving_population(move, niche, cases, failed)

    rows: list[tuple[str, Draw]] = [
        ("honest-like, R 0.70, spread 0.25", relative_population(0.70, 0.25)),
        ("at the limit, spread 0.25", at_r(scaled(0.25), limit, rng, 0.0, 3.0)),
        ("at the limit, spread 0.5", at_r(scaled(0.5), limit, rng, 0.0, 3.0)),
        ("at the limit, spread 1.0 (heavy)", at_r(scaled(1.0), limit, rng, 0.0, 3.0)),
        ("at the limit, spread 0.5, weak readers (S 0.1)", at_r(scaled(0.5, 0.1), limit, rng, 0.0, 3.0)),
        ("at the limit, spread 0.25, 8 % niche users", at_r(scaled(0.25, 0.3, 0.08), limit, rng, 0.0, 3.0)),
        ("at the limit, spread 0.1, 8 % niche users", at_r(scaled(0.1, 0.3, 0.08), limit, rng, 0.0, 3.0)),
        ("at the limit, spread 0.25, weak readers, 8 % niche",
         at_r(scaled(0.25, 0.1, 0.08), limit, rng, 0.0, 3.0)),
        ("at the limit, move apart from S, 1 case a user", at_r(moved(), limit, rng, 0.01, 0.6)),
        ("at the limit, move apart, 8 % niche, 1 case a user", at_r(moved(0.08), limit, rng, 0.01, 0.6)),
        ("at the limit, move apart, 8 % niche, 4 cases a user", at_r(moved(0.08, 4), limit, rng, 0.01, 0.6)),
        ("at the limit, move apart, 15 % niche, 4 cases a user",
         at_r(moved(0.15, 4), limit, rng, 0.01, 0.6)),
        ("at the limit, move apart, 15 % niche, 25 cases a user",
         at_r(moved(0.15, 25), limit, rng, 0.01, 0.6)),
        ("at the limit, move apart, 8 % niche, 4 cases, 20 % lost",
         at_r(moved(0.08, 4, 0.2), limit, rng, 0.01, 0.6)),
        ("reworded by hash, R 0.05", relative_population(0.05, 0.25)),
        ("half-way, R 0.30", relative_population(0.30, 0.25)),
        ("move apart, 15 % niche, 4 cases a user, R 0.30", at_r(moved(0.15, 4), 0.3, rng, 0.01, 0.6))]
    for label, draw in rows:
        true_r = population_r(draw, rng)
        cells = []
        for n in SIZES:
            d, s = draw(rng, (runs, n))
            rates = [float(np.mean(simulate_relative(d, s, settings=SETTINGS, share=share)))
                     for share in (1.0, FIELLER_SHARE)]
            if true_r >= SETTINGS.min_relative:
                worst = [max(w, r) for w, r in zip(worst, rates, strict=True)]
            cells.append("|".join(f"{100 * r:.1f}" for r in rates))
        print(f"{label:<56}{true_r:>7.3f}" + "".join(f"{c:>12}" for c in cells), flush=True)
    print(f"largest false relative FAIL (true R ≥ 0.5), G = 3–100: before {100 * worst[0]:.1f} %, shipped "
          f"{100 * worst[1]:.1f} % — target ≤ {100 * SETTINGS.alpha:g} % "
          f"{'OK' if worst[1] <= SETTINGS.alpha else 'MISSED'}")


def _share_low(k: np.ndarray, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """Exact one-sided Clopper–Pearson lower bound of k successes in n (the guard's share_lower_bound)."""
    from scipy import stats as sps

    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(k > 0, sps.beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)


def second_rules(s: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """INSENSITIVE for runs whose columns are users in order of history length (shortest first), under
    (share + identical rule at alpha each — before; the guard's rule, each at alpha / 2 — shipped; share at
    alpha / 2 + the share rule per length tercile at alpha / 6 each — the alternative)."""
    alpha, limit = SETTINGS.alpha, SETTINGS.max_insensitive_share
    g = s.shape[1]
    flagged = (s < SETTINGS.min_sensitivity) & (p >= THRESHOLD)
    before = ((_share_low(flagged.sum(axis=1), g, alpha) > limit)
              | (_share_low((s == 0).sum(axis=1), g, alpha) > SETTINGS.max_identical_share))
    shipped = np.array([o == INSENSITIVE for o in simulate(s, p, combined_threshold=THRESHOLD,
                                                            settings=SETTINGS)])
    tercile = _share_low(flagged.sum(axis=1), g, alpha / 2) > limit
    for part in np.array_split(np.arange(g), 3):
        if part.size:
            tercile |= _share_low(flagged[:, part].sum(axis=1), part.size, alpha / 6) > limit
    return before, shipped, tercile


def length_population(blind_share: float, identical: float, uniform_q: float = 0.0) -> Draw:
    """Readers (median S 0.25) except the longest ``blind_share`` of the ranks, which ignore the history
    (identical with probability ``identical``), and a share ``uniform_q`` ignored at random lengths."""
    def draw(rng: Rng, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        ranks = np.broadcast_to(np.arange(shape[1]) / shape[1], shape)
        ignoring = (ranks >= 1 - blind_share - 1e-9) | (rng.random(shape) < uniform_q)
        ignored = _ignoring_s(rng, shape, identical)
        s = np.where(ignoring, ignored, _sensitive_s(rng, shape, 0.25))
        return s, _perturbed(rng, shape, ignoring)
    return draw


def second_rule_table(runs: int, rng: Rng) -> None:
    print("4. P(INSENSITIVE): share + identical at alpha each (before) | each at alpha/2 (shipped) | "
          "share + per-tercile share rule (alpha/2, alpha/6 each)")
    print(f"{'population':<44}" + "".join(f"{f'G={n}':>19}" for n in SIZES))
    worst = [0.0, 0.0, 0.0]
    for label, draw, null in (
            ("10 % ignored at random, half identical", length_population(0.0, 0.5, 0.10), True),
            ("20 % ignored at random, none identical", length_population(0.0, 0.0, 0.185), True),
            ("both limits: 20 % ignored, 5 % identical", length_population(0.0, 0.27, 0.185), True),
            ("longest third ignored, identical", length_population(1 / 3, 1.0), False),
            ("longest half ignored, identical", length_population(0.5, 1.0), False),
            ("longest third ignored, a few words apart", length_population(1 / 3, 0.0), False),
            ("longest half ignored, a few words apart", length_population(0.5, 0.0), False),
            ("longest fifth ignored, a few words apart", length_population(0.2, 0.0), False)):
        cells = []
        for n in SIZES:
            s, p = draw(rng, (runs, n))
            rates = [float(r.mean()) for r in second_rules(s, p)]
            if null:
                worst = [max(w, r) for w, r in zip(worst, rates, strict=True)]
            cells.append("|".join(f"{100 * r:.1f}" for r in rates))
        print(f"{label:<44}" + "".join(f"{c:>19}" for c in cells), flush=True)
    print(f"largest false INSENSITIVE rate (q ≤ 0.2, i ≤ 0.05), G = 3–100: before {100 * worst[0]:.1f} %, "
          f"shipped {100 * worst[1]:.1f} %, per tercile {100 * worst[2]:.1f} % — target ≤ "
          f"{100 * SETTINGS.alpha:g} % {'OK' if worst[1] <= SETTINGS.alpha + 0.005 else 'MISSED'}")


def exact_bound(k: np.ndarray, n: np.ndarray, alpha: float, upper: bool) -> np.ndarray:
    """The guard's exact bounds (share_lower_bound / share_upper_bound), vectorised; ``k`` may be a sum
    of users' shares."""
    from scipy.special import betaincinv

    with np.errstate(divide="ignore", invalid="ignore"):
        if upper:
            return np.where(k < n, betaincinv(k + 1, np.maximum(n - k, 1e-12), 1 - alpha), 1.0)
        return np.where(k > 0, betaincinv(np.maximum(k, 1e-12), n - k + 1, alpha), 0.0)


def _user_flags(rng: Rng, shape: tuple[int, int], share: float, together: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flagged cases, cases, Σ users' shares) per run: each user has 1–4 cases; ``together``: a user's
    cases are all flagged or none (a model that copies one of a user's prompts copies them all)."""
    cases = rng.integers(1, 5, size=shape)
    if together:
        user = rng.random(shape) < share
        return (cases * user).sum(axis=1), cases.sum(axis=1), user.sum(axis=1).astype(float)
    hits = rng.binomial(cases, share)
    return hits.sum(axis=1), cases.sum(axis=1), (hits / cases).sum(axis=1)


def share_table(runs: int, rng: Rng) -> None:
    """5. The shares at their limits with 1–4 cases a user: bounded over cases (before) or over users."""
    print("5. P(false FAIL / INSENSITIVE) at each share's limit, 1–4 cases a user: over cases (before) | "
          "users as the unit (shipped)")
    print(f"{'rule at its limit':<56}" + "".join(f"{f'G={n}':>12}" for n in SIZES))
    alpha = SETTINGS.alpha
    worst = [0.0, 0.0]
    rules = (("copy rate 0.10 (alpha)", SETTINGS.max_copy_rate, False, alpha, alpha),
             ("identical share 0.05 (alpha / 2)", SETTINGS.max_identical_share, False, alpha / 2, alpha / 2))
    for together in (True, False):
        how = "a user's cases together" if together else "cases independent"
        for name, limit, _, before, shipped in rules:
            cells = []
            for n in SIZES:
                k, m, users = _user_flags(rng, (runs, n), limit, together)
                rates = [float((exact_bound(k, m, before, False) > limit).mean()),
                         float((exact_bound(users, np.full(runs, n), shipped, False) > limit).mean())]
                worst = [max(w, r) for w, r in zip(worst, rates, strict=True)]
                cells.append("|".join(f"{100 * r:.1f}" for r in rates))
            print(f"{f'{name}, {how}':<56}" + "".join(f"{c:>12}" for c in cells), flush=True)
        # grounding: history references at 0.5 (FAIL below) and unsupported at 0.5 (FAIL above), both at
        # their limits; before: each at alpha over cases, shipped: each at alpha / 2 over users.
        cells = []
        for n in SIZES:
            k1, m1, u1 = _user_flags(rng, (runs, n), SETTINGS.min_history_reference or 0.5, together)
            k2, m2, u2 = _user_flags(rng, (runs, n), SETTINGS.max_unsupported_rate or 0.5, together)
            before = ((exact_bound(k1, m1, alpha, True) < 0.5)
                      | (exact_bound(k2, m2, alpha, False) > 0.5)).mean()
            g = np.full(runs, n)
            shipped = ((exact_bound(u1, g, alpha / 2, True) < 0.5)
                       | (exact_bound(u2, g, alpha / 2, False) > 0.5)).mean()
            worst = [max(worst[0], float(before)), max(worst[1], float(shipped))]
            cells.append(f"{100 * before:.1f}|{100 * shipped:.1f}")
        label = f"grounding, both rates at 0.5, {how}"
        print(f"{label:<56}" + "".join(f"{c:>12}" for c in cells), flush=True)
    print(f"largest false FAIL or INSENSITIVE of a share rule, G = 3–100: before {100 * worst[0]:.1f} %, "
          f"shipped {100 * worst[1]:.1f} % — target ≤ {100 * alpha:g} % "
          f"{'OK' if worst[1] <= alpha + 0.005 else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000, help="simulated runs per cell")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    insensitive_table(args.runs, rng)
    evidence_table(args.runs, rng)
    relative_table(args.runs, rng)
    print()
    second_rule_table(args.runs, rng)
    print()
    share_table(args.runs, rng)


if __name__ == "__main__":
    main()
