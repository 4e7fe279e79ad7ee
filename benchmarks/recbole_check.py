"""The cross-implementation check: RecBole's own SASRec (through prism_rec/recbole_bridge) and this suite's
sasrec on the same split with the same sizes and budget, tuned the same way, both evaluated by this
suite's evaluator; writes results/recbole_check.md (the command that made it at its top).

Tuning, the same for both sides and every dataset, and as headline v3 tunes: each learning rate of ``--lr-grid``
trains on seed 0; where the best of them (highest validation AUC of its best checkpoint, this suite's evaluator
for both sides) is the grid's lowest or highest rate, the grid extends one step of tuning.RATE_LADDER (a factor
of about 3, 1e-4 to 1e-1) beyond it, and so on (tuning.TuningGrid; ``--fixed-grid`` never extends); the rate
is then chosen by the suite's rule (tuning.choose_rate: ties go to the smaller rate; a grid run that failed or
never started is left out of the choice, and not tried again), a choice still at the grid's edge is flagged;
the seeds of ``--seeds`` are reported at that rate.
Both train with their own loss and loop until early stopping (``--patience`` validations without improvement)
or the ``--epochs`` cap, which the report shows beside each best epoch: ours full-softmax cross-entropy over
windows with AdamW, stopping on validation AUC; RecBole's cross-entropy over its augmented prefixes with Adam,
its dropout (0.5), stopping on its validation MRR@10. Sizes (d_model, layers, heads, max_len), batch size, cap
and patience are shared.

Runs are separate processes, ``--jobs`` at once (RecBole's loop is CPU-bound Python: on one GPU under CUDA
MPS, one process a core). The queue holds every seed-0 run of the grid, then the other seeds at every rate
(RecBole's first, the larger dataset first), so that free processes work ahead while the slowest grid run is
still going: once a (dataset, model) has chosen its rate, its queued and running runs at the other rates are
dropped (a running one is stopped) and its runs at the chosen rate go before those working ahead. ``--budget``
seconds bound the command: a run starts only when the time left covers its estimate (the longest seconds per
epoch seen for its dataset and model, times the most epochs a finished run of them took, or ``--expected-
epochs`` before one finished, plus the start-up seen), and a run still going at the end is stopped; the report
lists both. Each finished run is kept in ``--runs-dir``, with the commit of the code that trained it, so the
same command run again (that folder carried back) goes on where this one stopped; the report's header counts
the runs the last call trained and those it reused, and names their commits. (The suite's executor,
prism_rec/experiments/jobs.run_jobs, cannot do this: it stops running jobs only all at once at the deadline, so
a run working ahead at a rate not chosen would hold its process to the end, and its queue is its own, so the
runs at a chosen rate could not move ahead of those working ahead.)

The verdict on ours minus RecBole's is the headline's rule (prism_rec/experiments/headline/verdicts.py) with
``--margin`` as the gap of interest: "better" / "worse" needs Welch's p over the seeds' test AUCs under 0.05
and the paired bootstrap interval over test users on the same side of 0; "as good" needs Welch's interval
over seeds inside ±x with x <= ``--margin``; otherwise "not resolved". The report gives both intervals and
the difference the seeds can detect (prism_rec/statistics.py).

    python benchmarks/recbole_check.py --datasets ml-100k,electronics-gerec --seeds 3 --device cuda \\
        --jobs 14 --expected-epochs 25 --budget 470

(benchmarks/recbole_gpu.sh runs this on the GPU machine.)
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from prism_rec.data.batching import training_windows
from prism_rec.data.sources import load_dataset
from prism_rec.experiments import tuning
from prism_rec.experiments.headline import verdicts
from prism_rec.files import write_atomically
from prism_rec.options import parse_seeds
from prism_rec.paths import RESULTS_DIR
from prism_rec.recbole_bridge.compat import unmet_requirements
from prism_rec.recbole_bridge.run import fit_recbole
from prism_rec.recbole_bridge.split import training_cases
from prism_rec.statistics import ALPHA, POWER
from prism_rec.tracking.bootstrap import LEVEL, bootstrap_mean_ci
from prism_rec.tracking.case_ranks import decode, encode
from prism_rec.tracking.store import git_commit, machine_description
from prism_rec.training.config import TrainConfig
from prism_rec.training.devices import resolve_device
from prism_rec.training.trainer import fit

OURS, THEIRS = "sasrec", "recbole:SASRec"
MODELS = {OURS: fit, THEIRS: fit_recbole}
SHOWN = ("auc", "mrr", "hit_10", "ndcg_10")
POLL_SECONDS = 1.0


@dataclass(frozen=True, order=True)
class Job:
    """One training: a model on a dataset at a seed and learning rate."""

    dataset: str
    model: str
    seed: int
    lr: float

    @property
    def name(self) -> str:
        return f"{self.model.replace(':', '_')}-lr{self.lr:g}-s{self.seed}"

    def path(self, runs_dir: Path, suffix: str = ".json") -> Path:
        return runs_dir / self.dataset / f"{self.name}{suffix}"

    def argument(self) -> str:
        return f"{self.dataset},{self.model},{self.seed},{self.lr!r}"


def parse_job(text: str) -> Job:
    dataset, model, seed, lr = text.split(",")
    return Job(dataset, model, int(seed), float(lr))


def train_one(job: Job, base: TrainConfig, runs_dir: Path) -> None:
    """The worker: train ``job``, appending the time of each validated epoch to its .progress file, and
    write its result to its .json file (test and best-validation metrics, epochs, wall seconds, case ranks, and
    the commit of the code that trained it, as a headline record's: tracking.store.git_commit)."""
    dataset = load_dataset(job.dataset)
    progress = job.path(runs_dir, ".progress")  # its first line, the start, written by start_what_fits

    def on_epoch(epoch: int, row: dict) -> None:
        with progress.open("a") as file:
            file.write(f"{time.time()}\n")

    started = time.perf_counter()
    result = MODELS[job.model](dataset, job.model, replace(base, seed=job.seed, lr=job.lr), on_epoch=on_epoch)
    cases = result.test_case_ranks
    run = {"test": result.test, "valid": result.valid, "best_epoch": result.best_epoch,
           "epochs_run": result.epochs_run, "wall_seconds": time.perf_counter() - started,
           "case_ranks": encode(cases["users"], cases["twice_rank"], cases["n_items"]), "git_commit": git_commit()}
    write_atomically(job.path(runs_dir), json.dumps(run))


@dataclass
class Schedule:
    """The processes of a check (module docstring): what is queued, running, finished and left out."""

    queue: list[Job]
    grid: dict[tuple[str, str], list[Job]]  # (dataset, model) -> its seed-0 runs, one per rate
    expected_epochs: int  # a run's epochs in the estimate before a run of its dataset and model finished
    rates: tuning.TuningGrid  # the start grid and the ladder a choice at its edge extends along
    later_seeds: tuple[int, ...]  # the seeds after seed 0, queued at every rate the grid reaches
    finished: dict[Job, dict] = field(default_factory=dict)
    running: dict[Job, tuple[subprocess.Popen, float]] = field(default_factory=dict)
    chosen: dict[tuple[str, str], float] = field(default_factory=dict)
    left_out: dict[Job, str] = field(default_factory=dict)  # job -> why it has no result
    reused: set[Job] = field(default_factory=set)  # the finished runs an earlier call left in the runs folder

    def seed0_aucs(self, key: tuple[str, str]) -> dict[float, float]:
        """{rate: best validation AUC} of the finished seed-0 runs of ``key``."""
        return {job.lr: self.finished[job]["valid"]["auc"] for job in self.grid[key] if job in self.finished}

    def choose(self) -> None:
        """For every (dataset, model) whose grid runs have all ended: extend its grid one ladder step where the
        best of them is at an edge (tuning.TuningGrid.next_rate), else choose its rate (tuning.choose_rate over
        those that finished), dropping its runs at other rates."""
        for key, runs in self.grid.items():
            if key in self.chosen or any(job not in self.finished and job not in self.left_out for job in runs):
                continue
            by_rate = self.seed0_aucs(key)
            if not by_rate:
                continue
            step = self.rates.next_rate(by_rate)
            if step is not None and step not in {job.lr for job in runs}:  # a failed rate is not tried again
                self.extend(key, step, runs[0].seed)
                continue
            self.chosen[key] = tuning.choose_rate(by_rate, tuple(by_rate))
            for job in [job for job in self.queue if (job.dataset, job.model) == key and job.lr != self.chosen[key]]:
                self.queue.remove(job)
            for job in [job for job in self.running if (job.dataset, job.model) == key
                        and job.lr != self.chosen[key]]:
                self.stop(job, "dropped: its rate was not chosen")
            self.queue.sort(key=self.priority)

    def extend(self, key: tuple[str, str], lr: float, first_seed: int) -> None:
        """Queue ``key``'s seed-0 run at ``lr`` first and its later seeds there to work ahead."""
        grid_run = Job(*key, first_seed, lr)
        self.grid[key].append(grid_run)
        self.queue += [grid_run, *(Job(*key, seed, lr) for seed in self.later_seeds)]
        self.queue.sort(key=self.priority)

    def at_edge(self, key: tuple[str, str]) -> bool:
        """Whether ``key``'s chosen rate is still the lowest or highest of the rates its seed 0 reached (the
        ladder's end, or an extension the budget did not start)."""
        reached = sorted(self.seed0_aucs(key))
        return len(reached) > 1 and self.chosen.get(key) in (reached[0], reached[-1])

    def take_finished(self, runs_dir: Path) -> None:
        """Moves the queued runs whose result an earlier call left in ``runs_dir`` to the finished ones (and the
        reused ones)."""
        for job in list(self.queue):
            if job.path(runs_dir).exists():
                self.finished[job] = json.loads(job.path(runs_dir).read_text())
                self.reused.add(job)
                self.queue.remove(job)

    def priority(self, job: Job) -> int:
        """0 for a grid run, 1 for a run at a chosen rate, 2 for one working ahead."""
        return 0 if job in self.grid[job.dataset, job.model] else 1 if (job.dataset, job.model) in self.chosen else 2

    def stop(self, job: Job, why: str) -> None:
        process, _ = self.running.pop(job)
        process.terminate()
        process.wait()
        self.left_out[job] = why

    def estimate(self, job: Job, runs_dir: Path) -> float:
        """Seconds ``job`` is expected to take (module docstring); 0 when nothing of its kind was seen yet."""
        same = [other for other in (*self.finished, *self.running)
                if (other.dataset, other.model) == (job.dataset, job.model)]
        timings = [np.loadtxt(other.path(runs_dir, ".progress"), ndmin=1) for other in same
                   if other.path(runs_dir, ".progress").is_file()]
        timings = [times for times in timings if len(times) >= 2]
        if not timings:
            return 0.0
        per_epoch = max(float(np.diff(times[1:]).mean()) if len(times) > 2 else times[1] - times[0]
                        for times in timings)
        startup = max(times[1] - times[0] for times in timings)
        epochs = max((self.finished[other]["epochs_run"] for other in same if other in self.finished),
                     default=self.expected_epochs)
        return startup + per_epoch * (epochs - 1)


def initial_schedule(datasets: list, seeds: list[int], rates: list[float], expected_epochs: int,
                     ladder: tuple[float, ...] = tuning.RATE_LADDER) -> Schedule:
    """The queue of the module docstring (``datasets`` as (name, dataset), larger first); ``ladder`` the rates
    a choice at the grid's edge extends along (empty: the grid is fixed)."""
    ordered = sorted(datasets, key=lambda pair: -len(pair[1].items))
    first, later = seeds[0], seeds[1:]
    grid = {(name, model): [Job(name, model, first, lr) for lr in rates] for name, _ in ordered for model in MODELS}
    queue = [job for model in (THEIRS, OURS) for name, _ in ordered for job in grid[name, model]]
    queue += [Job(name, model, seed, lr) for model in (THEIRS, OURS) for name, _ in ordered for seed in later
              for lr in rates]
    return Schedule(queue, grid, expected_epochs, tuning.TuningGrid(tuple(rates), ladder), tuple(later))


def run_schedule(schedule: Schedule, argv: list[str], runs_dir: Path, jobs: int, deadline: float) -> None:
    """Run the queue ``jobs`` processes at once until it is empty or ``deadline`` (time.time()) passes."""
    schedule.take_finished(runs_dir)
    while True:
        for job, (process, _) in list(schedule.running.items()):
            if process.poll() is not None:
                del schedule.running[job]
                if process.returncode == 0 and job.path(runs_dir).exists():
                    schedule.finished[job] = json.loads(job.path(runs_dir).read_text())
                    report_run(job, schedule.finished[job])
                else:
                    schedule.left_out[job] = f"failed (exit {process.returncode}; {job.path(runs_dir, '.log')})"
        schedule.choose()
        schedule.take_finished(runs_dir)  # the runs of a grid just extended that an earlier call finished
        if time.time() >= deadline:
            for job in list(schedule.running):
                schedule.stop(job, "stopped at the --budget")
        start_what_fits(schedule, argv, runs_dir, jobs, deadline)
        if not schedule.running:
            for job in schedule.queue:
                schedule.left_out[job] = "not started: the --budget left less than its estimate"
            schedule.queue.clear()
            schedule.choose()  # a grid whose extension did not start chooses among the rates it reached
            return
        time.sleep(POLL_SECONDS)


def start_what_fits(schedule: Schedule, argv: list[str], runs_dir: Path, jobs: int, deadline: float) -> None:
    """Start queued runs, in order, while processes are free, skipping those the time left cannot cover."""
    for job in list(schedule.queue):
        if len(schedule.running) >= jobs:
            return
        if time.time() + schedule.estimate(job, runs_dir) > deadline:
            continue
        schedule.queue.remove(job)
        job.path(runs_dir).parent.mkdir(parents=True, exist_ok=True)
        job.path(runs_dir, ".progress").write_text(f"{time.time()}\n")
        with job.path(runs_dir, ".log").open("w") as log:
            process = subprocess.Popen([sys.executable, __file__, *argv, "--run", job.argument()], stdout=log,
                                       stderr=subprocess.STDOUT)
        schedule.running[job] = process, time.time()


def report_run(job: Job, run: dict) -> None:
    print(f"{job.dataset} {job.model} lr {job.lr:g} seed {job.seed}: valid AUC {run['valid']['auc']:.4f} test AUC "
          f"{run['test']['auc']:.4f} best epoch {run['best_epoch']}/{run['epochs_run']} {run['wall_seconds']:.0f} s",
          flush=True)


def per_user_auc(entry: dict, n_users: int) -> np.ndarray:
    """Per-user test AUC [U] of a run's case ranks (one case a user, check_one_case_a_user), users in id order."""
    ranks = decode(entry)
    kept = np.bincount(ranks.users, minlength=n_users) > 0
    return np.bincount(ranks.users, weights=ranks.auc(), minlength=n_users)[kept]


def check_one_case_a_user(name: str, dataset) -> None:
    """Refuses a dataset whose split gives a user several test cases: the verdict's bootstrap over test users
    (headline/verdicts.stable_interval) takes one value a user."""
    users = dataset.test_cases[:, 0]
    if len(np.unique(users)) < len(users):
        raise SystemExit(f"option --datasets: {name} (split {dataset.options['split']}) has users with several "
                         "test cases; the check compares one test case a user (a leave-one-out split)")


def compare_sides(seeds_ours, seeds_theirs, per_user_ours: np.ndarray, per_user_theirs: np.ndarray,
                  margin: float) -> verdicts.Comparison:
    """Ours minus RecBole's (module docstring): per-seed test AUCs and per-user test AUC [S, U] of each side,
    ``margin`` the gap of interest; a family of one comparison, so its p needs no adjustment."""
    comparison = verdicts.compare(OURS, THEIRS, verdicts.seedstats.welch(seeds_ours, seeds_theirs), per_user_ours,
                                  per_user_theirs, "", LEVEL, gap=(margin, "--margin"))
    return replace(comparison, adjusted_p=comparison.seeds.p, verdict=verdicts.decide(comparison, comparison.seeds.p))


def outcome(comparison: verdicts.Comparison) -> str:
    """The verdict of :func:`compare_sides` in the check's words: "better", "worse", "as good (...)" or "not
    resolved (...)"."""
    words = comparison.verdict
    if words.startswith("equal within"):
        return f"as good ({words} AUC over seeds, inside the --margin ±{comparison.gap:g})"
    return {f"{OURS} > {THEIRS}": "better", f"{OURS} < {THEIRS}": "worse"}.get(words, words)


def converged_outcome(comparison: verdicts.Comparison, capped: int, n_runs: int, cap: int) -> str:
    """:func:`outcome`, or "not resolved" where ``capped`` of the ``n_runs`` compared runs ended at the epoch
    cap rather than by early stopping (the capped reading said too)."""
    reading = outcome(comparison)
    if not capped:
        return reading
    return (f"not resolved: {capped} of the {n_runs} runs compared reached the epoch cap ({cap}) instead of "
            f"stopping early (the capped runs read: {reading})")


def verdict_sentence(comparison: verdicts.Comparison, capped: int, n_runs: int, cap: int) -> str:
    """The report's sentence on whether our SASRec is as good as RecBole's: both intervals, the detectable
    difference and the verdict."""
    seeds, users = comparison.seeds, comparison.users
    known = math.isfinite(seeds.p)
    welch = (f"{1 - ALPHA:.0%} Welch interval over seeds ({seeds.n_a} and {seeds.n_b}) [{seeds.low:+.4f}, "
             f"{seeds.high:+.4f}], p {seeds.p:.3g}" if known
             else f"Welch interval over seeds ({seeds.n_a} and {seeds.n_b}) n/a: seed spread unknown")
    detectable = f"{seeds.detectable:.4f}" if math.isfinite(seeds.detectable) else "n/a"
    return (f"**Ours minus RecBole's test AUC: {seeds.mean:+.4f}; {welch}; {users.level:.0%} paired bootstrap "
            f"interval over test users [{users.low:+.4f}, {users.high:+.4f}] ({users.n_resamples:,} resamples"
            f"{', at the boundary' if users.at_boundary else ''}); difference the seeds detect ({POWER:.0%} power, "
            f"α {ALPHA}): {detectable}; gap of interest (--margin) {comparison.gap:g}: "
            f"{converged_outcome(comparison, capped, n_runs, cap)}.**")


def steps_per_epoch(dataset, config: TrainConfig) -> dict[str, int]:
    """Optimizer steps per epoch of each model: ours over training windows of max_len + 1 items, RecBole's
    over one sequence per training target (split.training_cases)."""
    return {OURS: math.ceil(len(training_windows(dataset, config.max_len)) / config.batch_size),
            THEIRS: math.ceil(len(training_cases(dataset)) / config.batch_size)}


def grid_table(name: str, schedule: Schedule) -> list[str]:
    lines = ["| model | lr | valid AUC (seed 0) | best epoch / run | wall s |", "|---|---|---|---|---|"]
    for model in MODELS:
        for job in schedule.grid[name, model]:
            run = schedule.finished.get(job)
            chosen = "" if schedule.chosen.get((name, model)) != job.lr else \
                " (chosen, at the grid's edge)" if schedule.at_edge((name, model)) else " (chosen)"
            cells = ([f"{run['valid']['auc']:.4f}", f"{run['best_epoch']}/{run['epochs_run']}",
                      f"{run['wall_seconds']:.0f}"] if run else [schedule.left_out.get(job, "—"), "", ""])
            lines.append(f"| {model} | {job.lr:g}{chosen} | " + " | ".join(cells) + " |")
    return lines


def chosen_runs(name: str, schedule: Schedule, seeds: list[int]) -> dict[str, dict[int, dict]]:
    """{model: {seed: run}} of the finished runs at each model's chosen rate."""
    runs = {}
    for model in MODELS:
        lr = schedule.chosen.get((name, model))
        runs[model] = {seed: schedule.finished[job] for seed in seeds
                       if (job := Job(name, model, seed, lr)) in schedule.finished} if lr is not None else {}
    return runs


def result_lines(dataset, runs: dict, seeds: list[int], cap: int) -> tuple[list[str], dict]:
    """The table at the chosen rates over ``seeds`` (finished by both), and each model's per-user AUC [S, U]."""
    lines = ["| model | " + " | ".join(SHOWN) + " | AUC 95% interval (test users) | best epoch / run per seed "
             f"(cap {cap}) | wall s per run |", "|---" * (len(SHOWN) + 4) + "|"]
    per_user = {}
    for model, by_seed in runs.items():
        chosen = [by_seed[seed] for seed in seeds]
        per_user[model] = np.stack([per_user_auc(run["case_ranks"], dataset.n_users) for run in chosen])
        low, high = bootstrap_mean_ci(per_user[model])
        means = [np.mean([run["test"][key] for run in chosen]) for key in SHOWN]
        epochs = ", ".join(f"{run['best_epoch']}/{run['epochs_run']}" + (" (cap)" if run["epochs_run"] >= cap else "")
                           for run in chosen)
        wall = np.mean([run["wall_seconds"] for run in chosen])
        lines.append(f"| {model} | " + " | ".join(f"{value:.4f}" for value in means)
                     + f" | [{low:.4f}, {high:.4f}] | {epochs} | {wall:.0f} |")
    return lines, per_user


def dataset_section(name: str, dataset, schedule: Schedule, seeds: list[int], config: TrainConfig,
                    margin: float) -> str:
    """The Markdown section of ``name``: the rate grid, the results at the chosen rates over the seeds both
    models finished, the comparison and its verdict, and the runs left out."""
    lines = [f"## {name}: {dataset.n_users:,} users, {dataset.n_items:,} items, split {dataset.options['split']}",
             "", "Rate grid (seed 0; the rate with the best validation AUC is chosen, ties to the smaller):", "",
             *grid_table(name, schedule), ""]
    runs = chosen_runs(name, schedule, seeds)
    common = sorted(set.intersection(*(set(by_seed) for by_seed in runs.values())))
    if not common:
        return "\n".join([*lines, "No seed finished by both models at their chosen rates.", *left_out_lines(name,
                                                                                                          schedule)])
    table, per_user = result_lines(dataset, runs, common, config.epochs)
    compared = [by_seed[seed] for by_seed in runs.values() for seed in common]
    capped = sum(run["epochs_run"] >= config.epochs for run in compared)
    comparison = compare_sides(*([runs[model][seed]["test"]["auc"] for seed in common] for model in (OURS, THEIRS)),
                               per_user[OURS], per_user[THEIRS], margin)
    steps = steps_per_epoch(dataset, config)
    chosen = ", ".join(f"{model} {schedule.chosen[name, model]:g}" for model in MODELS)
    lines += [f"At the chosen rates ({chosen}), seed(s) {', '.join(map(str, common))}:", "", *table, "",
              verdict_sentence(comparison, capped, len(compared), config.epochs), "",
              f"Optimizer steps per epoch at batch {config.batch_size}: ours {steps[OURS]:,} (every training target "
              f"once, in windows of {config.max_len + 1}), RecBole's {steps[THEIRS]:,} (one sequence per target). "
              + wall_note(name, schedule), *left_out_lines(name, schedule)]
    return "\n".join(lines) + "\n"


def wall_note(name: str, schedule: Schedule) -> str:
    """Each side's training seconds on ``name`` in all (grid and seeds, dropped runs not counted)."""
    totals = {model: sum(run["wall_seconds"] for job, run in schedule.finished.items()
                         if (job.dataset, job.model) == (name, model)) for model in MODELS}
    return (f"Wall seconds of the finished runs in all: ours {totals[OURS]:.0f}, RecBole's {totals[THEIRS]:.0f} "
            "(each run shared the machine with the other runs going at the time).")


def left_out_lines(name: str, schedule: Schedule) -> list[str]:
    rows = [f"- {job.model} lr {job.lr:g} seed {job.seed}: {why}" for job, why in sorted(schedule.left_out.items())
            if job.dataset == name and not why.startswith("dropped")]
    dropped = sum(1 for job, why in schedule.left_out.items() if job.dataset == name and why.startswith("dropped"))
    note = ["", f"Stopped when the rate was chosen: {dropped} run(s) working ahead at a rate not chosen."]
    return (["", "Runs without a result:", *rows] if rows else []) + (note if dropped else [])


def runs_sentence(schedule: Schedule) -> str:
    """How many of the finished runs this call trained and how many it reused from the runs folder, and the
    commits of the code that trained them (a run finished before run records carried one: "not recorded")."""
    commits = collections.Counter(run.get("git_commit", "not recorded") for run in schedule.finished.values())
    order = sorted(commits.items(), key=lambda item: (-item[1], item[0] == "not recorded", item[0]))  # most first
    code = ", ".join(f"{commit} ({count} run{'' if count == 1 else 's'})" for commit, count in order)
    return (f"Runs: {len(schedule.finished) - len(schedule.reused)} trained by this call, {len(schedule.reused)} "
            f"reused from --runs-dir (finished by earlier calls); the code that trained them: {code or 'none'}.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="ml-100k,electronics-gerec", help="comma list")
    parser.add_argument("--seeds", default="3", help="a count N (seeds 0..N-1) or a comma list; the first tunes")
    parser.add_argument("--lr-grid", default=",".join(f"{rate:g}" for rate in tuning.LR_GRID),
                        help="the learning-rate grid it starts from: increasing comma list on tuning.RATE_LADDER")
    parser.add_argument("--fixed-grid", action="store_true", help="never extend the grid beyond its edges")
    parser.add_argument("--epochs", type=int, default=50, help="the epoch cap")
    parser.add_argument("--expected-epochs", type=int, help="a run's epochs in the time estimate before a run of "
                        "its dataset and model finished (default: the cap)")
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=2)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (separate processes)")
    parser.add_argument("--margin", type=float, default=0.005,
                        help="the gap of interest: an AUC difference within it counts as equally good")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "recbole_check.md")
    parser.add_argument("--runs-dir", type=Path, default=Path("build/recbole_check"),
                        help="each finished run is kept here; a later command reuses it")
    parser.add_argument("--budget", type=float, default=math.inf, help="seconds the command may take")
    parser.add_argument("--run", type=parse_job, help=argparse.SUPPRESS)  # a worker's one run
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.jobs < 1 or args.threads < 1 or args.budget <= 0 or args.margin <= 0:
        raise SystemExit("options --jobs and --threads must be >= 1, --budget and --margin > 0")
    try:
        rates = list(tuning.parse_grid(args.lr_grid))
        ladder = () if args.fixed_grid else tuning.RATE_LADDER
        tuning.TuningGrid(tuple(rates), ladder)  # start rates off the ladder are refused, naming --lr-grid
    except ValueError as error:
        raise SystemExit(str(error)) from None
    unmet = unmet_requirements()
    if unmet:
        raise SystemExit(f"the RecBole check needs {', '.join(unmet)} (prism_rec/recbole_bridge/compat.py says why)")
    torch.set_num_threads(args.threads)
    base = TrainConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, max_len=args.max_len,
                       batch_size=args.batch_size, epochs=args.epochs, patience=args.patience, device=args.device,
                       progress=False)
    base.validate()
    if args.run is not None:
        return train_one(args.run, base, args.runs_dir)
    deadline, seeds = time.time() + args.budget, parse_seeds(args.seeds)
    datasets = [(name, load_dataset(name)) for name in args.datasets.split(",")]  # caches made before any run
    for name, dataset in datasets:
        check_one_case_a_user(name, dataset)
    schedule = initial_schedule(datasets, seeds, rates, args.expected_epochs or args.epochs, ladder)
    started = time.perf_counter()
    run_schedule(schedule, argv, args.runs_dir, args.jobs, deadline)
    command = "python benchmarks/recbole_check.py " + shlex.join(argv)
    device = resolve_device(args.device)
    sections = [dataset_section(name, dataset, schedule, seeds, base, args.margin) for name, dataset in datasets]
    text = ("# RecBole's SASRec and ours on the same split\n\n"
            f"Made by `{command}` in {time.perf_counter() - started:.0f} s on {machine_description(device)}, torch "
            f"{torch.__version__}, this call's code {git_commit()}, with up "
            f"to {args.jobs} runs at once (benchmarks/recbole_check.py says how each side trains and how both are "
            f"tuned). Learning rates from {', '.join(f'{lr:g}' for lr in rates)}"
            f"{'' if args.fixed_grid else ', extended along tuning.RATE_LADDER beyond an edge the choice lands on'}"
            f"; patience {args.patience}, epoch cap "
            f"{args.epochs}, d_model {args.d_model}, {args.n_layers} layers, {args.n_heads} heads, max_len "
            f"{args.max_len}, batch {args.batch_size}. Test metrics of this suite's evaluator: full ranking over all "
            f"items, history kept. {runs_sentence(schedule)}\n\n"
            + "\n".join(sections))
    write_atomically(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
