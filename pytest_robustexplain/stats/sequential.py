"""Sequential testing by betting (Waudby-Smith & Ramdas 2023, JRSS-B), and its vectorised simulations."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ..results import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    GateCheck,
    PairResult,
    Verdict,
)
from .confident import check_user_means, combine_codes, fallback_codes, side_sign, users_needed
from .intervals import (
    CODE,
    FloatArray,
    IntArray,
    check_alpha,
    check_thresholds,
    cluster_interval,
    cluster_stats,
    failable,
    fmt_threshold,
    pair_users,
    pair_values,
    perturbation_pairs,
    share_lower_bound,
    share_upper_bound,
    single_model,
)
from .verdicts import describe, sample_note

# Sequential betting: bets are truncated at this fraction of the largest bet that cannot lose everything
# (Waudby-Smith & Ramdas use 1/2–3/4 for confidence sequences; a test wants to stop early, so bolder).
_BET_CAP = 0.95
# The first user is bet on before anything is known: aGRAPA's prior sits at 1/2, so at a threshold of 1/2
# it would stake nothing and a clear case would start a user late. Both one-sided tests stake this share
# of the cap on user 1 instead (each is a separate wealth, so this costs no alpha). With the bolder cap it
# brings the clear case (ρ ≈ 0.93, gate 0.5) from 8.0 users to 7.1, 1.1× the fewest any valid bet needs
# (docs/statistics.md).
_OPENING_BET = 0.5
# Prior pseudo-observation of the plug-in mean/variance estimates (WSR use weight 1 on mean 1/2, var 1/4;
# a quarter lets the first real users dominate sooner, which matters when decisions come after ~10 users).
_PRIOR_MEAN, _PRIOR_VAR, _PRIOR_WEIGHT = 0.5, 0.25, 0.25


# --------------------------------------------------------------------------------------------------
# Sequential testing by betting (Waudby-Smith & Ramdas 2023, JRSS-B)


def _log_wealth(x: FloatArray, thr: FloatArray, sign: int) -> FloatArray:
    """Log wealth after each observation of one-sided betting tests, shape (runs, users, quantities).

    ``sign=+1`` tests H0: mean ≤ thr (its rejection is evidence for PASS); ``sign=−1`` tests
    H0: mean ≥ thr (evidence for FAIL). Wealth is Π(1 + λ_i·sign·(x_i − thr)) with λ_i chosen from the
    users before i only (predictable), so under H0 it is a non-negative supermartingale and by Ville's
    inequality P(wealth ever ≥ 1/a) ≤ a: the test may be checked after every user.

    Bets follow aGRAPA (WSR §5.3): λ = edge/(σ̂² + edge²) with edge = sign·(μ̂ − thr), floored at 0
    (never bet against the alternative) and capped at ``_BET_CAP`` of the largest bet that a worst-case
    observation (0 or 1) cannot bankrupt. μ̂ and σ̂² are WSR's running plug-in estimates with a prior
    pseudo-observation; the first bet is at least ``_OPENING_BET`` of the cap.
    """
    t = np.arange(1, x.shape[1] + 1, dtype=float)[None, :, None]
    mu = (_PRIOR_MEAN * _PRIOR_WEIGHT + np.cumsum(x, axis=1)) / (_PRIOR_WEIGHT + t)
    var = (_PRIOR_VAR * _PRIOR_WEIGHT + np.cumsum((x - mu) ** 2, axis=1)) / (_PRIOR_WEIGHT + t)
    mu_prev = np.concatenate([np.full_like(mu[:, :1], _PRIOR_MEAN), mu[:, :-1]], axis=1)
    var_prev = np.concatenate([np.full_like(var[:, :1], _PRIOR_VAR), var[:, :-1]], axis=1)
    edge = sign * (mu_prev - thr)
    # The worst observation is 0 when betting on "above" (loses thr per unit) and 1 when betting on
    # "below" (loses 1 − thr); a bet of c/room keeps at least (1 − c) of the wealth.
    room = np.maximum(thr if sign > 0 else 1.0 - thr, 1e-12)
    lam = np.clip(edge / (var_prev + edge**2), 0.0, _BET_CAP / room)
    lam[:, :1] = np.maximum(lam[:, :1], _OPENING_BET * _BET_CAP / room)
    return np.asarray(np.cumsum(np.log1p(sign * lam * (x - thr)), axis=1), dtype=float)


def _kelly_bet(past: FloatArray, limit: float, sign: int) -> FloatArray:
    """A check's test's stake on its next user (GRAPA, WSR §5.2), per run of ``past`` (runs, users seen): the
    λ in [0, cap] maximising Σ log(1 + λ·sign·(x − limit)) over the users seen and the prior's pseudo-users
    at 0 and 1 (``_PRIOR_WEIGHT``/2 each), by bisection on its derivative. A share at 0 or 1 (a copier) got
    1.1 from aGRAPA, its second-order form, where 9.5 is safe (docs/statistics.md). The first bet is at
    least ``_OPENING_BET`` of the cap, as ρ's."""
    room = max(limit if sign > 0 else 1.0 - limit, 1e-12)
    cap = _BET_CAP / room
    y = sign * (np.asarray(past, dtype=float) - limit)
    prior = np.array([sign * (0.0 - limit), sign * (1.0 - limit)])

    def slope(lam: FloatArray) -> FloatArray:  # d/dλ of the log wealth the values seen would give λ
        ours = (y / (1.0 + lam[:, None] * y)).sum(axis=1)
        return ours + _PRIOR_WEIGHT / 2 * (prior / (1.0 + lam[:, None] * prior)).sum(axis=1)

    low, high = np.zeros(y.shape[0]), np.full(y.shape[0], cap)
    for _ in range(40):  # the slope falls with λ: keep the root between low and high
        mid = (low + high) / 2
        rising = slope(mid) > 0
        low, high = np.where(rising, mid, low), np.where(rising, high, mid)
    bet = np.where(slope(np.zeros_like(low)) <= 0, 0.0, np.where(slope(high) >= 0, cap, low))
    return np.maximum(bet, _OPENING_BET * cap) if y.shape[1] == 0 else bet


