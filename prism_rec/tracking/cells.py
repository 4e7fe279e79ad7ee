"""The one table model of the results: a cell is one (dataset, model) row of a table, its runs in seed
order with the seeds expected, their test-metric mean and sample std over seeds, and the 95% bootstrap
interval over test users of the seed-averaged per-user AUC where every run has per-user results.

The local tables and bench's comparison (tables.py, runs.py), the headline report
(experiments/headline/report/) and the split study (experiments/split_study.py) build their rows from cells
and write their counts with :func:`seeds_text` and :func:`runs_label`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from ..registry import trains
from .bootstrap import N_RESAMPLES, bootstrap_mean_ci


@dataclass
class Cell:
    """One (dataset, model) of a table: its runs (dicts with ``test_<metric>``) in seed order."""

    dataset: str
    model: str
    runs: list[dict]
    expected: int  # the seeds the table asks for
    waiting: str = ""  # why a cell without runs has none yet
    per_user: np.ndarray | None = None  # [runs, users] in the dataset's user order; None unless every run has it
    ci: tuple[float, float] | None = None
    cases: np.ndarray | None = None  # [users] test cases per user, where the mean is over cases (time split)

    @property
    def aucs(self) -> list[float]:
        return self.values("auc")

    @property
    def mean(self) -> float:
        return self.metric_mean("auc")

    @property
    def std(self) -> float:
        return self.metric_std("auc")

    def values(self, metric: str) -> list[float]:
        return [float(run[f"test_{metric}"]) for run in self.runs]

    def metric_mean(self, metric: str) -> float:
        return statistics.fmean(self.values(metric))

    def metric_std(self, metric: str) -> float:
        """The sample std over the runs; NaN for one run."""
        return statistics.stdev(self.values(metric)) if len(self.runs) > 1 else math.nan

    def interval(self, n_resamples: int = N_RESAMPLES) -> tuple[float, float]:
        """The 95% bootstrap interval over test users of the seed-averaged per-user AUC (``per_user``)."""
        return bootstrap_mean_ci(self.per_user, n_resamples=n_resamples, cases=self.cases)


def seeds_text(aucs: list[float], expected: int) -> str:
    """mean ± sample std (n) of the test AUC of a cell's seeds, saying "n of expected" when some are missing."""
    count = f"{len(aucs)}" if len(aucs) == expected else f"{len(aucs)} of {expected}"
    if len(aucs) == 1:
        return f"{aucs[0]:.4f} ({count} seed{'s' if expected > 1 else ''})"
    return f"{statistics.fmean(aucs):.4f} ± {statistics.stdev(aucs):.4f} ({count})"


def runs_label(model: str, n_seeds: int) -> str:
    """How many runs a table row or bar averages: "deterministic, 1 run" for a recommender that does not
    train (registry.trains), which runs once; else "n = N seed(s)"."""
    if n_seeds == 1 and not trains(model):
        return "deterministic, 1 run"
    return f"n = {n_seeds} seed{'s' if n_seeds > 1 else ''}"
