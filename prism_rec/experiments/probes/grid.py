"""The probes v2 grid, in the order it is run: 3 seeds, both profiles, every task, the eight
models, and a length sweep of local XOR.

Priority (``grid_runs``; each tier seed-outermost, so a whole seed of a tier finishes before the next):
1. ``paper`` profile, the models that stand for the paper's three Table 4 columns (``PAPER_COLUMNS``:
   the authors' probe Transformer, Gated DeltaNet for linear attention, PRISM at L = 2), every task;
2. the same at the ``authors-code`` profile (the settings the authors' script ran);
3. local XOR at lengths ``SWEEP_LENGTHS`` (``paper`` profile otherwise) for ``SWEEP_MODELS``;
4. the other models (``OTHER_MODELS``) at ``paper``, then 5. at ``authors-code``.
A run listed twice (the sweep at length 128 is a grid run) is kept once, at its first place.
"""

from __future__ import annotations

from dataclasses import dataclass

from .manifest import run_identity
from .settings import PROFILES, ProbeSettings, settings_for
from .tasks import TASKS

SEEDS = (0, 1, 2)
# our model standing for each column of the paper's Table 4 (Transformer, linear attention, PRISM)
PAPER_COLUMNS = ("transformer-authors-probe", "gated_deltanet", "prism:L=2")
OTHER_MODELS = ("transformer++", "sasrec", "mamba2", "prism-L0", "prism:L=3")
TABLE_MODELS = ("transformer-authors-probe", "transformer++", "sasrec", "gated_deltanet", "prism-L0", "prism:L=2",
                "prism:L=3", "mamba2")  # column order of the report
SWEEP_TASK, SWEEP_PROFILE = "local_xor", "paper"
SWEEP_MODELS = ("gated_deltanet", "prism:L=2", "transformer++")
SWEEP_LENGTHS = (8, 16, 32, 64, 128)


@dataclass(frozen=True)
class ProbeRun:
    """One planned training: task, model spec, seed, the profile it belongs to and its full settings."""

    task: str
    model: str
    seed: int
    profile: str
    settings: ProbeSettings

    @property
    def identity(self) -> str:
        return run_identity(self.task, self.model, self.seed, self.settings)

    @property
    def label(self) -> str:
        length = f"/T{self.settings.seq_len}" if self.task == SWEEP_TASK and self.profile == SWEEP_PROFILE else ""
        return f"{self.profile}/{self.task}{length}/{self.model}/s{self.seed}"


def product_runs(tasks, models, seeds, profile: str, overrides: dict | None = None) -> list[ProbeRun]:
    """Every (task, model, seed) at ``profile`` (then ``overrides``), seed outermost."""
    return [ProbeRun(task, model, seed, profile, settings_for(profile, task, overrides))
            for seed in seeds for task in tasks for model in models]


def sweep_runs(seeds=SEEDS) -> list[ProbeRun]:
    """The local XOR length sweep, seed outermost, short lengths first."""
    return [run for seed in seeds for length in SWEEP_LENGTHS
            for run in product_runs([SWEEP_TASK], SWEEP_MODELS, [seed], SWEEP_PROFILE, {"seq_len": length})]


def grid_runs() -> list[ProbeRun]:
    """The whole v2 grid in priority order (module docstring), each identity once."""
    tiers = [product_runs(TASKS, PAPER_COLUMNS, SEEDS, profile) for profile in PROFILES]
    tiers.append(sweep_runs())
    tiers += [product_runs(TASKS, OTHER_MODELS, SEEDS, profile) for profile in PROFILES]
    runs = {}
    for run in (run for tier in tiers for run in tier):
        runs.setdefault(run.identity, run)
    return list(runs.values())
