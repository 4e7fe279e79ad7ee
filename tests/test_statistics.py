"""Seed-level comparisons against direct computations (formulas written out here, not the library calls)."""

import math

import numpy as np
import pytest
from scipy import stats

from prism_rec.statistics import decide, holm, min_detectable_difference, pooled_std, welch

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


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite"):
        welch([0.8, math.nan], B)
    with pytest.raises(ValueError, match="non-empty"):
        welch([], B)
