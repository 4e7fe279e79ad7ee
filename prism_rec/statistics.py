"""Seed-level comparisons of two backbones: intervals, power, multiplicity and the verdict rule.

A table cell holds one figure per training seed (a run's test AUC). Two backbones are compared by the
difference of their seed means with Welch's t interval (seeds of two backbones are independent draws; seed i of
one does not pair with seed i of the other beyond sharing the data order). Everything here is deterministic: no
resampling, so no verdict moves with a random seed.

- ``welch``: the difference, its Welch interval and two-sided p (scipy).
- ``min_detectable_difference``: the smallest true difference the seeds detect with power ``POWER`` at ``ALPHA``
  (two-sided two-sample t test, statsmodels' power solver), from the seeds' pooled spread.
- ``seeds_needed``: how many seeds per backbone the same test needs to detect a given difference (the gap of
  interest) with that power, from the same spread (scipy's noncentral t); ``seeds_to_bound``: how many for the
  pooled t interval of a zero true difference to lie inside ±gap with that power (about what "equal within"
  asks). Both take the observed spread as the true one and alpha unadjusted, so they are planning figures:
  lower bounds on what resolving a "not resolved" would take.
- ``holm``: Holm's step-down adjustment over a family of p-values (statsmodels).
- ``decide``: the verdict of one comparison: "A > B", "A < B", "equal within ±x" (the interval lies inside ±x
  and x is no larger than the gap of interest), or "not resolved" (a gap of that size cannot be excluded).

The user-level intervals (which test users the figure depends on) are tracking/bootstrap.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import integrate, stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 1000  # seeds_needed reports more than this as infinite
NOT_EXCLUDED = "not resolved (a gap of ±{gap:.4f} is not excluded)"  # decide's verdict when the data cannot tell


@dataclass(frozen=True)
class SeedComparison:
    """Backbone a minus backbone b over their seeds: the difference of seed means, Welch's (1 - alpha) interval,
    its two-sided p (NaN when the seed spread is unknown: fewer than 2 seeds a side or no spread at all), the
    seeds on each side, the minimum detectable difference (NaN likewise) and the pooled seed standard deviation
    it comes from (NaN with fewer than 3 seeds in all)."""

    mean: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    detectable: float
    std: float = math.nan


def _values(seeds) -> np.ndarray:
    values = np.asarray(seeds, dtype=np.float64).ravel()
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError(f"seed values must be a non-empty list of finite numbers, got {seeds!r}")
    return values


def pooled_std(a, b) -> float:
    """The pooled standard deviation of two groups of seed values (NaN with fewer than 3 values in all)."""
    first, second = _values(a), _values(b)
    dof = first.size + second.size - 2
    if dof < 1:
        return math.nan
    squares = ((first - first.mean()) ** 2).sum() + ((second - second.mean()) ** 2).sum()
    return math.sqrt(squares / dof)


def min_detectable_difference(std: float, n_a: int, n_b: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The true difference a two-sided two-sample t test at ``alpha`` detects with probability ``power``, for
    ``n_a`` and ``n_b`` seeds of common standard deviation ``std`` (NaN where it is unknown)."""
    if not math.isfinite(std) or std <= 0 or min(n_a, n_b) < 2:
        return math.nan
    effect = TTestIndPower().solve_power(effect_size=None, nobs1=n_a, ratio=n_b / n_a, alpha=alpha, power=power,
                                         alternative="two-sided")
    return float(effect) * std


def detect_power(effect: float, n: int, alpha: float = ALPHA) -> float:
    """The power of the two-sided two-sample t test at ``alpha`` with ``n`` seeds a side against a true
    difference of ``effect`` standard deviations (scipy's noncentral t; statsmodels' comes out NaN where the
    opposite tail underflows, at large noncentrality)."""
    dof, noncentrality = 2 * n - 2, effect * math.sqrt(n / 2)
    critical = stats.t.ppf(1 - alpha / 2, dof)
    # the tail opposite the difference holds under alpha / 2 and shrinks as n grows; where it underflows,
    # scipy's noncentral t returns NaN for it, and it counts as 0
    opposite = float(stats.nct.cdf(-critical, dof, noncentrality))
    return float(stats.nct.sf(critical, dof, noncentrality)) + (opposite if math.isfinite(opposite) else 0.0)


def _fewest_seeds(power_at, power: float) -> float:
    """The smallest n in 2..MAX_SEEDS with ``power_at(n)`` >= ``power``, searched upwards from 2 (not by
    bisection: a power can fall as n grows at few seeds); infinity where MAX_SEEDS does not reach it (at large n
    the powers here grow with n)."""
    if power_at(MAX_SEEDS) < power:
        return math.inf
    return float(next(n for n in range(2, MAX_SEEDS + 1) if power_at(n) >= power))