def _test_log_wealth(x: FloatArray, limit: float, sign: int) -> FloatArray:
    """A check's test's log wealth after each user, shape (runs, users): the stake :func:`_kelly_bet` chose
    from the users before each; the same wealth as ρ's gate (:func:`_log_wealth`) with another stake."""
    y = sign * (x - limit)
    steps = [np.log1p(_kelly_bet(x[:, :t], limit, sign) * y[:, t]) for t in range(x.shape[1])]
    return np.cumsum(np.stack(steps, axis=1), axis=1) if steps else np.zeros_like(x)


@dataclass(frozen=True)
class _Paths:
    log_above: FloatArray  # (runs, users, k)
    log_below: FloatArray
    rejected_above: npt.NDArray[np.bool_]  # sticky: rejected at or before each step
    rejected_below: npt.NDArray[np.bool_]
    decided: npt.NDArray[np.bool_]  # (runs, users)
    fail: npt.NDArray[np.bool_]


def _paths(x: FloatArray, thr: FloatArray, alpha_seq: float) -> _Paths:
    k = failable(thr)
    log_above, log_below = _log_wealth(x, thr, +1), _log_wealth(x, thr, -1)
    # Once wealth has crossed 1/a the hypothesis stays rejected: Ville bounds the chance of *ever* crossing.
    rej_above = np.maximum.accumulate(log_above >= math.log(1 / alpha_seq), axis=1)
    # "mean ≥ 0" holds for every score, so a threshold of 0 is met before any user is seen. Only quantities
    # that can fail share the FAIL alpha (k).
    rej_above |= thr <= 0
    rej_below = np.maximum.accumulate(log_below >= math.log(k / alpha_seq), axis=1)
    fail = np.asarray(rej_below.any(axis=-1), dtype=bool)
    decided = np.asarray(fail | rej_above.all(axis=-1), dtype=bool)
    return _Paths(log_above, log_below, rej_above, rej_below, decided, fail)


# Alpha is split evenly between the betting tests and the fixed fallback at the cap. Giving the bets more
# (0.8) saves one user of twenty on very clear cases but lets the fallback decide fewer close cases: at a
# gap of 0.1 with 20 users the fixed rule decides 99 % of runs, the sequential test 96 % at this share.
DEFAULT_FALLBACK_SHARE = 0.5
# A check that passes unless shown to fail gives its anytime test this share of its alpha and its fixed rule
# the rest: the fixed rule decides every PASS (on the users the slice waits for), so a larger share for the
# test cost power against decision=mean (at half, an explainer flagged for a quarter of the users past a
# 0.5 limit passed 56 % of sequential runs against 37 % fixed, at 20 users); betting's stop grows only with
# log(1/alpha), and the fixed rule's own certainty (``OneSidedTest``'s ``certain``) stops a clear case
# early at no alpha (docs/statistics.md, "When a sequential slice may stop").
CHECK_TEST_SHARE = 0.1


