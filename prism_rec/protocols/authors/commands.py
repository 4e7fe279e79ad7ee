"""``prism-rec authors {train,grid,table}``: one run, the budgeted grid, and results/authors_protocol.md.

Every option is checked before any data is read or anything trains; a bad one ends the command with one
line naming it (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from ...errors import OptionError
from ...experiments import tuning
from ...experiments.campaign import DEVICE_HELP, add_executor_options, executor_from_args
from ...experiments.headline.v3 import V3, grid_from_option
from ...files import write_atomically
from ...training.devices import ONE_DEVICE_HELP, resolve_device
from .data import check_dataset, load_task
from .design import DESIGN_MODELS, DESIGN_SEEDS, EQUAL_HEAD, Design
from .grid import check_scan_option, run_grid
from .model import SCAN_BACKENDS, check_model, check_scan_backend, head_width
from .next_item import NEXT_ITEM_MANIFESTS
from .report import REPORT, write_report
from .train import GRAPHED_MODELS, RunConfig, describe, run

DEFAULTS = RunConfig(model="sasrec")


def _add_run_options(parser: argparse.ArgumentParser, device_help: str) -> None:
    for name in ("epochs", "patience", "batch_size", "n_neighbours", "channel", "n_layers", "n_heads", "feature_seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(DEFAULTS, name))
    parser.add_argument("--lr", type=float, help=f"learning rate (train; default {DEFAULTS.lr:g}); the grid "
                                                 f"chooses its own (--lr-grid)")
    parser.add_argument("--dropout", type=float, default=DEFAULTS.dropout)
    parser.add_argument("--min-user-edges", type=int,
                        help="keep users with at least this many edges (default 40; movies-fedcsr 3)")
    parser.add_argument("--raw-dir", help="folder of the dataset's raw files (default datasets/raw/<name>)")
    parser.add_argument("--device", default="auto", help=device_help)
    parser.add_argument("--threads", default="auto", help="CPU threads: a count, or auto (as prism-rec bench)")
    parser.add_argument("--scan-backend", default="auto",
                        help="the delta scan's backend in the backbones that run it (kernels/delta_scan.py: "
                             f"{', '.join(SCAN_BACKENDS)}; default auto, the Triton kernels on CUDA); the grid "
                             "gives it to those models only; the record's 'scan' names the one used")
    parser.add_argument("--eager", action="store_true",
                        help="train every batch eagerly (default on CUDA: the full batches of "
                             f"{', '.join(sorted(GRAPHED_MODELS))} replay CUDA graphs)")


def _base_config(args: argparse.Namespace, model: str, head: str) -> RunConfig:
    if args.min_user_edges is not None and args.min_user_edges < 1:
        raise OptionError(f"option --min-user-edges: must be >= 1, got {args.min_user_edges}")
    return RunConfig(model=model, head_width=head, epochs=args.epochs, patience=args.patience,
                     lr=DEFAULTS.lr if args.lr is None else args.lr, batch_size=args.batch_size,
                     n_neighbours=args.n_neighbours, channel=args.channel, n_layers=args.n_layers,
                     n_heads=args.n_heads, dropout=args.dropout, feature_seed=args.feature_seed).check()


def _threads(args: argparse.Namespace) -> int:
    from ...experiments.bench import cpu_threads

    return cpu_threads(args.threads)


def _device(args: argparse.Namespace) -> torch.device:
    threads = _threads(args)
    device = _device_named(args.device)
    torch.set_num_threads(threads)
    return device


def _device_named(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except (ValueError, RuntimeError) as error:  # resolve_device's messages start "option --device:"
        message = str(error)
        raise OptionError(message if message.startswith("option --device") else f"option --device: {message}") from None


def _seeds(text: str) -> list[int]:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise OptionError(f"option --seeds: need at least one seed, got {text!r}")
    return list(range(count))


def _names(text: str, option: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise OptionError(f"option {option}: empty list")
    return names


def command_train(args: argparse.Namespace) -> None:
    check_dataset(args.dataset)
    config = _base_config(args, check_model(args.model), args.head_width)
    config = RunConfig(**{**config.to_dict(), "seed": args.seed}).check()
    device = _device(args)
    check_scan_backend(args.scan_backend, config.model, device)
    record = run(load_task(args.dataset, args.min_user_edges, args.raw_dir), config, device,
                 graphs=False if args.eager else None, scan_backend=args.scan_backend)
    print(describe(record))
    if args.record:
        write_atomically(Path(args.record), json.dumps(record, sort_keys=True))
        print(f"wrote {args.record}")


def _design(args: argparse.Namespace) -> Design:
    if args.budget is not None and not 0 < args.budget < float("inf"):
        raise OptionError(f"option --budget: must be a finite number in (0, inf) of seconds, got {args.budget}")
    if args.lr is not None:
        raise OptionError("option --lr: the grid chooses its rates on seed 0 (--lr-grid gives the start grid)")
    models, datasets = _names(args.models, "--models"), _names(args.datasets, "--datasets")
    for dataset in datasets:
        check_dataset(dataset, "--datasets")
    for model in models:
        check_model(model, "--models")
    try:
        tuning.check_bases(models)
    except ValueError as error:
        raise OptionError(str(error)) from None
    equal = None if args.equal_head == "none" else str(head_width("null", args.equal_head, 1, option="--equal-head"))
    grid = V3.grid if args.lr_grid is None else grid_from_option(args.lr_grid, V3)
    return Design(tuple(datasets), tuple(models), tuple(_seeds(args.seeds)), _base_config(args, "null", "per-backbone"),
                  grid, equal)


def command_grid(args: argparse.Namespace) -> None:
    design = _design(args)
    threads = _threads(args)
    executor = executor_from_args(args, args.budget)
    torch.set_num_threads(threads)  # every run trains with it (grid.GridJob.threads)
    try:
        check_scan_option(args.scan_backend, design, executor)  # run_grid checks it too; here before any work
        counts = run_grid(Path(args.out), design, args.budget, min_user_edges=args.min_user_edges,
                          raw_dir=args.raw_dir, executor=executor,
                          graphs=False if args.eager else None, scan_backend=args.scan_backend)
    finally:
        executor.close()
    failed = f"{counts['failed']} failed, " if counts["failed"] else ""
    print(f"authors grid: {counts['finished']} finished, {counts['dropped']} dropped at the budget, {failed}"
          f"{counts['pending']} ready for the next call ({args.out}/manifest.jsonl)")
    if counts["pending"]:
        sys.exit(3)


def command_table(args: argparse.Namespace) -> None:
    folders = [Path(folder) for folder in _names(args.source, "--from")]
    next_item = tuple(Path(path) for path in _names(args.next_item, "--next-item"))
    print(f"wrote {write_report(folders, Path(args.report), args.invocation, next_item)}")


def add_bench_options(group) -> list[argparse.Action]:
    """``prism-rec bench``'s options of this protocol (``--protocol authors``) on ``group``, each defaulting to
    None (so the command line can tell them given); returns their actions."""
    return [group.add_argument("--head-width", help="per-backbone (the authors', default) or a width"),
            *(group.add_argument(f"--{name.replace('_', '-')}", type=int,
                                 help=f"default {getattr(DEFAULTS, name)}")
              for name in ("n_neighbours", "channel", "feature_seed")),
            group.add_argument("--min-user-edges", type=int,
                               help="keep users with at least this many edges (default 40; movies-fedcsr 3)"),
            group.add_argument("--scan-backend", help="the delta scan's backend in the backbones that run it "
                                                      f"({', '.join(SCAN_BACKENDS)}; default auto)"),
            group.add_argument("--eager", action="store_true", default=None,
                               help="train every batch eagerly (default on CUDA: the full batches of "
                                    f"{', '.join(sorted(GRAPHED_MODELS))} replay CUDA graphs)")]


def command_bench(args: argparse.Namespace) -> None:
    """``prism-rec bench --protocol authors``: every model and seed trained under this protocol and logged to
    MLflow (bench.py); the shared training options left out take the authors' defaults (train.RunConfig)."""
    from ...options import parse_seeds
    from .bench import bench

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise OptionError("option --protocol authors: its runs train in one process each; start it without "
                          "torchrun (make bench without NPROC)")
    check_dataset(args.dataset)
    models = list(DESIGN_MODELS) if args.models == "all" else _names(args.models, "--models")
    for model in models:
        check_model(model, "--models")
    given = {name: getattr(args, name) for name in ("epochs", "patience", "lr", "batch_size", "dropout", "n_layers",
                                                   "n_heads", "n_neighbours", "channel", "feature_seed")
             if getattr(args, name) is not None}
    if args.min_user_edges is not None and args.min_user_edges < 1:
        raise OptionError(f"option --min-user-edges: must be >= 1, got {args.min_user_edges}")
    base = RunConfig(**{**DEFAULTS.to_dict(), **given, "head_width": args.head_width or DEFAULTS.head_width}).check()
    head_width(base.model, base.head_width, 1)
    device = _device_named(args.device or "auto")
    bench(args.dataset, models, parse_seeds(args.seeds), base, device, min_user_edges=args.min_user_edges,
          raw_dir=args.raw_dir, scan_backend=args.scan_backend or "auto", graphs=False if args.eager else None,
          results_dir=Path(args.results_dir), command=args.invocation)


