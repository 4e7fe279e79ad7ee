"""Bootstrap intervals and paired differences over test users (prism_rec/tracking/bootstrap.py) on cases with
known answers."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from prism_rec.tracking.bootstrap import bootstrap_mean_ci, paired_difference, seed_mean, verdict


def test_the_interval_is_scipys_percentile_bootstrap_of_the_seed_means():
    rng = np.random.default_rng(1)
    per_user = rng.uniform(0.4, 1.0, size=(3, 40))
    ours = bootstrap_mean_ci(per_user, n_resamples=2000, seed=7)
    theirs = scipy_stats.bootstrap((per_user.mean(0),), np.mean, n_resamples=2000, method="percentile",
                                   rng=np.random.default_rng(7)).confidence_interval
    assert ours == pytest.approx((theirs.low, theirs.high), abs=1e-12)


def test_the_interval_agrees_with_a_plain_numpy_bootstrap():
    """An independent resampling of the same users: the two intervals differ by Monte Carlo error only."""
    rng = np.random.default_rng(2)
    values = rng.uniform(0.0, 1.0, size=200)
    draws = np.random.default_rng(3).integers(0, len(values), size=(10_000, len(values)))
    plain = np.percentile(values[draws].mean(axis=1), [2.5, 97.5])
    low, high = bootstrap_mean_ci(values)
    assert low == pytest.approx(plain[0], abs=0.004) and high == pytest.approx(plain[1], abs=0.004)


def test_it_is_deterministic_given_the_seed():
    per_user = np.random.default_rng(4).uniform(size=(2, 50))
    assert bootstrap_mean_ci(per_user, seed=3) == bootstrap_mean_ci(per_user, seed=3)
    assert bootstrap_mean_ci(per_user, seed=3) != bootstrap_mean_ci(per_user, seed=4)
    assert paired_difference(per_user, per_user[::-1] * 0.9,
                             seed=5) == paired_difference(per_user, per_user[::-1] * 0.9, seed=5)


def test_coverage_on_a_normal_sample_is_near_the_level():
    """Over 200 samples of 100 users from N(0.7, 0.1), the 95% interval holds the true mean about 95% of the time."""
    rng = np.random.default_rng(5)
    held = sum(low <= 0.7 <= high for low, high in
               (bootstrap_mean_ci(rng.normal(0.7, 0.1, size=100), n_resamples=1000, seed=i) for i in range(200)))
    assert 0.88 <= held / 200 <= 0.99


def test_identical_models_differ_by_zero_within_noise():
    per_user = np.random.default_rng(6).uniform(size=(3, 80))
    same = paired_difference(per_user, per_user.copy())
    assert (same.mean, same.low, same.high, same.excludes_zero, same.n_users) == (0.0, 0.0, 0.0, False, 80)
    assert math.isnan(same.wilcoxon_p)
    shuffled_seeds = paired_difference(per_user, per_user[[2, 0, 1]])  # the same seed means
    assert shuffled_seeds.mean == pytest.approx(0.0, abs=1e-15) and not shuffled_seeds.excludes_zero


def test_two_noisy_copies_of_one_model_give_an_interval_around_zero():
    rng = np.random.default_rng(7)
    base = rng.uniform(0.5, 0.9, size=300)
    first, second = base + rng.normal(0, 0.02, size=(3, 300)), base + rng.normal(0, 0.02, size=(3, 300))
    result = paired_difference(first, second)
    assert result.low < 0 < result.high and not result.excludes_zero and result.wilcoxon_p > 0.01


def test_a_constant_shift_is_that_shift_and_excludes_zero():
    per_user = np.random.default_rng(8).uniform(0.3, 0.8, size=(2, 60))
    result = paired_difference(per_user + 0.05, per_user[:1])  # 2 seeds against 1: seed means, then pairs
    expected = 0.05 + per_user.mean(0).mean() - per_user[0].mean()
    assert result.mean == pytest.approx(expected, abs=1e-12)
    shifted = paired_difference(per_user + 0.05, per_user)
    assert (shifted.mean, shifted.low, shifted.high) == pytest.approx((0.05, 0.05, 0.05), abs=1e-12)
    assert shifted.excludes_zero and math.isnan(shifted.wilcoxon_p) is False and shifted.wilcoxon_p < 1e-6


def test_a_small_real_gap_is_found_and_the_wilcoxon_p_is_scipys():
    rng = np.random.default_rng(9)
    b = rng.uniform(0.5, 0.9, size=(3, 500))
    a = b + 0.01 + rng.normal(0, 0.03, size=(3, 500))
    result = paired_difference(a, b)
    assert result.excludes_zero and result.low > 0 and result.low < result.mean < result.high
    assert result.wilcoxon_p == scipy_stats.wilcoxon(a.mean(0) - b.mean(0)).pvalue


def test_bad_shapes_and_values_are_refused():
    assert seed_mean(np.array([0.5, 0.7])).tolist() == [0.5, 0.7]
    with pytest.raises(ValueError, match="80 users against 79"):
        paired_difference(np.zeros((1, 80)), np.zeros((1, 79)))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_mean_ci(np.array([[0.5, np.nan]]))
    with pytest.raises(ValueError, match="shape"):
        bootstrap_mean_ci(np.zeros((0, 5)))


def test_users_with_several_cases_are_resampled_whole_and_weighted_by_their_cases():
    """A time split: per-user means of unequal case counts. The interval is a cluster bootstrap of the mean
    over cases, checked against a plain numpy resampling of users."""
    rng = np.random.default_rng(6)
    cases = rng.integers(1, 30, size=150)
    per_user = rng.uniform(0.3, 1.0, size=150) + 0.2 * (cases > 15)  # heavy users score higher
    case_mean = (per_user * cases).sum() / cases.sum()
    draws = np.random.default_rng(8).integers(0, len(cases), size=(10_000, len(cases)))
    plain = np.percentile((per_user * cases)[draws].sum(axis=1) / cases[draws].sum(axis=1), [2.5, 97.5])
    low, high = bootstrap_mean_ci(per_user, cases=cases)
    assert low < case_mean < high and per_user.mean() < low  # the unweighted mean falls outside
    assert low == pytest.approx(plain[0], abs=0.004) and high == pytest.approx(plain[1], abs=0.004)
    difference = paired_difference(per_user, per_user - 0.01, cases=cases)
    assert difference.mean == pytest.approx(0.01) and difference.excludes_zero


def test_a_gap_within_the_seed_spread_is_users_only():
    """A shift that every test user shows but that the seeds' own spread swamps: the interval over users
    excludes 0, Welch's t-test over the per-seed means does not reject, so the difference is not significant;
    with one seed a side the seed spread is unknown; a shift far beyond it is significant."""
    rng = np.random.default_rng(0)
    users = rng.uniform(0.4, 0.9, size=500)
    noisy = np.stack([users + offset for offset in (0.00, 0.02, -0.02)])  # seeds that move every user together
    shifted = np.stack([users + 0.004 + offset for offset in (0.01, -0.015, 0.005)])
    difference = paired_difference(shifted, noisy)
    assert difference.excludes_zero and not difference.significant
    welch = scipy_stats.ttest_ind(shifted.mean(1), noisy.mean(1), equal_var=False)
    assert difference.seed_p == pytest.approx(welch.pvalue)
    assert verdict(difference).startswith("users only (within seed spread: Welch p ")
    single = paired_difference(shifted[:1], noisy[:1])
    assert math.isnan(single.seed_p) and verdict(single) == "users only (seed spread unknown: under 2 seeds)"
    far = paired_difference(noisy + 0.2, noisy)
    assert far.significant and verdict(far) == "excludes 0"
    assert verdict(paired_difference(noisy, noisy)) == "within noise"
