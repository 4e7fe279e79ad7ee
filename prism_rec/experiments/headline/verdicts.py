"""The verdicts of the v3 tables: one dataset's family of comparisons, each with a paired interval over test
users whose verdict does not move with the resampling seed, Welch's interval over seeds, the minimum detectable
difference, Holm's correction and the gap of interest.

- ``stable_interval``: the percentile bootstrap over test users of a mean per-user difference [U]. Its bound
  nearest 0 carries Monte-Carlo error; the resamples double (from ``N_START`` to ``N_MOST``) until that bound lies
  more than ``MC_MARGIN`` Monte-Carlo standard errors (batch means over ``MC_BATCHES`` batches) from 0. A bound
  still within that margin at ``N_MOST`` is "at the boundary", which counts as not excluding 0, so no verdict
  hangs on where one resampling seed happened to put a bound.
- ``compare``: a − b for one comparison: its seed-level Welch figures (prism_rec/statistics.py) and that interval.
- ``family``: every comparison of a dataset, Holm-adjusted over the family (the seed-level Welch p-values); the
  interval over users is taken at level 1 − alpha/m (Bonferroni over the family's m comparisons whose seed spread
  is known, the family Holm counts). Verdict: "a > b" (or "<") when the Holm-adjusted p < alpha and the users'
  interval excludes 0 on the same side; otherwise "equal within ±x" when the Welch interval lies inside ±x and x is
  no larger than the gap of interest; else "not resolved", saying why where the seeds separate the two and the
  users' interval does not agree. ``direction`` reads the order a verdict states.
- ``gap_of_interest``: the paper's Table 2 gap of the pair on the dataset's domain; elsewhere (a dataset or a
  backbone outside Table 2) the smallest gap of PRISM to Gated DeltaNet or SASRec over its four domains.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass

import numpy as np

from ... import statistics as seedstats
from .report.tables import PAPER_COLUMNS, PAPER_TABLE2

N_START = 10_000
N_MOST = 160_000
MC_BATCHES = 20  # batch means for the Monte-Carlo error of a bound
MC_MARGIN = 3.0  # a bound this many Monte-Carlo standard errors from 0 decides the verdict
BATCH = 64  # resamples drawn at once: [BATCH, U] indices in memory
PAPER_AUC = {model: values for label, values in PAPER_TABLE2.items()
             for model in re.findall(r"[\w+-]+(?=[,)])", label.split("(", 1)[1]) if "not in" not in label}
FALLBACK_PAIRS = (("prism", "gated_deltanet"), ("prism", "sasrec"))


@dataclass(frozen=True)
class UserInterval:
    """A percentile bootstrap interval over test users: its bounds, the resamples drawn, the Monte-Carlo standard
    error of the bound nearest 0, and whether that bound is at the boundary (within MC_MARGIN errors of 0)."""

    low: float
    high: float
    level: float
    n_resamples: int
    mc_error: float
    at_boundary: bool

    @property
    def side(self) -> int:
        """+1 (or −1) when the interval lies above (below) 0 and is not at the boundary, else 0."""
        if self.at_boundary:
            return 0
        return 1 if self.low > 0 else -1 if self.high < 0 else 0


def _resample_means(values: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` bootstrap means of ``values`` [U] (users drawn with replacement) -> [n]."""
    means = np.empty(n)
    for start in range(0, n, BATCH):
        rows = min(BATCH, n - start)
        means[start:start + rows] = values[rng.integers(0, len(values), size=(rows, len(values)))].mean(axis=1)
    return means


def stable_interval(differences, level: float = 0.95, seed: int = 0, n_start: int = N_START,
                    n_most: int = N_MOST) -> UserInterval:
    """The ``level`` percentile bootstrap interval of the mean of per-user ``differences`` [U], with resamples
    doubled until its verdict is settled (see the module docstring)."""
    values = np.asarray(differences, dtype=np.float64)
    if values.ndim != 1 or len(values) < 2 or not np.isfinite(values).all():
        raise ValueError(f"per-user differences must be [U] finite values with U >= 2, got shape {values.shape}")
    if np.all(values == values[0]):  # every resample has this mean
        return UserInterval(float(values[0]), float(values[0]), level, 0, 0.0, False)
    rng = np.random.default_rng(seed)
    tails = ((1 - level) / 2 * 100, (1 + level) / 2 * 100)
    means = _resample_means(values, n_start, rng)
    while True:
        low, high = np.percentile(means, tails)
        nearest = min((low, high), key=abs)
        which = 0 if nearest == low else 1
        batches = np.array_split(means, MC_BATCHES)
        error = float(np.std([np.percentile(b, tails[which]) for b in batches], ddof=1) / math.sqrt(MC_BATCHES))
        settled = abs(nearest) > MC_MARGIN * error
        if settled or len(means) >= n_most:
            return UserInterval(float(low), float(high), level, len(means), error, not settled)
        means = np.concatenate([means, _resample_means(values, len(means), rng)])