def check_alphas(alpha: float) -> tuple[float, float]:
    """(its anytime test's, its fixed rule's) alpha for a check that passes unless shown to fail."""
    return alpha * CHECK_TEST_SHARE, alpha * (1 - CHECK_TEST_SHARE)


def _alpha_parts(alpha: float, fallback_share: float) -> tuple[float, float]:
    if not (isinstance(fallback_share, (int, float)) and 0.0 <= float(fallback_share) < 1.0):
        raise ConfigError(f"fallback_share={fallback_share!r}: must lie in [0, 1)")
    return alpha * (1 - fallback_share), alpha * fallback_share


def simulate_sequential(user_means: FloatArray, thresholds: Mapping[str, float], *, alpha: float = 0.05,
                        fallback_share: float = DEFAULT_FALLBACK_SHARE,
                        pairs_per_user: float | None = None) -> tuple[IntArray, IntArray]:
    """Vectorised :class:`SequentialGate` over many runs: ``(outcome codes, users used)`` per run.

    ``user_means`` has shape (runs, users, quantities), the quantities in the order of ``thresholds``;
    each run feeds its users in order and stops at the first decision, or falls back to the confident
    rule after the last user (the cap). Codes: +1 PASS, −1 FAIL, 0 INCONCLUSIVE. Used by the simulation
    tests and benchmarks; :class:`SequentialGate` runs exactly this computation on one run (its users
    having ``pairs_per_user`` pairs each, as :func:`simulate_confident`).
    """
    thr = np.array(list(check_thresholds(thresholds).values()))
    alpha_seq, alpha_fix = _alpha_parts(check_alpha(alpha), fallback_share)
    x = check_user_means(user_means)
    if x.shape[-1] != thr.size:
        raise ValueError(f"user_means has {x.shape[-1]} quantities but {thr.size} thresholds")
    paths = _paths(x, thr, alpha_seq)
    has = paths.decided.any(axis=1)
    first = np.argmax(paths.decided, axis=1)
    rows = np.arange(x.shape[0])
    codes = np.where(paths.fail[rows, first], -1, 1)
    fallback = fallback_codes(x, thr, alpha_fix, pairs_per_user=pairs_per_user)
    outcome = np.where(has, codes, fallback).astype(np.int64)
    used = np.where(has, first + 1, x.shape[1]).astype(np.int64)
    return outcome, used


def _beyond_the_edge(x: FloatArray, limit: float, sign: int) -> npt.NDArray[np.bool_]:
    """Values that H0 rules out at a limit on the edge of [0, 1]: above 0 under "mean ≤ 0" (``sign`` +1; a
    share whose limit is "never", such as max_injection_rate 0), below 1 under "mean ≥ 1". Every value is
    then 0 (or 1), so one value past it rejects H0 at no cost of alpha — exactly, not by betting, whose bets
    stay finite and would need several such users."""
    if sign > 0 and limit <= 0.0:
        return np.asarray(x > 0.0)
    if sign < 0 and limit >= 1.0:
        return np.asarray(x < 1.0)
    return np.zeros(np.shape(x), dtype=bool)


def simulate_one_sided(user_values: FloatArray, limit: float, side: str, *, alpha: float
                       ) -> tuple[npt.NDArray[np.bool_], IntArray]:
    """Vectorised :class:`OneSidedTest` over many runs: ``(rejected, users used)`` per run, ``user_values``
    of shape (runs, users). The benchmarks and tests call this; the gate runs the same wealth."""
    x = np.asarray(user_values, dtype=float)
    if x.ndim != 2 or not np.all((x >= 0) & (x <= 1)):
        raise ValueError("user_values: shape (runs, users), every value in [0, 1]")
    sign = side_sign(side)
    log_wealth = _test_log_wealth(x, float(limit), sign)
    crossed = (log_wealth >= math.log(1 / check_alpha(alpha))) | _beyond_the_edge(x, float(limit), sign)
    rejected = np.asarray(crossed.any(axis=1), dtype=bool)
    used = np.where(rejected, np.argmax(crossed, axis=1) + 1, x.shape[1]).astype(np.int64)
    return rejected, used


