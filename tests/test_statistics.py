"""Seed-level comparisons against direct computations (formulas written out here, not the library calls)."""

import math

import numpy as np
import pytest
from scipy import stats

from prism_rec.statistics import (
    MAX_SEEDS,
    decide,
    gap_not_excluded,
    holm,
    min_detectable_difference,
    pooled_std,
    seeds_needed,
    seeds_to_bound,
    welch,
)

A = [0.861, 0.866, 0.858, 0.870, 0.864]
B = [0.851, 0.857, 0.855, 0.849, 0.860]


def test_pooled_std_is_the_formula():
    a, b = np.array(A), np.array(B)
    expected = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / (len(a) + len(b) - 2))
    assert pooled_std(A, B) == pytest.approx(expected, rel=1e-12)
    assert math.isnan(pooled_std([0.8], [0.7]))


def test_welch_interval_and_p_are_the_formulas():
    a, b = np.array(A), np.array(B)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = (a.mean() - b.mean()) / se
    half = stats.t.ppf(0.975, dof) * se
    result = welch(A, B)
    assert result.mean == pytest.approx(a.mean() - b.mean(), abs=1e-15)
    assert (result.low, result.high) == pytest.approx((result.mean - half, result.mean + half), rel=1e-10)
    assert result.p == pytest.approx(2 * stats.t.sf(abs(t), dof), rel=1e-10)


@pytest.mark.parametrize("n_a,n_b", [(5, 5), (3, 3), (5, 3)])
def test_detectable_difference_has_the_power(n_a, n_b):
    """At the detectable difference the two-sided t test (noncentral t, pooled variance) rejects 80% of the time."""
    std = 0.004
    delta = min_detectable_difference(std, n_a, n_b)
    dof = n_a + n_b - 2
    noncentrality = delta / (std * math.sqrt(1 / n_a + 1 / n_b))
    critical = stats.t.ppf(0.975, dof)
    power = stats.nct.sf(critical, dof, noncentrality) + stats.nct.cdf(-critical, dof, noncentrality)
    assert power == pytest.approx(0.8, abs=1e-4)
    assert math.isnan(min_detectable_difference(std, 1, 5)) and math.isnan(min_detectable_difference(0.0, 5, 5))


@pytest.mark.parametrize("std, difference", [(0.004, 0.01), (0.004, -0.006), (0.002, 0.0017), (0.001, 0.01)])
def test_seeds_needed_is_the_first_count_whose_simulated_t_tests_have_the_power(std, difference):
    """Simulated two-sided two-sample t tests (pooled variance, written out) at the returned count reject at
    least 80% of the time and one seed fewer less than that, beyond the simulation's error."""
    n = seeds_needed(std, difference)
    rng = np.random.default_rng(0)

    def rejected(count: int, trials: int = 40000) -> float:
        a = rng.normal(difference, std, (trials, count))
        b = rng.normal(0.0, std, (trials, count))
        pooled = np.sqrt((a.var(axis=1, ddof=1) + b.var(axis=1, ddof=1)) / 2)
        t = (a.mean(axis=1) - b.mean(axis=1)) / (pooled * math.sqrt(2 / count))
        return float(np.mean(np.abs(t) > stats.t.ppf(0.975, 2 * count - 2)))

    assert n >= 2 and rejected(int(n)) > 0.8 - 0.01
    if n > 2:
        assert rejected(int(n) - 1) < 0.8 + 0.01


def test_seeds_needed_edges():
    assert seeds_needed(0.004, 0.1) == 2                          # the fewest a spread can come from
    assert seeds_needed(0.004, 1e-6) == math.inf                  # more than MAX_SEEDS
    normal = 2 * (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) ** 2 / 0.2 ** 2  # large n: the z test's count
    assert normal <= seeds_needed(0.004, 0.004 * 0.2) <= normal + 3 < MAX_SEEDS
    assert math.isnan(seeds_needed(math.nan, 0.01)) and math.isnan(seeds_needed(0.0, 0.01))
    assert math.isnan(seeds_needed(0.004, 0.0))


@pytest.mark.parametrize("std, gap", [(0.004, 0.01), (0.002, 0.0026), (0.003, 0.002)])
def test_seeds_to_bound_is_the_first_count_whose_simulated_intervals_fall_inside_the_gap(std, gap):
    """Simulated seeds of two backbones with no true difference: the pooled t interval (written out) lies inside
    ±gap in at least 80% of the trials at the returned count, and in less at one seed fewer."""
    n = seeds_to_bound(std, gap)
    rng = np.random.default_rng(1)

    def inside(count: int, trials: int = 40000) -> float:
        a, b = rng.normal(0.0, std, (trials, count)), rng.normal(0.0, std, (trials, count))
        pooled = np.sqrt((a.var(axis=1, ddof=1) + b.var(axis=1, ddof=1)) / 2)
        half = stats.t.ppf(0.975, 2 * count - 2) * pooled * math.sqrt(2 / count)
        return float(np.mean(np.abs(a.mean(axis=1) - b.mean(axis=1)) + half <= gap))

    assert n >= 2 and inside(int(n)) > 0.8 - 0.01
    if n > 2:
        assert inside(int(n) - 1) < 0.8 + 0.01
    normal = 2 * (stats.norm.ppf(0.975) + stats.norm.ppf(0.9)) ** 2 / 0.2 ** 2  # large n: the spread known
    assert normal <= seeds_to_bound(std, 0.2 * std) <= normal + 3
    assert seeds_to_bound(std, 1e-3 * std) == math.inf and math.isnan(seeds_to_bound(math.nan, gap))


def test_holm_is_the_step_down_loop():
    p = [0.01, 0.04, 0.03, 0.005, math.nan, 0.5]
    known = [(v, i) for i, v in enumerate(p) if not math.isnan(v)]
    ordered = sorted(known)
    expected, running = {}, 0.0
    for rank, (value, index) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * value))
        expected[index] = running
    adjusted = holm(p)
    assert math.isnan(adjusted[4])
    assert [adjusted[i] for i in sorted(expected)] == pytest.approx([expected[i] for i in sorted(expected)])


def test_decide():
    result = welch(A, B)
    assert decide(result, result.p, gap=0.002, names=("prism", "gdn")) == "prism > gdn"
    assert decide(welch(B, A), result.p, gap=0.002, names=("gdn", "prism")) == "gdn < prism"
    close = welch([0.8601, 0.8603, 0.8599, 0.8600], [0.8600, 0.8602, 0.8601, 0.8598])
    assert decide(close, 1.0, gap=0.002).startswith("equal within ±0.000")
    wide = welch([0.85, 0.87, 0.86], [0.86, 0.84, 0.87])
    assert decide(wide, 1.0, gap=0.002) == "not resolved (a gap of ±0.0020 is not excluded)"
    assert decide(welch([0.8], [0.7]), math.nan, gap=0.01) == "not resolved (seed spread unknown)"
    verdicts = [decide(wide, 1.0, gap=0.002), decide(close, 1.0, gap=0.002), decide(result, result.p, gap=0.002),
                decide(welch([0.8], [0.7]), math.nan, gap=0.01)]
    assert [gap_not_excluded(v) for v in verdicts] == [True, False, False, False]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite"):
        welch([0.8, math.nan], B)
    with pytest.raises(ValueError, match="non-empty"):
        welch([], B)
