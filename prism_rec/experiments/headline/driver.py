"""The headline benchmark (protocol "headline-v2"): every registered backbone on the real subsets, its
learning rate tuned on seed 0, 3 seeds at the chosen rate, on one GPU or several. ``--protocol v3``
(headline/v3.py) trains its successor through the same campaign: a rate grid that extends per cell to an
interior optimum, 5 seeds, a second width preset, the matching v2 runs reused.

``prism-rec headline run --out DIR`` trains the grid through a campaign (campaign.py): N worker processes
sharing one device, or several (``--device cuda:0,cuda:1``: worker i on the i-th, cyclically), or the
workers of a Dask cluster (``--executor dask``, docs/cluster.md), where each run writes a checkpoint after
every epoch to ``--checkpoints`` (default DIR/checkpoints) and resumes from it on another worker if its
own dies. The grid follows tuning.py:
seed 0 of every base backbone at every rate of ``--lr-grid``; as soon as a base's grid is complete (in
this call or an earlier one), its other seeds at the chosen rate and its presets' seeds (``prism-*`` take
prism's rate) join the queue; ``pop`` runs once (seed 0; nothing to tune). Each finished run is appended
to ``DIR/headline.records.jsonl`` (a full run record, see records.py), ``DIR/headline_v2_manifest.jsonl``
(one line: keys, protocol, rate, settings hash, final metrics, cost) and
``DIR/headline_v2_case_ranks.jsonl`` (its per-test-user ranks, case_ranks.py). Runs already in that
manifest with the same settings are skipped, so a later call over a copy of the manifest continues the
grid. Jobs go tuning runs first, then the runs at chosen rates, longest-first within each (the wall time
seen earlier for the same cell, carried over from the other compile modes seen where its own was not; else
that of the same backbone and width on another dataset, scaled by the two datasets' ratio over the models
seen on both; else interactions x backbone parameters scaled by the times seen), so
the short ones fill the end of a budget. With ``--budget`` seconds
a job starts only when that estimate (once any time has been seen), corrected by how long this call's
finished runs of the same backbone, or of the same kind of estimate, took against theirs, ends before
the deadline; jobs still running at it are abandoned,
unrecorded. Manifest lines say how the runs shared the GPU (``gpu_sharing``: "mps" when the worker ran
as a client of an NVIDIA MPS server, which lets kernels of several processes run at once).

``merge OUT A B`` joins manifests (or case-ranks files) of several calls, each record once.
``import DIR`` logs the records under DIR (a folder or one records file) into the MLflow store;
``tables`` writes results/v2/README.md and results/<dataset>/auc.md, .csv, .png and pareto.png from the v2
manifest and case-ranks files alone (headline/report/), never from the store; ``tables --protocol v3`` writes
the results front page results/README.md and its detail page results/headline_v3.md from the v3 manifest and
both case-ranks files (headline/front_page.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import time
import typing
import uuid
from dataclasses import dataclass
from pathlib import Path

from ... import registry
from ...data.sources import load_dataset
from ...errors import OptionError
from ...files import read_jsonl, write_jsonl
from ...options import check_ranges, parse_on_off, resolve_models
from ...paths import RESULTS_DIR
from ...tracking.records import RECORDS_SUFFIX, append_jsonl, make_record, run_hash
from ...tracking.runs import import_records
from ...tracking.store import provenance_tags
from ...tracking.tables import parse_table_metrics
from ...training.candidates import candidates_description
from ...training.checkpoint import checkpoint_file
from ...training.compile import resolve_compile
from ...training.config import TrainConfig
from ...training.devices import resolve_device
from ...training.trainer import fit
from .. import tuning
from ..campaign import (
    Campaign,
    Executor,
    LocalExecutor,
    Manifest,
    Status,
    add_grid_run_options,
    checkpoint_dir,
    deadline_after,
    executor_from_args,
    merge_manifests,
)
from ..jobs import gpu_sharing
from .protocol import (
    CASE_RANKS_NAME,
    DATASETS,
    MANIFEST_NAME,
    PROTOCOL,
    V2,
    WIDTH,
    HeadlineProtocol,
    Width,
    backbone_parameters,
    compile_of,
    training_config,
    width_of,
)
from .v3 import REUSE_DEFAULT, V3, grid_from_option, parse_widths

UNTRAINED_RATE = 0.0  # the rate recorded for pop, which trains nothing
DIVERGED = Status.DIVERGED.value
RECORDS_NAME = f"headline{RECORDS_SUFFIX}"
RESULTS_MANIFEST = RESULTS_DIR / MANIFEST_NAME
RESULTS_CASE_RANKS = RESULTS_DIR / CASE_RANKS_NAME


@dataclass(frozen=True)
class HeadlineJob:
    dataset: str
    model: str
    config: TrainConfig
    run_hash: str
    command: str
    split: str = "loo"  # the dataset's split (data/core.py); split_study.py trains "time"
    checkpoints: Path | None = None  # the folder of its per-epoch checkpoint (resumed from when there)
    width: str = WIDTH  # the width preset (protocol.Width) of its settings
    protocol: str = PROTOCOL  # the protocol its manifest line names

    @property
    def label(self) -> str:
        split = "" if self.split == "loo" else f"/{self.split}"
        width = "" if self.width == WIDTH else f"/{self.width}"
        return f"{self.dataset}{split}{width}/{self.model}/lr{self.config.lr:g}/s{self.config.seed}"

    @property
    def tunes(self) -> bool:
        """Whether this is a seed-0 run of a base backbone's rate grid (the runs that come first)."""
        return (registry.trains(self.model) and self.config.seed == tuning.TUNING_SEED
                and tuning.tuning_base(self.model) == self.model)