def pass_key(check: str) -> str:
    """The name of ``check``'s PASS rule among a slice's tests (and in ``GuardSettings.split``)."""
    return f"{check}:pass"


@dataclass(frozen=True)
class StopRule:
    """How one check takes part in ending a sequential slice early: its anytime-valid test (``limit``,
    ``side``, ``alpha``) and ``value(pairs, swaps)``, the one user's value it is fed (None: the user gave
    it nothing) from that user's perturbation pairs and cross-user controls, ρ under the slice's weights.

    ``verdict`` FAIL: a rejection fails the item and ends the slice. PASS: a rejection is the check's
    evidence for passing, and a slice whose ρ is decided PASS goes on until every PASS rule has it (a
    PASS needs every check that asks for evidence decided)."""

    check: str
    limit: float
    side: str
    alpha: float
    value: Callable[[Sequence[PairResult], Sequence[PairResult]], float | None] | None
    verdict: str = FAIL
    # Which of the check's rules this is, when it has more than one FAIL rule (grounding's history
    # references and unsupported mentions): "" for the check's one rule.
    part: str = ""
    # A value that needs calls of its own (the judge's verdicts on the user's original explanations), in
    # place of ``value``: awaited on the sweep's loop with all of the user's finished pairs (controls
    # included: they carry the originals too) once they are in; the user is fed to every test only when it
    # has answered, so the order, and with it the test's validity, stays the seeded one.
    probe: Callable[[Sequence[PairResult]], Awaitable[float | None]] | None = None
    # The alpha the check's fixed rule keeps beside this test, when that rule is the exact bound of the
    # users' share (None: another rule — R's ratio — or a PASS rule): the test then also rejects once that
    # rule is certain to fail (``OneSidedTest``), and it is what the rule's power is matched at
    # (``Check.users_needed``).
    kept: float | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.probe is None):
            raise TypeError(f"StopRule {self.check!r}: give exactly one of value and probe")

    @property
    def key(self) -> str:
        """The rule's name among a slice's tests (and in ``GuardSettings.split``): the check's for its FAIL
        rule, ``check:part`` for a second one, :func:`pass_key` for a PASS rule."""
        name = f"{self.check}:{self.part}" if self.part else self.check
        return name if self.verdict == FAIL else pass_key(name)

    def test(self, planned: int = 0) -> OneSidedTest:
        """The rule's test over a slice of ``planned`` users (0: unknown, no certainty of the fixed rule)."""
        certain = (planned, self.kept) if self.kept is not None and planned > 0 else None
        return OneSidedTest(self.limit, self.side, alpha=self.alpha, certain=certain)


@dataclass(frozen=True)
class Stopped:
    """A slice ended by a check's own test: which, after how many users, and the wealth it reached."""

    check: str
    users: int
    wealth: float
    level: float
    planned: int = 0  # the slice's users
    certainly: bool = False  # decided by the fixed rule's certainty, not the wealth (``OneSidedTest``)

    def note(self) -> str:
        left = self.planned - self.users
        rest = f"; the other {_users(left)} {'was' if left == 1 else 'were'} not run" if left > 0 else ""
        if self.certainly:
            return (f"The sequential test decided it after {_users(self.users)} (the fixed rule fails on "
                    f"all {_users(self.planned)} whatever the others show){rest}.")
        return (f"The sequential test decided it after {_users(self.users)} (wealth {self.wealth:.3g} ≥ "
                f"{self.level:.3g}){rest}.")


def _users(count: int) -> str:
    return f"{count} user" if count == 1 else f"{count} users"


