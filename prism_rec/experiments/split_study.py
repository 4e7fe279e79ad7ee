"""The split question: how far the authors' global time split moves the numbers.

The authors' code (gpr-prism/prism, rec/) splits a dataset by time over all users at once (the first
70% of interactions by timestamp train, the next 15% validate, the last 15% test), while the paper's text
says leave-one-out. ``run`` trains, on ml-100k (real timestamps) and movies-long (whose training items carry
none, so its "time" split is a position split: ``split_label``), sasrec, gated_deltanet, prism and the
authors' presets under ``--split time`` (data/core.py), 3 seeds each, at the learning rate the headline grid
chose for the cell under leave-one-out and otherwise the headline settings; the leave-one-out side of the table
is the headline grid's own runs. ``table`` writes results/split.md.

    prism-rec split-study run --out DIR [--workers N] [--budget S] [--device D]
    prism-rec split-study table

``run`` appends to DIR/split_manifest.jsonl and DIR/split_case_ranks.jsonl (starting from copies of the
committed results/ files, so a later call continues) and skips runs already there.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import registry
from ..data.sources import load_dataset
from ..files import read_jsonl, write_atomically
from ..markdown import fill, pipe_table
from ..paths import RESULTS_DIR, TEMPLATES_DIR
from ..tracking.bootstrap import paired_difference, verdict
from ..tracking.case_ranks import decode
from ..tracking.cells import Cell, seeds_text
from ..tracking.records import append_jsonl, run_hash
from . import tuning
from .campaign import (
    Campaign,
    Executor,
    LocalExecutor,
    Manifest,
    Status,
    add_grid_run_options,
    checkpoint_dir,
    deadline_after,
    executor_from_args,
)
from .headline.driver import HeadlineJob, manifest_entry, train_cell
from .headline.protocol import CASE_RANKS_NAME, MANIFEST_NAME, PROTOCOL, SEEDS, training_config

DATASETS = ("ml-100k", "movies-long")
MODELS = ("sasrec", "gated_deltanet", "prism", "gdn-authors", "prism-authors", "mamba2-authors")
SPLIT = "time"
STUDY_MANIFEST = "split_manifest.jsonl"
STUDY_CASE_RANKS = "split_case_ranks.jsonl"
PAIRS = (("prism", "gated_deltanet"), ("prism", "sasrec"), ("prism-authors", "gdn-authors"),
         ("prism-authors", "sasrec"))


def study_jobs(headline: list[dict], device: str, command: str) -> list[HeadlineJob]:
    """Every (dataset, model, seed) of the study under the time split, at the cell's leave-one-out rate."""
    choices = tuning.chosen_rates([e for e in headline if e.get("protocol") == PROTOCOL])
    jobs = []
    for name in DATASETS:
        options = load_dataset(name, split=SPLIT).options  # prepares the cache the workers read
        for model in MODELS:
            lr = tuning.rate_for(name, model, choices)
            if lr is None:
                raise ValueError(f"{RESULTS_DIR / MANIFEST_NAME}: no chosen leave-one-out rate for {name}/{model} yet; "
                                 "run the headline grid's tuning first")
            for seed in SEEDS:
                config = training_config(name, model, seed, device, {}, lr)
                jobs.append(HeadlineJob(name, model, config, run_hash(name, options, model, config), command, SPLIT))
    return jobs


def run_study(out_dir: Path, workers: int, budget: float | None, device: str, command: str,
              executor: Executor | None = None, checkpoints: Path | None = None) -> dict[str, int]:
    """Train the study's runs missing from ``out_dir``'s manifest on ``executor`` (default: a local pool of
    ``workers`` processes on ``device``), with per-epoch checkpoints in ``checkpoints`` if given; returns
    counts per outcome."""
    deadline = deadline_after(budget)
    executor = executor or LocalExecutor(workers, device)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (STUDY_MANIFEST, STUDY_CASE_RANKS):
        if not (out_dir / name).exists() and (RESULTS_DIR / name).exists():
            shutil.copyfile(RESULTS_DIR / name, out_dir / name)
    manifest = Manifest(out_dir / STUDY_MANIFEST, key=lambda entry: entry["config_hash"])
    case_ranks_path, done = out_dir / STUDY_CASE_RANKS, manifest.keys()
    jobs = [replace(job, checkpoints=checkpoints)
            for job in study_jobs(read_jsonl(RESULTS_DIR / MANIFEST_NAME), executor.job_device, command)
            if job.run_hash not in done]
    campaign = Campaign(executor, deadline, {"already in manifest": len(done)},
                        (Status.FINISHED, Status.DIVERGED, Status.FAILED, Status.ABANDONED))
    print(f"{len(jobs)} time-split runs to train on {executor.describe()}; {len(done)} in {manifest.path}", flush=True)

    def on_result(job: HeadlineJob, status: Status, result: dict) -> None:
        if status is not Status.FINISHED:
            if status is not Status.FAILED:
                print(f"{job.label}: {status.value} {result.get('error', '')}", flush=True)
            return
        record = result["record"]
        manifest.add({**manifest_entry(record), "split": SPLIT})
        append_jsonl(case_ranks_path, {"record_id": record["record_id"], "case_ranks": record["case_ranks"]})
        print(f"{job.label}: test AUC {record['metrics']['test_auc']:.4f}", flush=True)

    campaign.run(jobs, train_cell, on_result, abandon_after=0)
    print(campaign.summary(), flush=True)
    return campaign.counts