@functools.cache
def _dataset(name: str, split: str):
    return load_dataset(name, split=split)


def train_cell(job: HeadlineJob) -> dict:
    """Worker entry: train one cell; returns {"status": "finished", "record": ..., "gpu_sharing": ...}, or
    status "diverged" when the scores were not finite before any epoch validated (a rate too high for the
    backbone). With ``job.checkpoints``, a checkpoint is written after every epoch and a run that finds one
    (its earlier worker died) resumes from it; it is removed once the run ends."""
    dataset = _dataset(job.dataset, job.split)
    started = time.time()
    checkpoint = None if job.checkpoints is None else checkpoint_file(
        job.dataset, job.model, job.config.seed, job.run_hash, job.checkpoints)
    try:
        result = fit(dataset, job.model, job.config, checkpoint_path=checkpoint,
                     resume=checkpoint is not None and checkpoint.exists())
    except FloatingPointError as error:
        outcome = {"status": DIVERGED, "error": str(error)}
    else:
        tags = {**provenance_tags(resolve_device(job.config.device)), "command": job.command,
                "compile": job.config.compile}
        outcome = {"status": Status.FINISHED.value, "gpu_sharing": gpu_sharing(job.config.device),
                   "record": make_record(dataset, job.model, job.config, result, tags, started)}
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return outcome


def manifest_entry(record: dict) -> dict:
    """The manifest line of a finished record: keys, settings hash, final metrics, what its test cases rank
    their targets against (candidates.candidates_description), cost, provenance."""
    tags = record["tags"]
    params = record["params"]
    evaluation = candidates_description(str(params.get("sampled", "none")),
                                        str(params.get("exclude_history")) == "True")
    return {"dataset": record["experiment"], "model": tags["model"], "seed": int(tags["seed"]),
            "protocol": PROTOCOL, "lr": float(params["lr"]), "epochs": int(params["epochs"]),
            "patience": int(params["patience"]),
            "config_hash": tags["config_hash"], "record_id": record["record_id"], **record["metrics"],
            "evaluation": evaluation,
            "machine": tags["machine"], "git_commit": tags["git_commit"], "command": tags["command"],
            "compile": tags.get("compile", "off"),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["end_time_ms"] / 1000))}