class OneSidedTest:
    """A check's anytime-valid FAIL test, fed one value in [0, 1] per user in the seeded order.

    ``side="above"``: H0 mean ≤ ``limit`` (a share that may not exceed its limit, like the copy rate);
    ``"below"``: H0 mean ≥ ``limit`` (a rate that must reach it). Betting (Waudby-Smith & Ramdas 2023; the
    exact Kelly stake on the users seen, :func:`_kelly_bet`, where ρ's gate bets aGRAPA): under H0 the
    wealth is a non-negative supermartingale, so by Ville's inequality it ever reaches 1/alpha with
    probability at most alpha — the test may be looked at after every user, and a rejection is the check's
    FAIL, whenever it comes. It only ever fails an item: a PASS
    is the check's fixed rule's, on every user measured. At a limit of 0 ("above") or 1 ("below") one value
    past it rejects at once: H0 allows no other value (:func:`_beyond_the_edge`).
    """

    def __init__(self, limit: float, side: str, *, alpha: float,
                 certain: tuple[int, float] | None = None) -> None:
        if not (isinstance(limit, (int, float)) and 0.0 <= float(limit) <= 1.0):
            raise ConfigError(f"limit={limit!r}: must lie in [0, 1]")
        self.limit = float(limit)
        self.side = side
        self._sign = side_sign(side)
        self.alpha = check_alpha(alpha)
        # (planned users, the fixed rule's alpha): reject too once the check's fixed rule — the exact bound
        # of the users' share at that alpha — fails on every planned user whatever the users not yet seen
        # show (all 0 above the limit, all 1 below it). That is the fixed rule's own FAIL known early: no
        # alpha of its own. ``certainly`` says a rejection came that way.
        self._certain = certain
        self.certainly = False
        self._values: list[float] = []
        self._log_wealth = 0.0
        self._bet = float(_kelly_bet(np.zeros((1, 0)), self.limit, self._sign)[0])
        self.rejected = False

    def update(self, value: float) -> bool:
        """Add one user's value; True once the test has rejected (it stays rejected)."""
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"value={value!r}: must be a finite number in [0, 1]")
        # The stake was chosen from the users before this one (predictable); the next from all of them.
        self._log_wealth += math.log1p(self._bet * self._sign * (float(value) - self.limit))
        self._values.append(float(value))
        self._bet = float(_kelly_bet(np.asarray([self._values]), self.limit, self._sign)[0])
        self.rejected = (self.rejected or self._log_wealth >= math.log(self.level)
                         or bool(_beyond_the_edge(np.array(value), self.limit, self._sign)))
        if not self.rejected and self._certain is not None and self._fixed_rule_fails(*self._certain):
            self.rejected = self.certainly = True
        return self.rejected

    def _fixed_rule_fails(self, planned: int, alpha: float) -> bool:
        seen, total = len(self._values), math.fsum(self._values)
        if seen > planned:
            return False
        if self._sign > 0:  # the lower bound with every unseen user at 0
            return share_lower_bound(total, planned, alpha) > self.limit
        return share_upper_bound(total + planned - seen, planned, alpha) < self.limit  # every unseen at 1

    @property
    def n_users(self) -> int:
        return len(self._values)

    @property
    def wealth(self) -> float:
        return math.exp(self._log_wealth)

    @property
    def level(self) -> float:
        """The wealth that rejects: 1/alpha."""
        return 1 / self.alpha


def user_order(user_ids: Iterable[str], seed: int) -> list[str]:
    """A seeded random order of the users, the same in every process and for any input order.

    The sequential test is valid when users arrive in an order that does not depend on their scores;
    feed results to :meth:`SequentialGate.update` in this order (buffer those that finish early).
    """
    ids = [str(u) for u in user_ids]
    if len(set(ids)) != len(ids):
        dupes = sorted({u for u in ids if ids.count(u) > 1})
        raise ValueError(f"user_order: duplicate user ids {', '.join(dupes[:5])}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed={seed!r}: must be a non-negative integer")
    base = sorted(ids)
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    return [base[int(i)] for i in rng.permutation(len(base))]


