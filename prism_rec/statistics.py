"""Seed-level comparisons of two backbones: intervals, power, multiplicity and the verdict rule.

A table cell holds one figure per training seed (a run's test AUC). Two backbones are compared by the
difference of their seed means with Welch's t interval (seeds of two backbones are independent draws; seed i of
one does not pair with seed i of the other beyond sharing the data order). Everything here is deterministic: no
resampling, so no verdict moves with a random seed.

- ``welch``: the difference, its Welch interval and two-sided p (scipy).
- ``min_detectable_difference``: the smallest true difference the seeds detect with power ``POWER`` at ``ALPHA``
  (two-sided two-sample t test, statsmodels' power solver), from the seeds' pooled spread.
- ``holm``: Holm's step-down adjustment over a family of p-values (statsmodels).
- ``decide``: the verdict of one comparison: "A > B", "A < B", "equal within ±x" (the interval lies inside ±x
  and x is no larger than the gap of interest), or "not resolved" (a gap of that size cannot be excluded).

The user-level intervals (which test users the figure depends on) are tracking/bootstrap.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower

ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class SeedComparison:
    """Backbone a minus backbone b over their seeds: the difference of seed means, Welch's (1 - alpha) interval,
    its two-sided p (NaN when the seed spread is unknown: fewer than 2 seeds a side or no spread at all), the
    seeds on each side, and the minimum detectable difference (NaN likewise)."""

    mean: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    detectable: float


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


def welch(a, b, alpha: float = ALPHA) -> SeedComparison:
    """``a`` minus ``b`` (seed values of each): Welch's interval and p, and the detectable difference."""
    first, second = _values(a), _values(b)
    mean = float(first.mean() - second.mean())
    detectable = min_detectable_difference(pooled_std(first, second), first.size, second.size, alpha)
    if min(first.size, second.size) < 2 or (np.ptp(first) == 0 and np.ptp(second) == 0):
        return SeedComparison(mean, math.nan, math.nan, math.nan, first.size, second.size, detectable)
    test = stats.ttest_ind(first, second, equal_var=False)
    interval = test.confidence_interval(1 - alpha)
    return SeedComparison(mean, float(interval.low), float(interval.high), float(test.pvalue), first.size,
                          second.size, detectable)


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
    return f"not resolved (a gap of ±{gap:.4f} is not excluded)"
