"""The ``prism-rec`` command line: list, bench, tables, import-runs, ui, data, probe, throughput, headline,
split-study, scaling."""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import sys
from pathlib import Path

from . import registry
from .recbole_bridge import config as recbole_models
from .errors import BenchFailures, OptionError
from .options import parse_seeds, resolve_models
from .training.config import PRECISIONS, TrainConfig


def parse_option(text: str) -> tuple[str, object]:
    """'key=value' -> (key, value) with Python-literal values ('3', '0.5', 'True', 'gelu')."""
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"option --option: expected key=value, got {text!r}")
    try:
        return key.replace("-", "_"), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key.replace("-", "_"), value


def parse_cutoffs(text: str) -> tuple[int, ...]:
    """'5,10,20' -> (5, 10, 20)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"option --cutoffs: expected a comma list of integers, got {text!r}") from None


def command_list(args) -> None:
    print("backbones:")
    for name in registry.list_backbones():
        entry = registry.backbone_entry(name)
        line = f"  {name:<18} {entry.description}"
        if args.params:
            backbone = registry.build_backbone(name, d_model=args.d_model)
            count = sum(p.numel() for p in backbone.parameters())
            line = f"  {name:<18} {count:>10,} backbone parameters at d_model={args.d_model}  {entry.description}"
        print(line)
    print("RecBole models (through prism_rec/recbole_bridge: RecBole's own model, loss and trainer on our split):")
    for name in recbole_models.SUPPORTED:
        print(f"  {name:<18} {recbole_models.DESCRIPTIONS[name.removeprefix('recbole:')]}")
    print("datasets:")
    for name in registry.list_datasets():
        print(f"  {name:<18} {registry.get_dataset(name).description}")


def command_bench(args) -> None:
    import torch

    from .experiments.bench import bench, cpu_threads

    torch.set_num_threads(cpu_threads(args.threads))
    models = resolve_models(args.models)
    try:
        source = registry.get_dataset(args.dataset)
    except KeyError as error:
        raise OptionError(f"option --dataset: {error.args[0]}") from None
    config = TrainConfig(
        d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, dropout=args.dropout,
        max_len=args.max_len or source.max_len, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, epochs=args.epochs, patience=args.patience, loss=args.loss,
        n_negatives=args.n_negatives, eval_batch_size=args.eval_batch_size, device=args.device,
        progress=not args.no_progress, backbone_options=dict(args.option), precision=args.precision,
        cutoffs=tuple(args.cutoffs), exclude_history=args.exclude_history, sampled=args.sampled,
    )
    data_options = {"raw_dir": args.raw_dir, "split": args.split, "dedup": args.dedup,
                    "min_user_interactions": args.min_user_interactions,
                    "min_item_interactions": args.min_item_interactions}
    bench(args.dataset, models, parse_seeds(args.seeds), config, data_options, args.results_dir,
          resume=args.resume, checkpoint_dir=args.checkpoint_dir)


def command_tables(args) -> None:
    from .tracking.tables import write_all_tables

    for path in write_all_tables(args.results_dir):
        print(f"wrote {path}")


def command_import_runs(args) -> None:
    from .tracking.records import import_records

    counts = import_records(Path(args.source), args.invocation)
    print(f"{counts['imported']} run(s) imported, {counts['already there']} already in the store")


def command_ui(args) -> None:
    from .tracking.store import tracking_uri, ui_links

    url = f"http://{args.host}:{args.port}"
    print(f"MLflow UI over {tracking_uri()} at {url} (Ctrl-C to stop)")
    links = ui_links(url)
    for name, views in links:
        print(f"\n{name}:")
        for view, link in views.items():
            print(f"  {view + ':':<13} {link}")
    if not links:
        print("no runs in the store yet: `make bench` first")
    print(flush=True)
    os.execvp(sys.executable, [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri(),
                               "--host", args.host, "--port", str(args.port)])


def build_parser() -> argparse.ArgumentParser:
    from .training.checkpoint import CHECKPOINT_DIR
    from .data import commands as data_commands
    from .experiments import scaling, split_study
    from .experiments.headline import driver as headline
    from .experiments.probes import cli as probe_commands
    from .experiments.throughput import command as throughput_command
    from .tracking.tables import LOCAL_RESULTS_DIR

    parser = argparse.ArgumentParser(prog="prism-rec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    listing = commands.add_parser("list", help="registered backbones and datasets")
    listing.add_argument("--params", action="store_true", help="also print parameter counts")
    listing.add_argument("--d-model", type=int, default=64)
    listing.set_defaults(func=command_list)

    defaults = TrainConfig()
    bench = commands.add_parser("bench", help="train and evaluate models on a dataset, log to MLflow")
    bench.add_argument("--dataset", default="ml-100k")
    bench.add_argument("--models", default="sasrec", help="comma-separated backbone names, or 'all'")
    bench.add_argument("--seeds", default="1", help="a count N (seeds 0..N-1) or a comma list")
    bench.add_argument("--epochs", type=int, default=defaults.epochs)
    bench.add_argument("--patience", type=int, default=defaults.patience)
    bench.add_argument("--d-model", type=int, default=defaults.d_model)
    bench.add_argument("--n-layers", type=int, default=defaults.n_layers)
    bench.add_argument("--n-heads", type=int, default=defaults.n_heads)
    bench.add_argument("--dropout", type=float, default=defaults.dropout)
    bench.add_argument("--max-len", type=int, help="training window (default: the dataset's)")
    bench.add_argument("--batch-size", type=int, default=defaults.batch_size)
    bench.add_argument("--eval-batch-size", type=int, default=defaults.eval_batch_size)
    bench.add_argument("--lr", type=float, default=defaults.lr)
    bench.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    bench.add_argument("--loss", choices=("full", "sampled"), default=defaults.loss)
    bench.add_argument("--n-negatives", type=int, default=defaults.n_negatives)
    bench.add_argument("--precision", choices=PRECISIONS, default=defaults.precision,
                       help="bf16: bf16 autocast on CUDA (default); fp32: fp32 with TF32 off (CPU is always fp32)")
    bench.add_argument("--cutoffs", type=parse_cutoffs, default=defaults.cutoffs,
                       help="Hit@K and NDCG@K cutoffs reported besides the table's 10,200,500 (comma list)")
    bench.add_argument("--exclude-history", action="store_true",
                       help="rank each target only against the items outside the user's history (as RecBole)")
    bench.add_argument("--sampled", default=defaults.sampled,
                       help="none (all items, default), or uniform:N / popularity:N sampled negatives per case "
                            "(for comparison with papers that sample only)")
    bench.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    bench.add_argument("--threads", default="auto",
                       help="CPU threads: a count, or auto (default): OMP_NUM_THREADS if set, else 1, whatever the "
                            "load (other counts change the last bits of the metrics)")
    bench.add_argument("--split", choices=("loo", "time"), default="loo")
    bench.add_argument("--dedup", choices=("none", "first", "last"), default="none",
                       help="repeated (user, item) pairs: keep all (none), or only the first or last")
    bench.add_argument("--raw-dir", help="folder of the dataset's raw files (default datasets/raw/<name>)")
    bench.add_argument("--min-user-interactions", type=int)
    bench.add_argument("--min-item-interactions", type=int)
    bench.add_argument("--option", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                       help="backbone option, e.g. --option L=2 (repeatable)")
    bench.add_argument("--results-dir", default=LOCAL_RESULTS_DIR,
                       help="where the table of the store's runs goes (default results/local, git-ignored; the "
                            "published tables in results/<dataset> are never written by bench)")
    bench.add_argument("--no-progress", action="store_true")
    bench.add_argument("--resume", action="store_true",
                       help="continue every run of these settings that has a checkpoint (interrupted or killed)")
    bench.add_argument("--checkpoint-dir", default=CHECKPOINT_DIR,
                       help="where interrupted runs keep their checkpoints (default checkpoints/)")
    bench.set_defaults(func=command_bench)

    tables = commands.add_parser("tables", help="rebuild results/local/<dataset>/auc.md from the MLflow store")
    tables.add_argument("--results-dir", default=LOCAL_RESULTS_DIR)
    tables.set_defaults(func=command_tables)

    import_runs = commands.add_parser("import-runs",
                                      help="log JSON run records (e.g. from a GPU machine) into the store")
    import_runs.add_argument("source", help="folder of *.records.jsonl run records, or one such file")
    import_runs.set_defaults(func=command_import_runs)

    ui = commands.add_parser("ui", help="serve the MLflow UI over the project's store")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=command_ui)

    data_commands.add_parser(commands)
    probe_commands.add_parser(commands)
    throughput_command.add_parser(commands)
    headline.add_parser(commands)
    split_study.add_parser(commands)
    scaling.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run a command; a bad bench option ends it with one line and exit status 2, an interruption with
    status 130, crashed trainings and other errors with status 1."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.invocation = shlex.join(["prism-rec", *argv])  # the command as run, recorded by the runs it trains
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except OptionError as error:
        print(f"prism-rec {args.command}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except BenchFailures as error:
        raise SystemExit(f"prism-rec {args.command}: {error}") from None
    except (ValueError, KeyError, FileNotFoundError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SystemExit(f"prism-rec {args.command}: {message}") from None


if __name__ == "__main__":
    main()