class SequentialGate:
    """Anytime-valid gate that looks after every user and stops as soon as the verdict is clear.

    For each gated quantity two one-sided tests by betting run on the per-user means (the sampling unit;
    Waudby-Smith & Ramdas 2023): H0 mean ≤ threshold (rejected → evidence for PASS) and H0 mean ≥
    threshold (rejected → evidence for FAIL). PASS once every quantity's "above" test has rejected (an
    intersection–union rule, no correction needed); FAIL once any "below" test has rejected, with its
    alpha split across the quantities. If both happen on the same user, FAIL wins.

    ``alpha`` is shared between the betting tests (``1 − fallback_share``) and the fixed confident rule
    that decides on what was seen when the cap ``max_users`` is reached or :meth:`finish` is called; the
    two routes' error chances add up, so the split keeps false PASS and false FAIL each ≤ alpha.

    A limit of the method worth knowing: observations are only known to lie in [0, 1], so a test valid for
    every such distribution cannot grow its wealth faster than (1 + gap/threshold) per user; near a 0.5
    threshold a gap of 0.1 needs about 20 users to reach 1/0.025, so early stops come from large gaps.
    """

    def __init__(self, thresholds: Mapping[str, float], *, alpha: float = 0.05, max_users: int | None = None,
                 fallback_share: float = DEFAULT_FALLBACK_SHARE, user: Iterable[str] = ()) -> None:
        self.thresholds = check_thresholds(thresholds, user)  # user: the user metrics its pairs carry
        self.alpha = check_alpha(alpha)
        if max_users is not None and (isinstance(max_users, bool) or not isinstance(max_users, int)
                                      or max_users < 1):
            raise ConfigError(f"max_users={max_users!r}: must be a positive integer or None")
        self.max_users = max_users
        self.fallback_share = float(fallback_share)
        self._alpha_seq, self._alpha_fix = _alpha_parts(self.alpha, fallback_share)
        self._names = tuple(self.thresholds)
        self._thr = np.array([self.thresholds[q] for q in self._names])
        self._obs: list[list[float]] = []
        # How many pairs each user's means are of (the fallback's allowance for unseen failures; None: not
        # said, and the fallback is the rule without it, as simulate_sequential's default).
        self._pairs: list[int | None] = []
        self._paths: _Paths | None = None
        self._outcome: str | None = None
        self._decided_by: str | None = None
        self._check_codes: dict[str, str] = {}

    # -- feeding -----------------------------------------------------------------------------------

    def update(self, user_means: Mapping[str, float], *, pairs: int | None = None) -> None:
        """Add one user's per-quantity means over ``pairs`` pairs (extra quantities are ignored); may
        decide the gate."""
        if self.decided:
            raise RuntimeError(f"SequentialGate already decided ({self._outcome}) after {self.n_users} "
                               "users; stop feeding it (check .decided first)")
        row = []
        for q in self._names:
            if q not in user_means:
                raise ValueError(f"user_means: missing gated quantity {q!r}")
            value = float(user_means[q])
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"user_means[{q!r}]={user_means[q]!r}: must be a finite number in [0, 1]")
            row.append(value)
        self._obs.append(row)
        self._pairs.append(None if pairs is None else max(1, int(pairs)))
        self._paths = _paths(np.asarray(self._obs, dtype=float)[None], self._thr, self._alpha_seq)
        if bool(self._paths.decided[0, -1]):
            self._decide_sequential()
        elif self.max_users is not None and self.n_users >= self.max_users:
            self._fall_back()

    def finish(self) -> None:
        """No more users will come: decide now with the fixed confident rule on what was seen."""
        if not self.decided:
            self._fall_back()

    def _decide_sequential(self) -> None:
        assert self._paths is not None
        fail = bool(self._paths.fail[0, -1])
        self._outcome, self._decided_by = (FAIL if fail else PASS), "sequential"
        above, below = self._paths.rejected_above[0, -1], self._paths.rejected_below[0, -1]
        self._check_codes = {q: FAIL if below[i] else PASS if above[i] else INCONCLUSIVE
                             for i, q in enumerate(self._names)}

    def _fall_back(self) -> None:
        x = np.asarray(self._obs, dtype=float).reshape(1, -1, len(self._names))
        counts = [n for n in self._pairs if n is not None]
        per_user = sum(counts) / len(counts) if counts and len(counts) == len(self._pairs) else None
        codes = fallback_codes(x, self._thr, self._alpha_fix, per_quantity=True, pairs_per_user=per_user)[0]
        self._check_codes = {q: CODE[int(codes[i])] for i, q in enumerate(self._names)}
        self._outcome = CODE[int(combine_codes(codes))]
        self._decided_by = "fallback"

    # -- state -------------------------------------------------------------------------------------

    @property
    def decided(self) -> bool:
        """True once a verdict is reached (early, at the cap, or after :meth:`finish`): stop feeding."""
        return self._outcome is not None

    @property
    def outcome(self) -> str | None:
        """PASS, FAIL or INCONCLUSIVE once decided, else None."""
        return self._outcome

    @property
    def decided_by(self) -> str | None:
        """``"sequential"`` (a betting test rejected), ``"fallback"`` (the fixed rule at the end) or None."""
        return self._decided_by

    @property
    def n_users(self) -> int:
        return len(self._obs)

    @property
    def wealth(self) -> dict[str, dict[str, float]]:
        """Current wealth of each quantity's "above" (→ PASS) and "below" (→ FAIL) test."""
        if self._paths is None:
            return {q: {"above": 1.0, "below": 1.0} for q in self._names}
        return {q: {"above": float(np.exp(self._paths.log_above[0, -1, i])),
                    "below": float(np.exp(self._paths.log_below[0, -1, i]))}
                for i, q in enumerate(self._names)}

    @property
    def rejected(self) -> dict[str, dict[str, bool]]:
        """Whether each test has rejected its null so far (rejections are permanent)."""
        if self._paths is None:
            return {q: {"above": False, "below": False} for q in self._names}
        return {q: {"above": bool(self._paths.rejected_above[0, -1, i]),
                    "below": bool(self._paths.rejected_below[0, -1, i])}
                for i, q in enumerate(self._names)}

    @property
    def rejection_levels(self) -> dict[str, float]:
        """Wealth each test must reach: 1/a for "above", k/a for "below" (a = the betting tests' alpha)."""
        return {"above": 1 / self._alpha_seq, "below": failable(self._thr) / self._alpha_seq}

    # -- verdict -----------------------------------------------------------------------------------

    def verdict(self, pairs: Sequence[PairResult]) -> Verdict:
        """The verdict (mode "sequential") with (1 − alpha) intervals from the pairs seen."""
        scored = perturbation_pairs(pairs)
        if not scored:
            raise ValueError("SequentialGate.verdict: no perturbation pairs (control pairs are not gated)")
        single_model(scored, "SequentialGate.verdict")
        users = pair_users(scored)
        checks = []
        stats = []
        for q in self._names:
            values = pair_values(scored, q)
            stats.append(cluster_stats(values, users))
            interval = cluster_interval(values.tolist(), users, confidence=1 - self.alpha)
            checks.append(GateCheck(q, self.thresholds[q], interval, self._check_codes.get(q, INCONCLUSIVE)))
        outcome = self._outcome or INCONCLUSIVE
        needed = None
        if outcome == INCONCLUSIVE:
            mean = np.array([s.mean for s in stats])
            se = np.array([s.se for s in stats])
            codes = np.zeros(len(self._names), dtype=np.int64)
            needed = users_needed(mean, se, stats[0].n_clusters, self._thr, codes, self.alpha)
        return Verdict.of(outcome, checks, mode="sequential",
                          message=self._message(outcome, checks, needed), users_needed=needed)

    def _message(self, outcome: str, checks: Sequence[GateCheck], needed: int | None) -> str:
        cap = f" of at most {self.max_users}" if self.max_users is not None else ""
        seen = f"after {self.n_users}{cap} users"
        wealth = self.wealth
        levels = self.rejection_levels
        note = (f"{100 * (1 - self.alpha):g} % intervals; {sample_note(checks)} Betting tests use "
                f"alpha {self._alpha_seq:g}, the fallback rule {self._alpha_fix:g}.")
        if self._decided_by == "sequential" and outcome == FAIL:
            parts = [f"{describe(c)} is below {fmt_threshold(c.threshold)} (wealth "
                     f"{wealth[c.quantity]['below']:.3g} ≥ {levels['below']:.3g})"
                     for c in checks if c.outcome == FAIL]
            return f"FAIL (sequential test, decided {seen}): {'; '.join(parts)}. {note}"
        if self._decided_by == "sequential":
            parts = [f"{describe(c)} ≥ {fmt_threshold(c.threshold)} (wealth "
                     f"{wealth[c.quantity]['above']:.3g})" for c in checks]
            return (f"PASS (sequential test, decided {seen}): every gated quantity is above its threshold, "
                    f"each betting test reached {levels['above']:.3g}: {'; '.join(parts)}. {note}")
        if self._decided_by == "fallback" and outcome != INCONCLUSIVE:
            word = "confidently below" if outcome == FAIL else "confidently above"
            parts = [f"{describe(c)} vs {fmt_threshold(c.threshold)}" for c in checks
                     if c.outcome == outcome]
            return (f"{outcome} (sequential test undecided {seen}; fixed confident rule on the user means): "
                    f"{word} its threshold: {'; '.join(parts)}. {note}")
        parts = [f"{describe(c)} vs {fmt_threshold(c.threshold)}" for c in checks
                 if c.outcome == INCONCLUSIVE]
        state = ("no decision yet" if self._decided_by is None
                 else "neither the betting tests nor the fallback rule decided")
        more = (f" About {needed} users in total would likely settle it (80 % power, normal approximation)."
                if needed is not None else "")
        return f"INCONCLUSIVE (sequential test, {state} {seen}): {'; '.join(parts)}.{more} {note}"
