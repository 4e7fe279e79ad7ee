"""``prism-rec authors {train,grid,table}``: one run, the budgeted grid, and results/authors_protocol.md.

Every option is checked before any data is read or anything trains; a bad one ends the command with one
line naming it (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ...errors import OptionError
from ...files import write_atomically
from ...training.devices import resolve_device
from .data import check_dataset, load_task
from .grid import grid_configs, run_grid
from .model import check_model
from .report import REPORT, write_report
from .train import RunConfig, describe, run

DEFAULTS = RunConfig(model="sasrec")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    for name in ("epochs", "patience", "batch_size", "n_neighbours", "channel", "n_layers", "n_heads", "feature_seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(DEFAULTS, name))
    parser.add_argument("--lr", type=float, default=DEFAULTS.lr)
    parser.add_argument("--dropout", type=float, default=DEFAULTS.dropout)
    parser.add_argument("--min-user-edges", type=int,
                        help="keep users with at least this many edges (default 40; movies-fedcsr 3)")
    parser.add_argument("--raw-dir", help="folder of the dataset's raw files (default datasets/raw/<name>)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--threads", default="auto", help="CPU threads: a count, or auto (as prism-rec bench)")


def _base_config(args: argparse.Namespace, model: str, head: str) -> RunConfig:
    if args.min_user_edges is not None and args.min_user_edges < 1:
        raise OptionError(f"option --min-user-edges: must be >= 1, got {args.min_user_edges}")
    return RunConfig(model=model, head_width=head, epochs=args.epochs, patience=args.patience, lr=args.lr,
                     batch_size=args.batch_size, n_neighbours=args.n_neighbours, channel=args.channel,
                     n_layers=args.n_layers, n_heads=args.n_heads, dropout=args.dropout,
                     feature_seed=args.feature_seed).check()


def _device(args: argparse.Namespace) -> torch.device:
    from ...experiments.bench import cpu_threads

    threads = cpu_threads(args.threads)
    try:
        device = resolve_device(args.device)
    except (ValueError, RuntimeError) as error:  # resolve_device's messages start "option --device:"
        message = str(error)
        raise OptionError(message if message.startswith("option --device") else f"option --device: {message}") from None
    torch.set_num_threads(threads)
    return device


def _seeds(text: str) -> list[int]:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise OptionError(f"option --seeds: expected a count >= 1, got {text!r}")
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
    record = run(load_task(args.dataset, args.min_user_edges, args.raw_dir), config, device)
    print(describe(record))
    if args.record:
        write_atomically(Path(args.record), json.dumps(record, sort_keys=True))
        print(f"wrote {args.record}")


def command_grid(args: argparse.Namespace) -> None:
    if args.budget is not None and not args.budget > 0:
        raise OptionError(f"option --budget: must be a positive number of seconds, got {args.budget}")
    models, heads = _names(args.models, "--models"), _names(args.head_widths, "--head-widths")
    datasets, seeds = _names(args.datasets, "--datasets"), _seeds(args.seeds)
    jobs = grid_configs(datasets, _base_config(args, "null", "per-backbone"), models, heads, seeds)
    device = _device(args)
    counts = run_grid(Path(args.out), jobs, args.budget, device, args.min_user_edges, args.raw_dir)
    print(f"authors grid: {counts['finished']} finished, {counts['skipped']} already done, "
          f"{counts['unstarted']} left for the next call ({args.out}/manifest.jsonl)")
    if counts["unstarted"]:
        sys.exit(3)


def command_table(args: argparse.Namespace) -> None:
    folders = [Path(folder) for folder in _names(args.source, "--from")]
    print(f"wrote {write_report(folders, Path(args.report), args.invocation)}")


def add_parser(subparsers) -> None:
    """Add ``authors`` (train, grid, table) to ``subparsers`` (an argparse sub-parser action)."""
    authors = subparsers.add_parser("authors", help="the authors' link-prediction protocol "
                                    "(results/authors_protocol.md)", description=__doc__.split("\n\n")[0])
    commands = authors.add_subparsers(dest="authors_command", required=True)
    train = commands.add_parser("train", help="train and evaluate one model under the authors' protocol")
    train.add_argument("--dataset", default="ml-100k")
    train.add_argument("--model", default="sasrec")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--head-width", default=DEFAULTS.head_width, help="per-backbone (the authors') or a width")
    train.add_argument("--record", help="also write the run's record (JSON) here")
    _add_run_options(train)
    train.set_defaults(func=command_train)
    grid = commands.add_parser("grid", help="train the grid's runs not yet in OUT/manifest.jsonl")
    grid.add_argument("--out", required=True, help="folder of the manifest and the test cases")
    grid.add_argument("--budget", type=float, help="wall-clock seconds; no run starts after them")
    grid.add_argument("--datasets", default="ml-100k")
    grid.add_argument("--models", default="sasrec,prism-authors,gdn-authors,null,pop")
    grid.add_argument("--seeds", default="1", help="a count N: seeds 0..N-1")
    grid.add_argument("--head-widths", default=DEFAULTS.head_width,
                      help="comma list of per-backbone and/or widths, e.g. per-backbone,64")
    _add_run_options(grid)
    grid.set_defaults(func=command_grid)
    table = commands.add_parser("table", help="write results/authors_protocol.md from grid folders")
    table.add_argument("--from", dest="source", required=True, help="comma list of grid --out folders")
    table.add_argument("--report", default=str(REPORT))
    table.set_defaults(func=command_table)