def add_parser(subparsers) -> None:
    """Add ``authors`` (train, grid, table) to ``subparsers`` (an argparse sub-parser action)."""
    authors = subparsers.add_parser("authors", help="the authors' link-prediction protocol "
                                    "(results/authors_protocol.md)", description=__doc__.split("\n\n")[0])
    commands = authors.add_subparsers(dest="authors_command", required=True)
    train = commands.add_parser("train", allow_abbrev=False,
                                help="train and evaluate one model under the authors' protocol")
    train.add_argument("--dataset", default="ml-100k")
    train.add_argument("--model", default="sasrec")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--head-width", default=DEFAULTS.head_width, help="per-backbone (the authors') or a width")
    train.add_argument("--record", help="also write the run's record (JSON) here")
    _add_run_options(train, ONE_DEVICE_HELP)
    train.set_defaults(func=command_train)
    grid = commands.add_parser("grid", allow_abbrev=False,
                               help="train the design's runs not yet in OUT/manifest.jsonl (design.py); exit status 3 "
                                    "when runs are left for the next call")
    grid.add_argument("--out", required=True, help="folder of the manifest and the test cases")
    grid.add_argument("--budget", type=float, help="wall-clock seconds; a run starts only when it is expected "
                                                   "to end by then")
    grid.add_argument("--workers", type=int, default=1,
                      help="local: training processes sharing the device (--device cuda:0,cuda:1: one each in turn)")
    grid.add_argument("--datasets", default="ml-100k")
    grid.add_argument("--models", default=",".join(DESIGN_MODELS), help="comma list, most informative first")
    grid.add_argument("--seeds", default=str(DESIGN_SEEDS), help="a count N: seeds 0..N-1")
    grid.add_argument("--lr-grid", help="start rates of seed 0's grid (default headline v3's, extended along "
                                        "its ladder)")
    grid.add_argument("--equal-head", default=EQUAL_HEAD,
                      help="the equal-heads arm's width (models with another per-backbone width), or none")
    _add_run_options(grid, DEVICE_HELP)
    add_executor_options(grid)
    grid.set_defaults(func=command_grid)
    table = commands.add_parser("table", allow_abbrev=False,
                                help="write results/authors_protocol.md from grid folders")
    table.add_argument("--from", dest="source", required=True, help="comma list of grid --out folders")
    table.add_argument("--report", default=str(REPORT))
    table.add_argument("--next-item", default=",".join(map(str, NEXT_ITEM_MANIFESTS)),
                       help="comma list of headline manifests holding the next-item runs (read together; default "
                            "results/headline_v3_manifest.jsonl,results/headline_v2_manifest.jsonl)")
    table.set_defaults(func=command_table)
