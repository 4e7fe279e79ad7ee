"""Uncertainty over test users for the headline tables: bootstrap intervals and paired differences.

Inputs are per-user AUC matrices [S, U]: one row per seed (run) of a model, one column per test user,
the columns of every matrix of a dataset in the same user order (case_ranks.py gives each run's users).
A model's figure is the mean over users of its seed-averaged per-user AUC, so the seeds of a model share
every resample of users. The intervals are scipy.stats.bootstrap percentile intervals over users; they
measure how much the figure depends on which users are in the test set, with the seeds averaged out,
not how much another training seed would move it (the tables give the std over seeds for that; a paired
difference also carries Welch's t-test over the two models' per-seed means, ``seed_p``, and counts as
significant only when both its interval excludes 0 and ``seed_p`` < ``SEED_ALPHA``).
Where a user has several test cases (a time split), ``cases`` [U] gives each user's count, the per-user
values are that user's mean over them, and the figure is the mean over cases: users are still what is
resampled (a cluster bootstrap), so a user's correlated cases move together.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

N_RESAMPLES = 10_000
LEVEL = 0.95
BATCH = 64  # resamples drawn at once: [BATCH, U] floats in memory, not [N_RESAMPLES, U]
SEED_ALPHA = 0.05  # a difference must also stand out from seed-to-seed training variance at this level


def seed_mean(per_user: np.ndarray) -> np.ndarray:
    """Per-user values averaged over seeds: [S, U] (or [U], one seed) -> [U]; refuses empty or non-finite input."""
    values = np.asarray(per_user, dtype=np.float64)
    if values.ndim == 1:
        values = values[np.newaxis]
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] == 0:
        raise ValueError(f"per-user values must be [seeds, users] with both > 0, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("per-user values hold NaN or infinity")
    return values.mean(axis=0)


def _case_mean(sums: np.ndarray, cases: np.ndarray, axis: int = -1) -> np.ndarray:
    return sums.sum(axis=axis) / cases.sum(axis=axis)


def weighted_mean(values: np.ndarray, cases: np.ndarray | None) -> float:
    """The mean over cases of per-user means ``values`` [U] of ``cases`` [U] cases each (None: one each)."""
    return float(values.mean() if cases is None else _case_mean(values * cases, cases))


def _percentile_interval(values: np.ndarray, n_resamples: int, level: float, seed: int,
                         cases: np.ndarray | None = None) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean over cases of per-user means ``values`` [U], resampling
    users; ``cases`` [U] counts each user's cases (None: one each)."""
    if len(values) < 2 or np.all(values == values[0]):  # nothing to resample: every resample has this mean
        return float(values.mean()), float(values.mean())
    if cases is None:
        data, statistic, paired = (values,), np.mean, False
    else:  # the resampled users' case sums over their case counts
        data, statistic, paired = (values * cases, np.asarray(cases, dtype=np.float64)), _case_mean, True
    with warnings.catch_warnings():  # scipy warns when many resamples coincide (few users); the interval stands
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(data, statistic, n_resamples=n_resamples, batch=BATCH, vectorized=True,
                                 paired=paired, confidence_level=level, method="percentile",
                                 rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return float(interval.low), float(interval.high)


def bootstrap_mean_ci(per_user: np.ndarray, n_resamples: int = N_RESAMPLES, level: float = LEVEL,
                      seed: int = 0, cases: np.ndarray | None = None) -> tuple[float, float]:
    """The ``level`` percentile bootstrap interval (low, high) of the mean over users (over cases, with
    ``cases``) of the seed-averaged per-user values [S, U]: users are resampled with replacement, the S
    seeds of a user move together."""
    return _percentile_interval(seed_mean(per_user), n_resamples, level, seed, cases)


@dataclass(frozen=True)
class PairedDifference:
    """Model a minus model b over the same test users: the difference of their mean AUC, its paired
    bootstrap interval, whether that interval excludes 0, the two-sided Wilcoxon signed-rank p-value of the
    per-user seed-averaged differences (NaN when every difference is 0: the test is undefined), and the
    two-sided p-value of Welch's t-test between the two models' per-seed mean AUCs (NaN with fewer than 2
    seeds a side, or no spread at all: the seed variance is then unknown)."""

    mean: float
    low: float
    high: float
    excludes_zero: bool
    wilcoxon_p: float
    n_users: int
    seed_p: float

    @property
    def significant(self) -> bool:
        """The interval over users excludes 0 and the gap stands out from the seed-to-seed spread."""
        return self.excludes_zero and self.seed_p < SEED_ALPHA  # False for a NaN seed_p


def verdict(difference: PairedDifference) -> str:
    """What a paired difference shows, in words: "excludes 0" (significant), "users only (...)" when only
    the interval over users excludes 0, or "within noise"."""
    if difference.significant:
        return "excludes 0"
    if not difference.excludes_zero:
        return "within noise"
    if math.isnan(difference.seed_p):
        return "users only (seed spread unknown: under 2 seeds)"
    return f"users only (within seed spread: Welch p {difference.seed_p:.2g})"


def seed_welch_p(a: np.ndarray, b: np.ndarray, cases: np.ndarray | None = None) -> float:
    """Welch's two-sided t-test p between the per-seed mean AUCs of ``a`` [Sa, U] and ``b`` [Sb, U]."""
    first = [weighted_mean(row, cases) for row in np.atleast_2d(a)]
    second = [weighted_mean(row, cases) for row in np.atleast_2d(b)]
    if min(len(first), len(second)) < 2 or (np.ptp(first) == 0 and np.ptp(second) == 0):
        return math.nan
    return float(stats.ttest_ind(first, second, equal_var=False).pvalue)


def paired_difference(a: np.ndarray, b: np.ndarray, n_resamples: int = N_RESAMPLES, level: float = LEVEL,
                      seed: int = 0, cases: np.ndarray | None = None) -> PairedDifference:
    """``a`` [Sa, U] minus ``b`` [Sb, U] (the same users in the same column order; the seed counts may
    differ): each model's per-user values averaged over its seeds, then the mean difference over users
    with a percentile bootstrap over users in which both models take the same resample (the mean over
    cases with ``cases`` [U])."""
    first, second = seed_mean(a), seed_mean(b)
    if first.shape != second.shape:
        raise ValueError(f"paired difference: {first.shape[0]} users against {second.shape[0]}")
    differences = first - second  # the mean of a resample's differences is the difference of its two means
    low, high = _percentile_interval(differences, n_resamples, level, seed, cases)
    p_value = float(stats.wilcoxon(differences).pvalue) if np.any(differences != 0) else math.nan
    return PairedDifference(weighted_mean(differences, cases), low, high, bool(low > 0 or high < 0), p_value,
                            len(differences), seed_welch_p(a, b, cases))