def gap_of_interest(dataset: str, first: str, second: str) -> tuple[float, str]:
    """The size of difference a reader cares about for ``first`` − ``second`` on ``dataset``, and where it comes
    from (see the module docstring)."""
    column = PAPER_COLUMNS.get(dataset)
    if column is not None and first in PAPER_AUC and second in PAPER_AUC:
        return abs(PAPER_AUC[first][column] - PAPER_AUC[second][column]), "paper"
    gaps = [abs(PAPER_AUC[a][c] - PAPER_AUC[b][c]) for a, b in FALLBACK_PAIRS for c in PAPER_COLUMNS.values()]
    return min(gaps), "smallest paper gap"


@dataclass(frozen=True)
class Comparison:
    """a − b on one dataset: seed-level Welch figures, the users' interval, the gap of interest, and (once its
    family is known) the Holm-adjusted p and the verdict."""

    first: str
    second: str
    seeds: seedstats.SeedComparison
    users: UserInterval
    gap: float
    gap_source: str
    adjusted_p: float = math.nan
    verdict: str = ""

    @property
    def gap_open(self) -> bool:
        """Whether the verdict leaves a gap of interest not excluded: what more seeds could settle."""
        return seedstats.gap_not_excluded(self.verdict)

    @functools.cached_property
    def seeds_for_gap(self) -> float:
        """The seeds per backbone with which the seed test (alpha unadjusted) detects the gap of interest at its
        power, these seeds' spread taken as the true one (statistics.seeds_needed: infinity above MAX_SEEDS,
        NaN with the spread unknown)."""
        return seedstats.seeds_needed(self.seeds.std, self.gap)

    @functools.cached_property
    def seeds_to_bound(self) -> float:
        """The seeds per backbone with which the pooled t interval of a zero true difference lies inside ± the gap
        of interest at the power, from these seeds' spread (statistics.seeds_to_bound). The verdict's Welch
        interval is a little wider at the same seeds, so this is a lower bound for "equal within"."""
        return seedstats.seeds_to_bound(self.seeds.std, self.gap)


def compare(first: str, second: str, seeds: seedstats.SeedComparison, per_user_a: np.ndarray,
            per_user_b: np.ndarray, dataset: str, level: float, seed: int = 0,
            gap: tuple[float, str] | None = None) -> Comparison:
    """``first`` − ``second``: the Welch figures of their per-seed test AUCs (``seeds``) and per-user AUC [S, U]
    matrices; ``gap`` (size, source) replaces the paper's gap of interest (:func:`gap_of_interest`) where given."""
    differences = np.atleast_2d(per_user_a).mean(axis=0) - np.atleast_2d(per_user_b).mean(axis=0)
    gap, source = gap_of_interest(dataset, first, second) if gap is None else gap
    return Comparison(first, second, seeds, stable_interval(differences, level, seed), gap, source)


def decide(comparison: Comparison, adjusted_p: float, alpha: float = seedstats.ALPHA) -> str:
    """The verdict of one comparison given its family-adjusted p (see the module docstring)."""
    names = (comparison.first, comparison.second)
    words = seedstats.decide(comparison.seeds, adjusted_p, comparison.gap, alpha, names)
    users, side = comparison.users, 1 if comparison.seeds.mean > 0 else -1
    if math.isfinite(comparison.seeds.p) and adjusted_p < alpha and users.side != side:
        unordered = seedstats.decide(comparison.seeds, 1.0, comparison.gap, alpha, names)  # the rule's "otherwise"
        if not seedstats.gap_not_excluded(unordered):
            return unordered  # equal within ±x
        where = ("at the boundary" if users.at_boundary else "includes 0" if users.side == 0
                 else "excludes 0 on the other side")
        return f"not resolved (seeds separate them; the test users' interval {where})"
    return words


def direction(comparison: Comparison) -> int:
    """+1 where the verdict orders first above second, −1 below, 0 where it orders neither ("equal within",
    "not resolved")."""
    return {f"{comparison.first} > {comparison.second}": 1,
            f"{comparison.first} < {comparison.second}": -1}.get(comparison.verdict, 0)


def family(pairs: list[tuple[str, str]], data: dict[str, tuple[list[float], np.ndarray]], dataset: str,
           alpha: float = seedstats.ALPHA, seed: int = 0) -> list[Comparison]:
    """Every distinct pair of ``pairs`` on ``dataset`` (``data``: model -> (per-seed test AUC, per-user AUC
    [S, U])), Holm-adjusted over the family, with their verdicts."""
    distinct = list(dict.fromkeys(pairs))
    seeds = [seedstats.welch(data[a][0], data[b][0]) for a, b in distinct]
    level = 1 - alpha / max(sum(math.isfinite(s.p) for s in seeds), 1)  # the comparisons Holm's family counts
    comparisons = [compare(a, b, welch, data[a][1], data[b][1], dataset, level, seed)
                   for (a, b), welch in zip(distinct, seeds)]
    adjusted = seedstats.holm([c.seeds.p for c in comparisons], alpha)
    return [dataclasses.replace(c, adjusted_p=p, verdict=decide(c, p, alpha)) for c, p in zip(comparisons, adjusted)]