def per_user_auc(case_ranks: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The test users [U] (sorted), each one's AUC averaged over their test cases [U] and their case
    counts [U]."""
    ranks = decode(case_ranks)
    users, index = np.unique(ranks.users, return_inverse=True)
    cases = np.bincount(index)
    return users, np.bincount(index, weights=ranks.auc()) / cases, cases


def _cells(manifest: list[dict], case_ranks: dict[str, dict], split: str) -> dict[tuple[str, str], Cell]:
    """(dataset, model) -> the cell of the runs of ``split`` with case ranks: per-user AUC [S, U] over the
    sorted test users, each user weighted by their test cases [U]."""
    found: dict[tuple[str, str], tuple[list, np.ndarray, np.ndarray, list]] = {}
    for entry in sorted(manifest, key=lambda e: e["seed"]):
        key = (entry["dataset"], entry["model"])
        if key[0] not in DATASETS or key[1] not in MODELS or entry["record_id"] not in case_ranks:
            continue
        users, values, cases = per_user_auc(case_ranks[entry["record_id"]])
        runs, first_users, _, rows = found.setdefault(key, ([], users, cases, []))
        if not np.array_equal(users, first_users):
            raise ValueError(f"{key[0]}/{key[1]} ({split}): seeds were tested on different users")
        runs.append(entry)
        rows.append(values)
    return {key: Cell(*key, runs, len(runs), per_user=np.stack(rows), cases=cases)
            for key, (runs, _, cases, rows) in found.items()}


def _ranks(cells: dict, dataset: str) -> dict[str, int]:
    means = {model: cells[(dataset, model)].mean for model in MODELS if (dataset, model) in cells}
    return {model: position for position, model in enumerate(sorted(means, key=means.get, reverse=True), 1)}


def _summary(splits: dict[str, dict], dataset: str, changed: list[str]) -> str:
    """One computed sentence per dataset: the orders under both splits, the shift, the verdicts that change."""
    both = [m for m in MODELS if all((dataset, m) in cells for cells in splits.values())]
    if not both:
        return "No backbone has runs under both splits yet."
    orders = {split: sorted(both, key=lambda m: -cells[(dataset, m)].mean) for split, cells in splits.items()}
    shifts = [splits["time"][(dataset, m)].mean - splits["loo"][(dataset, m)].mean for m in both]
    return fill(TEMPLATES_DIR / "split_summary.md", backbones=len(both), loo_order=" > ".join(orders["loo"]),
                time_order=" > ".join(orders["time"]), other=split_label(dataset),
                same_order="the same" if orders["loo"] == orders["time"] else "a different order",
                lowest_shift=f"{min(shifts):+.4f}", highest_shift=f"{max(shifts):+.4f}",
                changed=", ".join(changed) or "none")


def split_label(dataset: str) -> str:
    """What ``--split time`` is on ``dataset``: "time split", or "position split" where its source's interactions
    carry no times (DatasetSource.untimed: positions stand in for them)."""
    return "position split" if registry.get_dataset(dataset).untimed else "time split"


def split_markdown(splits: dict[str, dict], commands: list[str]) -> str:
    """results/split.md from the cells of each split ("loo": the headline runs, "time": the study's)."""
    lines = [fill(TEMPLATES_DIR / "split_intro.md", date=time.strftime("%Y-%m-%d"), study_manifest=STUDY_MANIFEST,
                  study_case_ranks=STUDY_CASE_RANKS, manifest=MANIFEST_NAME, case_ranks=CASE_RANKS_NAME), ""]
    for dataset in DATASETS:
        rows = []
        ranks = {split: _ranks(cells, dataset) for split, cells in splits.items()}
        for model in MODELS:
            row = [model]
            for split, cells in splits.items():
                cell = cells.get((dataset, model))
                if cell is None:
                    row += ["missing", "—", "—"]
                    continue
                low, high = cell.interval()
                row += [seeds_text(cell.aucs, cell.expected), f"[{low:.4f}, {high:.4f}]",
                        str(ranks[split][model])]
            both = [splits[s].get((dataset, model)) for s in ("loo", "time")]
            row.append(f"{both[1].mean - both[0].mean:+.4f}" if all(both) else "—")
            rows.append(row)
        other = split_label(dataset)
        word = other.split()[0]
        note = [] if other == "time split" else [
            f"{dataset}'s training items carry no timestamps ({registry.get_dataset(dataset).untimed}), so the "
            f"loader takes each item's position in its history as its time: the `--split time` columns below are a "
            f"position split (the global 70%/85% quantiles of positions), not the authors' time split.", ""]
        lines += [f"## {dataset} ({other})", "", *note, pipe_table(
            ["backbone", "loo test AUC", "loo 95% CI", "loo rank", f"{word} test AUC", f"{word} 95% CI",
             f"{word} rank", f"{word} − loo"], rows, align="lrrrrrrr"), ""]
        pair_rows, changed = [], []
        for a, b in PAIRS:
            row, signs = [f"{a} − {b}"], []
            for cells in splits.values():
                first, second = cells.get((dataset, a)), cells.get((dataset, b))
                if first is None or second is None:
                    row.append("missing")
                    continue
                difference = paired_difference(first.per_user, second.per_user, cases=first.cases)
                words = "✱" if difference.significant else f", {verdict(difference)}"
                row.append(f"{difference.mean:+.4f} [{difference.low:+.4f}, {difference.high:+.4f}]{words}")
                signs.append(int(np.sign(difference.mean)) if difference.significant else 0)
            pair_rows.append(row)
            if len(signs) == 2 and signs[0] != signs[1]:
                changed.append(f"{a} − {b}")
        lines += ["Paired differences (95% paired bootstrap over test users; ✱: the interval excludes 0 and Welch's "
                  "t-test over the seeds' mean AUCs gives p < 0.05):", "",
                  pipe_table(["difference", "leave-one-out", other], pair_rows, align="lrr"), "",
                  _summary(splits, dataset, changed), ""]
    lines += ["## Commands", "", "Time-split runs: " + ("; ".join(f"`{c}`" for c in commands) or "none yet") + ".",
              "Leave-one-out runs: see results/v2/README.md (Reproducing).", ""]
    return "\n".join(lines)


def write_table(results_dir: Path = RESULTS_DIR) -> Path:
    """Write results_dir/split.md; returns its path."""
    study = read_jsonl(results_dir / STUDY_MANIFEST)
    headline = [e for e in read_jsonl(results_dir / MANIFEST_NAME) if e.get("protocol") == PROTOCOL]
    selected = [e for e in tuning.selected_entries(headline) if e["model"] in MODELS and e["dataset"] in DATASETS]
    wanted = {e["record_id"] for e in [*study, *selected]}
    case_ranks = {row["record_id"]: row["case_ranks"]
                  for name in (STUDY_CASE_RANKS, CASE_RANKS_NAME) for row in read_jsonl(results_dir / name)
                  if row["record_id"] in wanted}
    splits = {"loo": _cells(selected, case_ranks, "loo"), "time": _cells(study, case_ranks, SPLIT)}
    path = results_dir / "split.md"
    write_atomically(path, split_markdown(splits, sorted({e["command"] for e in study})))
    return path


def add_parser(subparsers) -> None:
    """Add ``split-study`` (run, table) to ``subparsers`` (an argparse sub-parser action)."""
    study = subparsers.add_parser("split-study", help="the time split against leave-one-out (results/split.md)",
                                  description=__doc__.split("\n\n")[0])
    commands = study.add_subparsers(dest="split_command", required=True)
    run = commands.add_parser("run", help="train the time-split runs not yet in DIR's manifest")
    add_grid_run_options(run, "folder of the time-split manifest and case ranks")
    run.set_defaults(func=command_run)
    table = commands.add_parser("table", help="write results/split.md")
    table.set_defaults(func=lambda args: print(f"wrote {write_table()}"))


def command_run(args: argparse.Namespace) -> None:
    executor = executor_from_args(args, args.budget)
    try:
        counts = run_study(args.out, 1, args.budget, args.device, args.invocation, executor,
                           checkpoint_dir(args, executor))
    finally:
        executor.close()
    if counts[Status.FAILED.value]:
        sys.exit(1)
