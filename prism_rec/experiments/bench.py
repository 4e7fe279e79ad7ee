"""``prism-rec bench``: train every (model, seed) on one dataset, log to MLflow, write the AUC table.
A recommender that does not train (``registry.trains``: pop) is deterministic and runs once, with the first seed.

One MLflow experiment per dataset, one parent run per invocation, one child run ``<model>-s<seed>``
per training (tagged ``bench`` with its parent's run name) with every setting as a param as it ran
(``records.run_settings``: the resolved device, precision and compile mode, every backbone option with its
default filled in; also config.json), per-epoch metrics at step = epoch (1-based, like best_epoch), final
test metrics, cost figures and a learning-curve PNG. The parent run carries the comparison of its children
(``tracking.runs.log_comparison``): per-model summary metrics, the table comparison.json (model, n, mean,
interval), the AUC table and chart (sorted, with 95% intervals over test users and n), every model's learning
curves on shared axes, and the paired difference of every model against the best mean (:func:`against_best`,
the headline verdict rule of headline/verdicts.py) as the table paired_differences.json, also printed. A run
whose best epoch is its last is still improving: bench warns of it, per run and in the summary.
The user's AUC table of the store goes to results/local/<dataset>/ (git-ignored);
the published tables in results/<dataset>/ are never written here.

Every option is checked before anything is loaded or logged (:func:`check_bench_options`, which builds
each backbone once): a bad one raises :class:`OptionError`. Training writes a checkpoint after every
epoch; an interrupted run (Ctrl-C, SIGTERM, SIGHUP) saves one and ends KILLED, a crashed one FAILED; the
other models still run after a crash and the command then fails (:class:`BenchFailures`). Runs left
RUNNING by a process killed outright (SIGKILL, the OOM killer) are marked KILLED by the next bench of
their dataset. ``resume=True`` continues every (model, seed) that has a checkpoint from it, in the
child run that wrote it where that is the newest KILLED benchmark with the same settings (whose
finished children are kept), else in a new one; without ``resume`` a checkpoint of these settings is
refused, so that it is never overwritten by accident. Each training holds the lock file beside its checkpoint
(checkpoint.RunLock); a bench that finds it held skips the run and leaves the checkpoint alone.
Under torchrun every process trains, and only rank 0 talks to MLflow and writes files.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..data.core import DataError
from ..data.core import check_options as check_data_options
from ..data.sources import load_dataset
from ..errors import BenchFailures, OptionError
from ..files import remove_stale_temporaries
from ..paths import RESULTS_DIR
from ..recbole_bridge import is_recbole
from ..recbole_bridge.config import run_options
from ..recbole_bridge.run import fit_recbole
from ..registry import backbone_parameters, build_backbone, get_dataset, trains
from ..tracking import runs
from ..tracking.cells import Cell
from ..tracking.records import child_run, dataset_stats_tag, run_hash
from ..tracking.store import (
    BENCH_TAG,
    PAIRED_TABLE,
    end_runs_of_dead_processes,
    experiment_id,
    process_tags,
    provenance_tags,
)
from ..tracking.tables import LOCAL_RESULTS_DIR, write_tables
from ..training import distributed
from ..training.candidates import check_sampled
from ..training.checkpoint import CHECKPOINT_DIR, RunLock, checkpoint_file, run_identity, silence_closed_terminal
from ..training.config import TrainConfig, config_hash
from ..training.devices import resolve_device
from ..training.trainer import FitResult, fit, read_checkpoint
from .headline.v3_tables import comparison_table
from .headline.verdicts import Comparison, family

FINISHED, RESUME, FRESH = "finished", "resume", "fresh"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass
class Planned:
    """What a bench does with one (model, seed): keep a finished run, or resume from its checkpoint (in the
    child run ``child_id``, or a new one), with the ``history`` rows the checkpoint holds."""

    action: str
    child_id: str | None = None
    history: list = field(default_factory=list)


def _raise_interrupt(signum, frame):
    if signum == signal.SIGHUP:
        silence_closed_terminal()
    raise KeyboardInterrupt(f"signal {signum}")


def check_bench_options(dataset_name: str, models: list[str], config: TrainConfig, data_options: dict) -> None:
    """Every option of a bench, checked before anything is loaded: the training settings, the device, the
    data options, and each model's backbone built once with the shared settings and ``--option`` values.
    Raises :class:`OptionError` naming the option at fault."""
    try:
        config.validate()
        resolve_device(config.device)
        source = get_dataset(dataset_name)
    except KeyError as error:
        raise OptionError(f"option --dataset: {error.args[0]}") from None
    except ValueError as error:
        raise OptionError(str(error)) from None
    thresholds = {name: getattr(source, name) if data_options.get(name) is None else data_options[name]
                  for name in ("min_user_interactions", "min_item_interactions")}
    try:
        check_data_options(data_options.get("split", "loo"), data_options.get("dedup", "none"), **thresholds)
    except DataError as error:
        raise OptionError(str(error)) from None
    for model in models:
        if is_recbole(model):
            _check_recbole(model, config)
        else:
            _check_backbone(model, config)


def _check_recbole(model: str, config: TrainConfig) -> None:
    """A RecBole model through the bridge: one it runs, with settings RecBole defines, trained eagerly."""
    try:
        run_options(model, config)
    except (ValueError, ImportError) as error:
        raise OptionError(str(error)) from None
    if config.compile not in ("auto", "off"):
        raise OptionError(f"option --compile {config.compile}: {model} trains eagerly in RecBole's own loop")


def _check_backbone(model: str, config: TrainConfig) -> None:
    """Build ``model``'s backbone with the run's settings; an error names the option to blame."""
    shared = {"d_model": config.d_model, "n_layers": config.n_layers, "n_heads": config.n_heads,
              "dropout": config.dropout}
    options = config.backbone_options
    parameters = backbone_parameters(model)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        for key, value in options.items():
            if key not in parameters:
                taken = ", ".join(name for name in parameters if name not in shared) or "none"
                raise OptionError(f"option --option {key}={value}: backbone {model} has no option {key!r} "
                                  f"(its options: {taken})")
    try:
        build_backbone(model, **shared, **options)
    except Exception as error:  # whatever a constructor raises for a value it cannot take
        message = str(error).removeprefix(f"{model}: ")
        raise OptionError(f"{_blamed_option(message, config)}: backbone {model}: {message}") from None


def _blamed_option(message: str, config: TrainConfig) -> str:
    """The option that ``message`` names: an ``--option`` first, then a shared setting off its default,
    then any shared setting; "options" when it names none."""
    defaults = TrainConfig()
    candidates = [(key, f"--option {key}={value}") for key, value in config.backbone_options.items()]
    shared = [(name, f"--{name.replace('_', '-')} {getattr(config, name)}")
              for name in ("n_heads", "d_model", "n_layers", "dropout")]
    candidates += sorted(shared, key=lambda item: getattr(config, item[0]) == getattr(defaults, item[0]))
    for name, option in candidates:
        if re.search(rf"\b{re.escape(name)}\b", message):
            return f"option {option}"
    return "options"


def cpu_threads(option: str) -> int:
    """The CPU threads to train with for ``--threads``: a count, or "auto": OMP_NUM_THREADS where it is set
    (torchrun sets it), else 1. The count changes how reductions split, so runs with other counts may
    differ in the last bits (measured: train loss 7.0863448786 on 1 thread, 7.0863447976 on 2); a fixed
    default keeps the same command's metrics identical on every machine, whatever its load. One thread also
    holds its speed on a shared machine, where PyTorch's OpenMP threads slow down several-fold beside busy
    processes (2-core machine, gated_deltanet on ml-100k: 2 threads 26.7K tokens/s idle and 8.2K beside
    one busy process, 1 thread 15.8K and 15.3K); pass a count to use more cores."""
    if option != "auto":
        if not option.isdigit() or int(option) < 1:
            raise OptionError(f"option --threads: expected 'auto' or a count >= 1, got {option!r}")
        return int(option)
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    return 1


def bench(dataset_name: str, models: list[str], seeds: list[int], config: TrainConfig,
          data_options: dict | None = None, results_dir=LOCAL_RESULTS_DIR, command: str | None = None,
          resume: bool = False, checkpoint_dir: Path = CHECKPOINT_DIR) -> dict:
    """Run the benchmark; returns {(model, seed): result} of the runs trained (and finished) now."""
    data_options = data_options or {}
    check_bench_options(dataset_name, models, config, data_options)
    world = distributed.start(resolve_device(config.device))
    previous_handlers = {number: signal.signal(number, _raise_interrupt) for number in STOP_SIGNALS}
    finished = False
    try:
        results = _bench(world, dataset_name, models, seeds, config, data_options, Path(results_dir),
                         command or "prism-rec " + " ".join(shlex.quote(a) for a in sys.argv[1:]), resume,
                         Path(checkpoint_dir))
        finished = True
        return results
    finally:
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)
        distributed.stop(world, finished)


def _check_sample_size(dataset, config: TrainConfig) -> None:
    """--sampled against the catalogue, which it needs: checked once the dataset is loaded, before anything
    trains or is logged."""
    try:
        check_sampled(dataset, config.sampled, config.exclude_history)
    except ValueError as error:
        raise OptionError(str(error)) from None


def _bench(world: distributed.World, dataset_name: str, models: list[str], seeds: list[int], config: TrainConfig,
           data_options: dict, results_dir: Path, command: str, resume: bool, checkpoint_dir: Path) -> dict:
    if not world.is_main:  # rank 0 prepares (and caches) the dataset first
        world.barrier()
    dataset = load_dataset(dataset_name, **data_options)
    if world.is_main:
        world.barrier()
    _check_sample_size(dataset, config)
    keys = [(model, seed) for model in models for seed in (seeds if trains(model) else seeds[:1])]

    def run_hash_for(model: str, seed: int) -> str:
        return run_hash(dataset_name, dataset.options, model, replace(config, seed=seed))

    def checkpoint_for(model: str, seed: int) -> Path:
        return checkpoint_file(dataset_name, model, seed, run_hash_for(model, seed), checkpoint_dir)

    if not world.is_main:
        return _follow(world, dataset, keys, config, checkpoint_for)
    experiment = experiment_id(dataset_name)
    bench_hash = config_hash({"dataset": dataset_name, "data": dataset.options, "models": models, "seeds": seeds,
                              "train": replace(config, seed=0).identity()})
    try:
        _clear_leftovers(experiment, checkpoint_dir)
        parent_id, plan = _plan(experiment, bench_hash, keys, run_hash_for, checkpoint_for, resume, dataset, config,
                                 world.size)
    except Exception as error:
        world.broadcast_object(error)  # the other ranks raise it too
        raise
    world.broadcast_object({key: planned.action for key, planned in plan.items()})
    if resume and parent_id is None and not plan:
        print(f"--resume: nothing interrupted with these settings in experiment {dataset_name!r}; starting anew")
    _print_dataset(dataset, world)
    device = world.device(resolve_device(config.device))
    tags = {**provenance_tags(device), **process_tags(), "dataset": dataset_name, "command": command,
            "world_size": str(world.size), "dataset_stats": dataset_stats_tag(dataset)}
    started = time.perf_counter()
    with runs.active_run(run_id=parent_id, experiment_id=None if parent_id else experiment,
                         run_name=None if parent_id else f"bench-{time.strftime('%Y%m%d-%H%M%S')}",
                         tags={**tags, "prism_rec_role": "parent", "config_hash": bench_hash}) as parent:
        if parent_id is None:
            runs.log_params({"dataset": dataset_name, "models": ",".join(models), "seeds": len(seeds),
                             "seed_values": ",".join(map(str, seeds)), "device": str(device),
                             **{f"data.{k}": v for k, v in dataset.options.items()}})
        results, failures = _train_children(world, dataset, keys, config, plan, checkpoint_for, device, experiment,
                                            {**tags, "mlflow.parentRunId": parent, BENCH_TAG: runs.run_name(parent)})
        if results or any(planned.action == FINISHED for planned in plan.values()):
            _report(experiment, parent, dataset_name, results_dir)
            print(f"{len(results)} training run(s) in {time.perf_counter() - started:.0f} s")
        if failures:
            runs.note_failures(failures)
    if failures:
        raise BenchFailures(f"{len(failures)} run(s) failed (tracebacks above): " + "; ".join(failures))
    return results


def _follow(world: distributed.World, dataset, keys: list[tuple[str, int]], config: TrainConfig,
            checkpoint_for: Callable[[str, int], Path]) -> dict:
    """A rank other than 0: the plan rank 0 broadcasts (or its error, raised here too), then its share of the
    training."""
    actions = world.broadcast_object(None)
    if isinstance(actions, Exception):
        raise actions
    return _train_silently(world, dataset, keys, config, actions, checkpoint_for)


def _clear_leftovers(experiment: str, checkpoint_dir: Path) -> None:
    """What killed processes left: temporary checkpoint files of interrupted writes (removed), runs left
    RUNNING (marked KILLED) and KILLED runs whose settings have since finished (tagged superseded_by)."""
    for path in remove_stale_temporaries(checkpoint_dir):
        print(f"removed {path}, left by a checkpoint write that was killed")
    for name in end_runs_of_dead_processes(experiment):
        print(f"run {name} was left RUNNING by a process that no longer runs: marked KILLED")
    for name in runs.mark_superseded(experiment):
        print(f"run {name} was killed and its settings have since trained to the end: tagged superseded_by")


def _train_children(world: distributed.World, dataset, keys: list[tuple[str, int]], config: TrainConfig,
                    plan: dict[tuple[str, int], Planned], checkpoint_for: Callable[[str, int], Path],
                    device: torch.device, experiment: str, tags: dict) -> tuple[dict, list[str]]:
    """Every (model, seed) not finished before, in order, as child runs of the active parent run (``tags``
    name it); returns {(model, seed): result} of those that finished and a line per failure."""
    results, failures = {}, []
    for index, (model, seed) in enumerate(keys, start=1):
        planned = plan.get((model, seed), Planned(FRESH))
        if planned.action == FINISHED:
            print(f"[{index}/{len(keys)}] {model} seed {seed}: finished before the interruption, kept")
            continue
        path = checkpoint_for(model, seed)
        lock = RunLock(path)
        busy = world.broadcast_object(_claim(lock, planned, path))
        if busy:
            print(f"[{index}/{len(keys)}] {model} seed {seed}: skipped, {busy}")
            continue
        print(f"[{index}/{len(keys)}] {model} seed {seed}"
              + (f": resuming from {path} ({len(planned.history)} epoch(s) done)" if planned.action == RESUME else ""))
        try:
            result = _run_child(world, dataset, model, replace(config, seed=seed), planned, path, device,
                                experiment, tags)
            path.unlink(missing_ok=True)  # after the run ended FINISHED (a kill in between keeps both), locked
        except Exception as error:  # a crashing backbone must not take the others down
            traceback.print_exc()
            failures.append(f"{model} seed {seed}: {type(error).__name__}: {error}")
            continue
        finally:
            lock.release()
        results[(model, seed)] = result
    return results, failures


def _claim(lock: RunLock, planned: Planned, path: Path) -> str:
    """Take the run's lock (held through its training); "" when taken, else why the run is not trained here:
    another process holds the lock, or a checkpoint appeared since planning (a run another process began)."""
    if not lock.acquire():
        holder = f"process {lock.holder}" if lock.holder else "another process"
        return f"being trained by {holder} (lock {lock.path}); its checkpoint is left alone"
    if planned.action == FRESH and path.exists():
        lock.release()
        return f"another process left a checkpoint {path} since this bench began; continue it with --resume"
    return ""


def _print_dataset(dataset, world: distributed.World) -> None:
    stats = dataset.stats()
    print(f"{dataset.name}: {stats['users']:,} users, {stats['items']:,} items, "
          f"{stats['interactions']:,} interactions, split {dataset.options['split']}"
          + (f"; {world.size} data-parallel processes" if world.distributed else ""))


def _run_child(world: distributed.World, dataset, model: str, run_config: TrainConfig, planned: Planned, path: Path,
               device: torch.device, experiment: str, tags: dict) -> FitResult:
    """One (model, seed) as a child run (new or resumed) under the active parent run; an interruption
    says where its checkpoint is."""
    run = child_run(dataset, model, run_config, device, world.size, world.distributed)
    try:
        with runs.active_run(run_id=planned.child_id, experiment_id=None if planned.child_id else experiment,
                             run_name=f"{model}-s{run_config.seed}", nested=True,
                             tags={**tags, **run["tags"]}) as child:
            return _train_child(world, dataset, model, run_config, run, planned, path, child)
    except KeyboardInterrupt:
        if path.exists():
            print(f"\ninterrupted: checkpoint {path}; continue with --resume (make bench ... RESUME=1)",
                  file=sys.stderr)
        raise


def _report(experiment: str, parent_id: str, dataset_name: str, results_dir: Path) -> None:
    """The bench's comparison and paired differences (logged on the parent run) and the user's tables, printed
    with where they are."""
    children = runs.bench_children(experiment, parent_id)
    comparison, cells = runs.log_comparison(children, dataset_name)
    print()
    print(comparison)
    comparisons, best = against_best(cells, dataset_name)
    if comparisons:
        text = (f"Paired differences against the best mean, {best} (headline verdict rule, verdicts.py: Holm over "
                f"the family's Welch p over seeds, the test users' interval at level 1 − α/m):\n\n"
                f"{comparison_table(comparisons, set())}\n")
        print(text)
        n_users = next(cell.per_user.shape[1] for cell in cells if cell.per_user is not None)
        runs.log_table(paired_columns(comparisons, n_users), PAIRED_TABLE, text)
    improving = still_improving(children)
    if improving:
        print(f"{len(improving)} of {len(children)} run(s) still improving at the last epoch (best epoch = last): "
              f"{', '.join(improving)}; more epochs may change the ranking")
    markdown, csv, chart = write_tables(dataset_name, results_dir)
    print(f"\nYour AUC table (every finished run of this protocol in the store): {markdown} and {csv}, "
          f"chart {chart}")
    print(f"Published headline tables (H200, not touched by bench): {RESULTS_DIR / dataset_name / 'auc.md'}")
    print(f"This bench's comparison: MLflow parent run {parent_id} (`make ui` prints its links)")


def against_best(cells: list[Cell], dataset_name: str) -> tuple[list[Comparison], str]:
    """The best mean test AUC's model minus every other model with per-user AUC, as one family of the headline
    verdict rule (verdicts.family), and the best model (empty when fewer than two models have runs)."""
    ranked = sorted((cell for cell in cells if cell.runs), key=lambda cell: -cell.mean)
    if len(ranked) < 2 or ranked[0].per_user is None:
        return [], ranked[0].model if ranked else ""
    best = ranked[0]
    others = [cell for cell in ranked[1:] if cell.per_user is not None]
    if not others:
        return [], best.model
    data = {cell.model: (cell.aucs, cell.per_user) for cell in [best, *others]}
    return family([(best.model, cell.model) for cell in others], data, dataset_name), best.model


def paired_columns(comparisons: list[Comparison], n_users: int) -> dict[str, list]:
    """The columns of the paired-differences table artifact: a row per comparison over ``n_users`` test users."""
    return {"difference": [f"{c.first} − {c.second}" for c in comparisons],
            "mean": [c.seeds.mean for c in comparisons],
            "users_low": [c.users.low for c in comparisons], "users_high": [c.users.high for c in comparisons],
            "users_level": [c.users.level for c in comparisons],
            "welch_low": [c.seeds.low for c in comparisons], "welch_high": [c.seeds.high for c in comparisons],
            "seeds": [f"{c.seeds.n_a}/{c.seeds.n_b}" for c in comparisons],
            "n_users": [n_users] * len(comparisons),
            "holm_p": [c.adjusted_p for c in comparisons], "verdict": [c.verdict for c in comparisons]}


def still_improving(children) -> list[str]:
    """The run names of the trained ``children`` (MLflow child runs) whose best epoch is their last one."""
    return [child["tags.mlflow.runName"] for _, child in children.iterrows()
            if trains(child["tags.model"]) and child["metrics.best_epoch"] == child["metrics.epochs_run"]]


def _train_child(world: distributed.World, dataset, model: str, run_config: TrainConfig, run: dict,
                 planned: Planned, path: Path, run_id: str) -> FitResult:
    """Train one (model, seed) inside its active child run (prepared by runs.prepare_child), per-epoch
    metrics at step = epoch (1-based), then the result."""
    runs.prepare_child(run_id, run, planned.child_id is None, planned.history)
    trainer = fit_recbole if is_recbole(model) else fit
    result = trainer(dataset, model, run_config, on_epoch=lambda epoch, metrics: runs.log_epoch(metrics, epoch + 1),
                 checkpoint_path=path, resume=planned.action == RESUME, world=world)
    # the one validation row of a recommender that does not train is no curve
    runs.log_result(result, f"{dataset.name} {model} seed {run_config.seed}", curve=trains(model))
    print(f"    test AUC {result.test['auc']:.4f}  Hit@10 {result.test['hit_10']:.4f}  "
          f"best epoch {result.best_epoch}/{result.epochs_run}  "
          f"{result.train_tokens_per_s:,.0f} tokens/s  {result.wall_seconds:.1f} s")
    if trains(model) and result.best_epoch == result.epochs_run:
        print(f"    warning: still improving at the last epoch ({result.epochs_run}): more epochs may change the "
              "ranking")
    return result


def _train_silently(world: distributed.World, dataset, keys: list[tuple[str, int]], config: TrainConfig,
                    actions: dict, checkpoint_for: Callable[[str, int], Path]) -> dict:
    """What a rank other than 0 does: the same trainings in step with rank 0, without MLflow or files."""
    for model, seed in keys:
        action = actions.get((model, seed))
        if action == FINISHED or world.broadcast_object(None):  # rank 0 did not claim the run
            continue
        try:
            fit(dataset, model, replace(config, seed=seed), checkpoint_path=checkpoint_for(model, seed),
                resume=action == RESUME, world=world)
        except Exception:  # rank 0 reports the failure and carries on with the next run, and so do we
            continue
    return {}


def _plan(experiment: str, bench_hash: str, keys: list[tuple[str, int]], run_hash_for: Callable[[str, int], str],
          checkpoint_for: Callable[[str, int], Path], resume: bool, dataset, config: TrainConfig,
          world_size: int) -> tuple[str | None, dict[tuple[str, int], Planned]]:
    """The parent run to reopen (None: a new one) and what to do with each (model, seed) that is not
    trained from scratch. Refuses a run that a live process of this host trains, a checkpoint without
    ``resume``, and an unreadable or foreign checkpoint, each with a message naming it."""
    hashes = {run_hash_for(*key): key for key in keys}
    for run in runs.running_children(experiment, socket.gethostname()):  # dead processes' were marked KILLED
        if run["config_hash"] in hashes:
            model, seed = hashes[run["config_hash"]]
            raise ValueError(f"{model} seed {seed} is being trained by process {run['pid']} "
                             f"(MLflow run {run['run_id']}); wait for it or stop it")
    checkpoints = {key: checkpoint_for(*key) for key in keys if checkpoint_for(*key).exists()}
    if not resume:
        if checkpoints:
            raise OptionError(f"option --resume: {len(checkpoints)} interrupted run(s) with these settings have a "
                              f"checkpoint ({', '.join(map(str, checkpoints.values()))}); continue with --resume "
                              "(make bench ... RESUME=1), or delete the file(s) to train from scratch")
        return None, {}
    parent_id = runs.newest_killed_parent(experiment, bench_hash)
    children = {}
    for child_hash, status, child_id in ([] if parent_id is None else runs.children_of(experiment, parent_id)):
        key = hashes.get(child_hash)
        if key is not None and key not in children:
            children[key] = (status, child_id)
    plan = {}
    for key in keys:
        status, child_id = children.get(key, (None, None))
        if status == "FINISHED":  # killed after the run ended, before its checkpoint was deleted
            plan[key] = Planned(FINISHED, child_id)
            lock = RunLock(checkpoints[key]) if key in checkpoints else None
            if lock is not None and lock.acquire():  # not while another process trains the run again
                checkpoints.pop(key).unlink()
                lock.release()
        elif key not in checkpoints and status in ("KILLED", "FAILED"):  # stopped before its first checkpoint:
            plan[key] = Planned(FRESH, child_id)  # trained anew in that run, not beside it
        elif key in checkpoints:
            state = read_checkpoint(checkpoints[key], run_identity(key[0], replace(config, seed=key[1]), dataset,
                                                                   world_size))
            plan[key] = Planned(RESUME, child_id if status in ("KILLED", "FAILED") else None,
                                state["progress"]["history"])
    return parent_id, plan
