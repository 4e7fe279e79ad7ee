"""``prism-rec data ...``: command-line entry points of the data pipeline."""

from __future__ import annotations

import argparse
import json

from .sources import load_dataset


def add_parser(subparsers) -> None:
    data = subparsers.add_parser("data", help="prepare datasets")
    commands = data.add_subparsers(dest="data_command", required=True)
    prepare = commands.add_parser("prepare", help="filter, split and cache a registered dataset")
    prepare.add_argument("--dataset", required=True)
    prepare.add_argument("--raw-dir")
    prepare.add_argument("--out", help="processed cache folder (default datasets/processed)")
    prepare.add_argument("--min-user-interactions", type=int)
    prepare.add_argument("--min-item-interactions", type=int)
    prepare.add_argument("--split", choices=("loo", "time"), default="loo")
    prepare.add_argument("--dedup", choices=("none", "first", "last"), default="none")
    prepare.add_argument("--skip-bad-lines", action="store_true")
    prepare.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> None:
    dataset = load_dataset(
        args.dataset, raw_dir=args.raw_dir, processed_dir=args.out, split=args.split,
        min_user_interactions=args.min_user_interactions, min_item_interactions=args.min_item_interactions,
        dedup=args.dedup, skip_bad_lines=args.skip_bad_lines,
    )
    print(json.dumps({"dataset": args.dataset, **dataset.stats()}, indent=2))