def seeds_needed(std: float, difference: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The seeds per backbone (the same count on both sides) with which a two-sided two-sample t test at
    ``alpha`` detects a true ``difference`` with probability ``power``, for seeds of standard deviation ``std``
    (``detect_power``): an integer >= 2; infinity above MAX_SEEDS; NaN where ``std`` is unknown."""
    if not math.isfinite(std) or std <= 0 or not math.isfinite(difference) or difference == 0:
        return math.nan
    return _fewest_seeds(lambda n: detect_power(abs(difference) / std, n, alpha), power)


def bound_power(std: float, gap: float, n: int, alpha: float = ALPHA) -> float:
    """The probability that the (1 - alpha) pooled two-sample t interval of a zero true difference lies inside
    ±``gap``, with ``n`` seeds a side of standard deviation ``std``: the integral over the seeds' estimated
    spread s (s / std = sqrt(chi2(dof) / dof)) of P(|mean difference| <= gap - t s sqrt(2 / n))."""
    dof, spread = 2 * n - 2, std * math.sqrt(2 / n)      # the mean difference's standard deviation
    critical = stats.t.ppf(1 - alpha / 2, dof)
    reach = gap / (critical * spread)                    # the largest s / std with an interval inside ±gap
    ratio = stats.chi(dof, scale=1 / math.sqrt(dof))

    def inside(u: float) -> float:
        return (2 * stats.norm.cdf(gap / spread - critical * u) - 1) * ratio.pdf(u)

    # over the bulk of s / std only (outside it lies a probability of 2e-12), so that quad sees its peak
    low, high = ratio.ppf(1e-12), min(reach, ratio.ppf(1 - 1e-12))
    return float(integrate.quad(inside, low, high, limit=200)[0]) if high > low else 0.0


def seeds_to_bound(std: float, gap: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The seeds per backbone (the same count on both sides) with which the (1 - alpha) interval of a zero true
    difference lies inside ±``gap`` with probability ``power`` (``bound_power``): an integer >= 2; infinity
    above MAX_SEEDS; NaN where ``std`` is unknown."""
    if not math.isfinite(std) or std <= 0 or not math.isfinite(gap) or gap <= 0:
        return math.nan
    # at few seeds this power can fall as n grows (chi's heavy lower tail), though only while it is a few percent
    return _fewest_seeds(lambda n: bound_power(std, gap, n, alpha), power)


def welch(a, b, alpha: float = ALPHA) -> SeedComparison:
    """``a`` minus ``b`` (seed values of each): Welch's interval and p, the detectable difference and the
    pooled spread it comes from."""
    first, second = _values(a), _values(b)
    mean = float(first.mean() - second.mean())
    std = pooled_std(first, second)
    detectable = min_detectable_difference(std, first.size, second.size, alpha)
    if min(first.size, second.size) < 2 or (np.ptp(first) == 0 and np.ptp(second) == 0):
        return SeedComparison(mean, math.nan, math.nan, math.nan, first.size, second.size, detectable, std)
    test = stats.ttest_ind(first, second, equal_var=False)
    interval = test.confidence_interval(1 - alpha)
    return SeedComparison(mean, float(interval.low), float(interval.high), float(test.pvalue), first.size,
                          second.size, detectable, std)


def holm(p_values, alpha: float = ALPHA) -> list[float]:
    """Holm-adjusted p-values of a family (NaN entries stay NaN and are not counted in the family)."""
    values = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(values.shape, math.nan)
    known = np.isfinite(values)
    if known.any():
        adjusted[known] = multipletests(values[known], alpha=alpha, method="holm")[1]
    return adjusted.tolist()


def decide(comparison: SeedComparison, adjusted_p: float, gap: float, alpha: float = ALPHA,
           names: tuple[str, str] = ("a", "b")) -> str:
    """The verdict for ``comparison`` given its family-adjusted p and the gap of interest ``gap`` > 0 (the size
    of difference a reader cares about, such as the paper's)."""
    first, second = names
    if not math.isfinite(comparison.p):
        return "not resolved (seed spread unknown)"
    if adjusted_p < alpha:
        return f"{first} > {second}" if comparison.mean > 0 else f"{first} < {second}"
    bound = max(abs(comparison.low), abs(comparison.high))
    if bound <= gap:
        return f"equal within ±{bound:.4f}"
    return NOT_EXCLUDED.format(gap=gap)


def gap_not_excluded(verdict: str) -> bool:
    """Whether ``verdict`` (``decide``'s) is "not resolved" because a gap of interest cannot be excluded: the
    verdict more seeds could settle (``seeds_needed``, ``seeds_to_bound``)."""
    return verdict.startswith(NOT_EXCLUDED.split("{")[0])