def diverged_entry(job: HeadlineJob) -> dict:
    """The manifest line of a run whose scores were not finite before any validation: it counts as tried
    (its rate loses the tuning, tuning.py) and is never rerun; it has no metrics."""
    return {"dataset": job.dataset, "model": job.model, "seed": job.config.seed, "protocol": job.protocol,
            "width": job.width, "lr": job.config.lr, "epochs": job.config.epochs, "patience": job.config.patience,
            "config_hash": job.run_hash, "record_id": uuid.uuid4().hex, "diverged": True,
            "best_valid_auc": float("-inf"), "command": job.command,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def mode_ratio(target: str, source: str, per_epoch: dict) -> float:
    """How much longer an epoch takes in compile mode ``target`` than in ``source``: the median ratio over the
    (dataset, model) cells seen in both (``per_epoch``: seconds per epoch per (dataset, model, mode)), else 1.
    Modes differ several-fold in the grid (results/step_grid.md), so a time seen in one is carried to another."""
    ratios = [statistics.fmean(seconds) / statistics.fmean(per_epoch[(dataset, model, source)])
              for (dataset, model, mode), seconds in per_epoch.items()
              if mode == target and (dataset, model, source) in per_epoch]
    return statistics.median(ratios) if ratios else 1.0


def in_mode(dataset: str, model: tuple[str, str], mode: str, per_epoch: dict) -> float | None:
    """Seconds per epoch of (dataset, model) in ``mode``: as seen, else the median of the other modes seen,
    each carried over by mode_ratio; None where the cell has no run."""
    if (dataset, model, mode) in per_epoch:
        return statistics.fmean(per_epoch[(dataset, model, mode)])
    figures = [statistics.fmean(seconds) * mode_ratio(mode, other, per_epoch)
               for (d, m, other), seconds in per_epoch.items() if (d, m) == (dataset, model)]
    return statistics.median(figures) if figures else None


def dataset_ratio(target: str, source: str, mode: str, width: str, per_epoch: dict,
                  interactions: dict[str, int]) -> float | None:
    """How much longer an epoch of ``target`` takes than one of ``source`` in compile mode ``mode``: the median
    ratio of their in_mode times over the trained models seen on both (those of ``width`` where any is); else
    the interactions' ratio; None where neither is known (``source`` outside the call, no model shared)."""
    def trained_models(dataset: str) -> set[tuple[str, str]]:
        return {m for d, m, _ in per_epoch if d == dataset and registry.trains(m[0])}

    shared = trained_models(target) & trained_models(source)
    chosen = {m for m in shared if m[1] == width} or shared
    if chosen:
        return statistics.median(in_mode(target, m, mode, per_epoch) / in_mode(source, m, mode, per_epoch)
                                 for m in chosen)
    return interactions[target] / interactions[source] if source in interactions else None


def carried_seconds(job: HeadlineJob, mode: str, per_epoch: dict, interactions: dict[str, int]) -> list[float]:
    """Seconds per epoch of the job's (model, width) in ``mode`` (in_mode) on each other dataset, carried over to
    the job's dataset by dataset_ratio."""
    model, figures = (job.model, job.width), []
    for dataset in sorted({d for d, m, _ in per_epoch if m == model and d != job.dataset}):
        ratio = dataset_ratio(job.dataset, dataset, mode, job.width, per_epoch, interactions)
        if ratio is not None:
            figures.append(in_mode(dataset, model, mode, per_epoch) * ratio)
    return figures


def estimate_seconds(jobs: list[HeadlineJob], manifest: list[dict], interactions: dict[str, int],
                     grid_hashes: set[str], jobs_per_device: float
                     ) -> tuple[dict[str, float], dict[str, str], bool]:
    """Expected wall seconds per job label, the basis of each figure, and whether any time was seen (if
    not, the figures only rank the jobs). Seconds per epoch come from the same (dataset, model) in
    ``manifest`` among runs with the grid's settings (``grid_hashes``: the settings hash of every cell, any
    seed; the runs of a dataset outside this call, not in ``interactions``, cannot be checked so and count as
    the protocol's, whose manifest holds them): in the job's compile mode (basis "seen") if such runs exist,
    else in the other modes seen, carried over by mode_ratio ("other mode"); else the same (model, width) on
    another dataset, in the job's mode (in_mode), times dataset_ratio ("other dataset"; parameters are a poor
    guide across widths: a step four times wider costs far less than its 16x parameters); else interactions x
    backbone parameters times the median seconds per epoch and unit seen on the call's datasets ("scaled");
    else 0 ("unknown": nothing to scale from, so the job is not held back). The third value says whether any
    job has a figure other than "unknown".
    Epochs: the median of the runs of the same (dataset, model, rate), else of the same (dataset, rate) (a
    lower rate trains for more epochs before its patience runs out), else of that rate on any dataset, else
    of any run. A time seen while ``jobs_per_device`` of the entry ran at once on its GPU counts in
    proportion to the concurrency planned now (runs share the GPU's time)."""
    per_epoch: dict[tuple[str, tuple[str, str], str], list[float]] = {}  # a model is (backbone, width)
    epochs: dict[tuple[str, tuple[str, str], float], list[int]] = {}
    for entry in manifest:
        grid_run = entry["config_hash"] in grid_hashes or entry["dataset"] not in interactions
        if grid_run and "wall_seconds" in entry:  # diverged runs have no time
            sharing = jobs_per_device / entry.get("jobs_per_device", jobs_per_device)
            mode = compile_of(entry)
            model = (entry["model"], width_of(entry))
            per_epoch.setdefault((entry["dataset"], model, mode), []).append(
                entry["wall_seconds"] * sharing / entry["epochs_run"])
            epochs.setdefault((entry["dataset"], model, entry["lr"]), []).append(entry["epochs_run"])
    parameters: dict[tuple[str, str], int] = {}
    for job in jobs:
        if (job.model, job.width) not in parameters:
            parameters[(job.model, job.width)] = backbone_parameters(job.model, job.config)
    by_pair: dict[tuple[str, tuple[str, str]], list[float]] = {}
    for (dataset, model, _), seconds in per_epoch.items():
        by_pair.setdefault((dataset, model), []).extend(seconds)
    scales = [statistics.fmean(seconds) / (interactions[d] * parameters[m])
              for (d, m), seconds in by_pair.items() if d in interactions and parameters.get(m)]  # pop has none
    scale = statistics.median(scales) if scales else None

    def expected_epochs(job: HeadlineJob) -> float:
        def seen(dataset: str | None, model: str | None, lr: float | None) -> list[int]:
            return [n for (d, m, r), runs in epochs.items() if dataset in (None, d) and model in (None, m)
                    and lr in (None, r) for n in runs]

        lr = job.config.lr
        return statistics.median(seen(job.dataset, (job.model, job.width), lr) or seen(job.dataset, None, lr)
                                 or seen(None, None, lr) or seen(None, None, None) or [1])

    seconds, basis = {}, {}
    for job in jobs:
        mode = job.config.compile  # "auto": the mode fit will resolve it to
        if mode == "auto":
            mode = resolve_compile(mode, resolve_device(job.config.device), backbone=job.model, loss=job.config.loss)
        scaled = None if scale is None else scale * interactions[job.dataset] * parameters[(job.model, job.width)]
        per, basis[job.label] = epoch_seconds(job, mode, per_epoch, interactions, scaled)
        seconds[job.label] = per * expected_epochs(job)
    return seconds, basis, any(b != "unknown" for b in basis.values())


def epoch_seconds(job: HeadlineJob, mode: str, per_epoch: dict, interactions: dict[str, int],
                  scaled: float | None) -> tuple[float, str]:
    """The job's expected seconds per epoch in ``mode`` and their basis (estimate_seconds); ``scaled`` is the
    parameter scaling's figure, None where no run scales it."""
    here = in_mode(job.dataset, (job.model, job.width), mode, per_epoch)
    if here is not None:
        return here, "seen" if (job.dataset, (job.model, job.width), mode) in per_epoch else "other mode"
    carried = carried_seconds(job, mode, per_epoch, interactions)
    if carried:
        return statistics.median(carried), "other dataset"
    if scaled is not None:
        return scaled, "scaled"
    return 0.0, "unknown"  # nothing to scale from: no made-up figure holds the job back


def order_jobs(jobs: list[HeadlineJob], expected: dict[str, float],
               certain: list[HeadlineJob] | None = None) -> list[HeadlineJob]:
    """Tuning runs first (the others wait for their choice), then the runs at a chosen rate, then (when
    ``certain`` lists those) the runs at a guessed rate, each group longest-first by ``expected`` seconds
    (short jobs pack the end of a budget)."""
    sure = None if certain is None else {job.label for job in certain}
    return sorted(jobs, key=lambda job: (not job.tunes, sure is not None and job.label not in sure,
                                         -expected[job.label]))


class CorrectedEstimates:
    """Expected seconds of a job: its prior estimate times the median ratio of actual to prior seconds among
    the runs finished so far in this call of the same (dataset, model), once one has; else among those
    whose prior had the same basis (estimate_seconds: "seen", "other mode", "other dataset", "scaled"), once
    ``MIN_RUNS`` have; else the prior. Each basis errs its own way (a time measured eager is too long for a compiled
    run, a time scaled from another backbone's may be off either way, and the concurrency scaling of
    either is approximate), so one basis's ratio never corrects another's, and waiting for a few runs
    keeps the first, shortest ones from setting it alone."""

    MIN_RUNS = 3

    def __init__(self, prior: dict[str, float], basis: dict[str, str]):
        self.prior, self.basis = prior, basis
        self.by_basis: dict[str, list[float]] = {}
        self.by_pair: dict[tuple[str, str, str], list[float]] = {}

    def finished(self, job: HeadlineJob, seconds: float) -> None:
        if self.prior[job.label] > 0:
            ratio = seconds / self.prior[job.label]
            self.by_basis.setdefault(self.basis[job.label], []).append(ratio)
            self.by_pair.setdefault((job.dataset, job.model, job.width), []).append(ratio)

    def __call__(self, job: HeadlineJob) -> float:
        pair = (job.dataset, job.model, job.width)
        ratios = self.by_pair.get(pair) or self.by_basis.get(self.basis[job.label], [])
        enough = pair in self.by_pair or len(ratios) >= self.MIN_RUNS
        return self.prior[job.label] * (statistics.median(ratios) if enough else 1.0)


class GridPlan:
    """The cells of a headline grid and which of them can run now.

    ``jobs`` are the (width, dataset, model, seed, rate) runs the grid may need: pop once, and every seed of every
    other model at every rate the grid may reach (its ladder, or its fixed rates; only seed 0 of a base at the
    rates tuning asks for and the runs at the chosen rate are ever queued; listing them all lets their time
    estimates be made up front), ``hashes`` their settings hashes; each width preset (protocol.Width) is a grid
    of its own, on its models and datasets, tuned apart. ``eager_models`` train with compile off whatever
    ``overrides`` say (the compile mode is not part of a run's identity, so their hashes stay the same).
    ``runnable(manifest)`` are the jobs whose rate is known and which ``manifest`` lacks."""

    def __init__(self, datasets: dict, models: list[str], seeds: list[int], grid: tuning.TuningGrid | tuple[float, ...],
                 device: str, overrides: dict, command: str, eager_models: frozenset[str] = frozenset(),
                 checkpoints: Path | None = None, widths: dict[str, Width] | None = None, protocol: str = PROTOCOL):
        self.grid = tuning.as_grid(grid)
        self.jobs: dict[tuple[str, str, str, int, float], HeadlineJob] = {}
        self.width_hashes: dict[str, set[str]] = {}
        for width in (widths or V2.widths).values():
            for name, dataset in datasets.items():
                if width.datasets is not None and name not in width.datasets:
                    continue
                for model in models:
                    if width.models is not None and model not in width.models:
                        continue
                    rates = (UNTRAINED_RATE,) if not registry.trains(model) else self.grid.ladder or self.grid.start
                    for seed in (seeds[:1] if not registry.trains(model) else seeds):
                        for lr in rates:
                            eager = {"compile": "off"} if model in eager_models else {}
                            config = training_config(name, model, seed, device, overrides | width.settings | eager, lr)
                            job = HeadlineJob(name, model, config, run_hash(name, dataset.options, model, config),
                                              command, checkpoints=checkpoints, width=width.name, protocol=protocol)
                            self.jobs[(width.name, name, model, seed, lr)] = job
                            self.width_hashes.setdefault(width.name, set()).add(job.run_hash)
        self.hashes = {job.run_hash for job in self.jobs.values()}

    def runnable(self, manifest: list[dict], speculate: bool = False) -> list[HeadlineJob]:
        """The jobs whose rate is known and which ``manifest`` lacks; with ``speculate``, also the other
        seeds of a base whose rate grid is incomplete, at the rate leading so far (tuning.leading_rates)."""
        finished = {(e["dataset"], e["model"], e["seed"], e["config_hash"]) for e in manifest}
        choices, extensions, guesses = {}, {}, {}
        for width, hashes in self.width_hashes.items():
            entries = [e for e in manifest if e["config_hash"] in hashes]
            choices[width] = tuning.chosen_rates(entries, self.grid)
            extensions[width] = tuning.next_rates(entries, self.grid)
            guesses[width] = tuning.leading_rates(entries, self.grid) if speculate else {}
        ready = []
        for (width, dataset, model, seed, lr), job in self.jobs.items():
            rate = (tuning.rate_for(dataset, model, choices[width])
                    or tuning.rate_for(dataset, model, guesses[width]))
            tuned = job.tunes and (lr in self.grid.start or lr == extensions[width].get((dataset, model)))
            wanted = not registry.trains(model) or tuned or lr == rate
            if wanted and (dataset, model, seed, job.run_hash) not in finished:
                ready.append(job)
        return ready


def reuse_runs(manifest: Manifest, sources: list[Path], hashes: set[str]) -> int:
    """Copy into ``manifest`` every line of the ``sources`` manifests whose settings hash is a cell of the grid
    (``hashes``) and whose record is not in it yet (the run counts as done, not retrained); returns how many."""
    have = {entry["record_id"] for entry in manifest.entries}
    copied = 0
    for path in sources:
        if not Path(path).is_file():
            raise FileNotFoundError(f"option --reuse: {path} does not exist")
        for entry in read_jsonl(path):
            if entry["config_hash"] in hashes and entry["record_id"] not in have:
                manifest.add(entry)
                have.add(entry["record_id"])
                copied += 1
    return copied


def run_headline(datasets: list[str], models: list[str], seeds: list[int], out_dir: Path, workers: int,
                 budget: float | None, device: str = "auto", overrides: dict | None = None,
                 command: str = "", grid: tuning.TuningGrid | tuple[float, ...] = tuning.LR_GRID,
                 eager_models: frozenset[str] = frozenset(), speculate: bool = False,
                 executor: Executor | None = None, checkpoints: Path | None = None,
                 protocol: HeadlineProtocol = V2, widths: dict[str, Width] | None = None,
                 reuse: tuple[Path, ...] = ()) -> dict[str, int]:
    """Train the grid's runs not yet in ``out_dir``'s manifest (``protocol``'s files; each width preset of
    ``widths``, default the protocol's, a grid of its own), adding each base's rate extensions and chosen-rate
    runs as its rate grid grows and completes; the lines of the ``reuse`` manifests that are cells of the grid
    are copied in first (reuse_runs). Returns counts per outcome. The runs train on ``executor`` (default: a local pool
    of ``workers`` processes on ``device``), with per-epoch checkpoints in ``checkpoints`` if given. With
    ``speculate``, the other seeds of a base whose grid is incomplete also queue, after the rest, at the
    rate leading so far (idle workers start them while the grid's last runs train; they are passed over
    once the leading rate changes, and one that trained at a rate the grid then did not choose stays in the
    manifest, out of the tables)."""
    deadline = deadline_after(budget)
    grid = tuning.as_grid(grid)
    if not seeds:
        raise OptionError("option --seeds: must be >= 1, got 0")
    tuning.check_bases(models)
    executor = executor or LocalExecutor(workers, device)
    out_dir = Path(out_dir)
    manifest = Manifest(out_dir / protocol.manifest_name, key=lambda entry: entry["record_id"])
    records_path, case_ranks_path = out_dir / RECORDS_NAME, out_dir / protocol.case_ranks_name
    loaded = {name: load_dataset(name) for name in datasets}  # prepares the caches the workers read
    interactions = {name: dataset.stats()["interactions"] for name, dataset in loaded.items()}
    plan = GridPlan(loaded, models, seeds, grid, executor.job_device, overrides or {}, command, eager_models,
                    checkpoints, widths or protocol.widths, protocol.name)
    reused = reuse_runs(manifest, list(reuse), plan.hashes)
    if reuse:
        print(f"reused {reused} run(s) of {', '.join(map(str, reuse))} (settings match a cell)", flush=True)
    jobs = plan.runnable(manifest.entries, speculate)
    queued, wanted = {job.label for job in jobs}, {job.label for job in jobs}
    campaign = Campaign(executor, deadline,
                        {"already in manifest": sum(e["config_hash"] in plan.hashes for e in manifest.entries)},
                        (Status.FINISHED, Status.DIVERGED, Status.FAILED, Status.ABANDONED))
    jobs_per_device = executor.jobs_per_device(len(jobs))
    prior, basis, timed = estimate_seconds(list(plan.jobs.values()), manifest.entries, interactions, plan.hashes,
                                           jobs_per_device)
    jobs, expected = order_jobs(jobs, prior, plan.runnable(manifest.entries)), CorrectedEstimates(prior, basis)
    ladder = f", extending along {', '.join(f'{r:g}' for r in grid.ladder)}" if grid.ladder else ""
    print(f"{len(jobs)} runs ready on {executor.describe()} (rates {', '.join(f'{r:g}' for r in grid.start)}{ladder})"
          f"{f', budget {budget:.0f} s' if budget else ''}; {campaign.counts['already in manifest']} already in "
          f"{manifest.path}", flush=True)

    def on_result(job: HeadlineJob, status: Status, result: dict) -> list[HeadlineJob]:
        if status is Status.ABANDONED:
            print(f"{job.label}: abandoned at the deadline", flush=True)
        if status in (Status.ABANDONED, Status.FAILED):
            return []
        if status is Status.DIVERGED:
            entry = diverged_entry(job)
            print(f"{job.label}: diverged before its first validation ({result['error']})", flush=True)
        else:
            record = result["record"]
            entry = {**manifest_entry(record), "protocol": job.protocol, "width": job.width,
                     "jobs_per_device": jobs_per_device, "gpu_sharing": result["gpu_sharing"]}
            append_jsonl(records_path, record)
            append_jsonl(case_ranks_path, {key: entry[key] for key in ("record_id", "dataset", "model", "seed", "lr")}
                         | {"case_ranks": record["case_ranks"]})
            metrics = record["metrics"]
            expected.finished(job, metrics["wall_seconds"])
            print(f"[{campaign.counts['finished']}] {job.label}: test AUC {metrics['test_auc']:.4f}, epochs "
                  f"{metrics['epochs_run']} (best {metrics['best_epoch']}), {metrics['wall_seconds']:.0f} s, "
                  f"{metrics['train_tokens_per_s']:,.0f} tokens/s", flush=True)
        manifest.add(entry)
        ready = plan.runnable(manifest.entries, speculate)
        wanted.clear()
        wanted.update(j.label for j in ready)
        follow_ups = order_jobs([j for j in ready if j.label not in queued], prior, plan.runnable(manifest.entries))
        queued.update(j.label for j in follow_ups)
        if follow_ups:
            print(f"{job.dataset}/{tuning.tuning_base(job.model)}{'' if job.width == WIDTH else '/' + job.width}: "
                  f"rate extended, chosen or leading, {len(follow_ups)} run(s) queued", flush=True)
        return follow_ups

    not_started = campaign.run(jobs, train_cell, on_result, abandon_after=0,
                               expected_seconds=expected if timed else None, wanted=lambda job: job.label in wanted)
    passed_over = sum(job.label not in wanted for job in not_started)
    campaign.counts["not started"] -= passed_over
    campaign.counts["passed over (guessed rate lost)"] = passed_over
    print(campaign.summary(), flush=True)
    return campaign.counts


def parse_overrides(pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` pairs as TrainConfig values of the type of KEY's field: a bool by
    ``options.parse_on_off``, an int, a float, the cutoffs by ``training.config.parse_cutoffs``, a str as given;
    then checked as a run's settings. Raises :class:`OptionError` naming the pair or the key."""
    fields = {field.name: field for field in dataclasses.fields(TrainConfig)
              if field.name not in ("seed", "device", "progress", "backbone_options", "lr")}  # rates: --lr-grid
    types = typing.get_type_hints(TrainConfig)
    overrides = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals:
            raise OptionError(f"option --set {pair!r}: expected KEY=VALUE")
        if key not in fields:
            raise OptionError(f"option --set {pair!r}: {key!r} is not one of {', '.join(fields)}")
        kind = types[key]
        if kind is bool:
            overrides[key] = parse_on_off(text, f"--set {key}")
            continue
        parse = fields[key].metadata.get("parse") or kind
        try:
            overrides[key] = parse(text)
        except (ValueError, argparse.ArgumentTypeError):
            meaning = {int: "an integer", float: "a number"}.get(kind, "a comma list of integers")
            raise OptionError(f"option --set {pair!r}: {text!r} is not {meaning}") from None
    try:
        check_ranges(overrides)
        TrainConfig(**overrides).validate()
    except ValueError as error:  # both name the bench option: name --set and the field instead
        raise OptionError(f"option --set: {str(error).removeprefix('option --')}") from None
    return overrides


def add_parser(subparsers) -> None:
    """Add ``headline`` (run, import, merge, tables) to ``subparsers`` (an argparse sub-parser action)."""
    headline = subparsers.add_parser("headline", help="the headline grid: train, merge, import, tables",
                                     description=__doc__.split("\n\n")[0])
    commands = headline.add_subparsers(dest="headline_command", required=True)
    run = commands.add_parser("run", help="train the grid's missing cells")
    add_grid_run_options(run, "folder of the manifest and the records")
    run.add_argument("--datasets", default=",".join(DATASETS))
    run.add_argument("--models", default="all", help="comma-separated backbones, or all (every registered one)")
    run.add_argument("--protocol", choices=("v2", "v3"), default="v2",
                     help="v2: 3 seeds, a fixed rate grid; v3 (headline/v3.py): 5 seeds, a grid extending to an "
                          "interior optimum, GRU4Rec, a second width, reusing v2's runs")
    run.add_argument("--seeds", type=int, help="how many seeds, from 0 (default: the protocol's, 3 or 5)")
    run.add_argument("--lr-grid", help="comma-separated increasing learning rates tried on seed 0 of every base "
                                       "backbone (default: the protocol's; v3 extends it along its ladder)")
    run.add_argument("--widths", help="v3: comma-separated width presets (default d64,d256)")
    run.add_argument("--reuse", type=Path, action="append",
                     help=f"v3: a manifest whose runs count as done where their settings match "
                          f"(default {REUSE_DEFAULT})")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="change a training setting (for quick checks), e.g. --set epochs=1")
    run.add_argument("--eager-models", default="",
                     help="comma-separated backbones that train with compile off whatever --set compile says")
    run.add_argument("--check", action="store_true",
                     help="check every option (the presets' bases included), print what would train and exit "
                          "without training or writing (for scripts that must refuse bad input before other work)")
    run.add_argument("--speculate", action="store_true",
                     help="also start the other seeds of a backbone whose rate grid is unfinished, at the rate "
                          "leading so far, after every other run (they count only if that rate is chosen)")
    run.set_defaults(func=command_run)
    imported = commands.add_parser("import", help="log run records into the MLflow store")
    imported.add_argument("source", type=Path, help="a folder holding *.records.jsonl files, or one such file")
    imported.set_defaults(func=command_import)
    merged = commands.add_parser("merge", help="join manifests of calls run side by side into one")
    merged.add_argument("out", type=Path, help="the file to write (e.g. results/headline_v2_manifest.jsonl)")
    merged.add_argument("sources", type=Path, nargs="+", help="manifests to join (the base first)")
    merged.set_defaults(func=command_merge)
    tables = commands.add_parser("tables", help="the results pages: v2, results/v2/README.md and results/<dataset>/; "
                                                   "v3, results/README.md and results/headline_v3.md")
    tables.add_argument("--manifest", type=Path, default=RESULTS_MANIFEST)
    tables.add_argument("--protocol", choices=("v2", "v3"), default="v2",
                        help="v3: RESULTS_DIR/README.md and RESULTS_DIR/headline_v3.md from the v3 manifest and both "
                             "case-ranks files there")
    tables.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="v3: the folder read and written")
    tables.add_argument("--metrics", type=table_metrics, default=(),
                        help="test metrics shown after the default ones (v2: AUC, Hit@10, NDCG@10; v3: AUC), e.g. "
                             "mrr,ndcg_20,hit_50,coverage_10,avg_pop_10: a run that did not evaluate one (an older "
                             "run, other --cutoffs) shows as missing; a sampled run's columns say \"(sampled)\"")
    tables.set_defaults(func=command_tables)


def table_metrics(text: str) -> tuple[str, ...]:
    """``headline tables --metrics`` (tracking.tables.parse_table_metrics), as argparse's type."""
    try:
        return parse_table_metrics(text)
    except OptionError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("option --metrics: ")) from None


def command_run(args: argparse.Namespace) -> None:
    models = resolve_models(args.models)
    datasets = args.datasets.split(",")
    unknown = [d for d in datasets if d not in registry.list_datasets()]
    if unknown:
        raise OptionError(f"option --datasets: unknown dataset(s) {', '.join(unknown)}; registered: "
                          f"{', '.join(registry.list_datasets())}")
    protocol = V3 if args.protocol == "v3" else V2
    seeds = len(protocol.seeds) if args.seeds is None else args.seeds
    if seeds < 1:
        raise OptionError(f"option --seeds: must be >= 1, got {seeds}")
    for name in ("widths", "reuse"):
        if protocol is V2 and getattr(args, name) is not None:
            raise OptionError(f"option --{name}: only with --protocol v3")
    widths = parse_widths(args.widths, protocol) if args.widths is not None else protocol.widths
    reuse = tuple(args.reuse or ((REUSE_DEFAULT,) if protocol is V3 else ()))
    missing = [str(path) for path in reuse if not Path(path).is_file()]
    if missing:
        raise OptionError(f"option --reuse: {', '.join(missing)} does not exist")
    grid = protocol.grid if args.lr_grid is None else grid_from_option(args.lr_grid, protocol)
    overrides = parse_overrides(args.set)
    eager_models = frozenset(resolve_models(args.eager_models, "--eager-models") if args.eager_models else ())
    tuning.check_bases(models)
    if args.check:
        print(f"options accepted: protocol {args.protocol}, {', '.join(datasets)} x {', '.join(models)}, "
              f"{seeds} seed(s), widths {', '.join(widths)}")
        return
    executor = executor_from_args(args, args.budget)
    try:
        counts = run_headline(datasets, models, list(range(seeds)), args.out, 1, args.budget,
                              overrides=overrides, command=args.invocation, grid=grid, eager_models=eager_models,
                              speculate=args.speculate, executor=executor, checkpoints=checkpoint_dir(args, executor),
                              protocol=protocol, widths=widths, reuse=reuse)
    finally:
        executor.close()
    if counts[Status.FAILED.value]:
        sys.exit(1)


def command_merge(args: argparse.Namespace) -> None:
    entries = merge_manifests(args.sources)
    write_jsonl(args.out, entries)
    print(f"wrote {args.out}: {len(entries)} runs")


def command_import(args: argparse.Namespace) -> None:
    counts = import_records(args.source, args.invocation)
    print(f"{counts['imported']} run(s) imported, {counts['already there']} already in the store")


def command_tables(args: argparse.Namespace) -> None:
    from .report import write_results

    if args.protocol == "v3":
        from .front_page import write_pages

        for path in write_pages(args.results_dir, args.metrics):
            print(f"wrote {path}")
        return

    manifest = read_jsonl(args.manifest)
    if not manifest:
        raise FileNotFoundError(f"option --manifest: no finished runs in {args.manifest}")
    for path in write_results(manifest, metrics=args.metrics):
        print(f"wrote {path}")
