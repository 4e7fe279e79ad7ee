"""The ``prism-rec`` command line: list, bench, tables, import-runs, ui, data, probe, throughput, headline,
split-study, scaling, authors."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import shlex
import sys
import typing
from pathlib import Path

from . import registry
from .errors import BenchFailures, OptionError
from .options import check_options, opens_store, parse_seeds, resolve_models
from .recbole_bridge import config as recbole_models
from .training.config import TrainConfig


def parse_option(text: str) -> tuple[str, object]:
    """'key=value' -> (key, value) with Python-literal values ('3', '0.5', 'True', 'gelu')."""
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"option --option: expected key=value, got {text!r}")
    try:
        return key.replace("-", "_"), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key.replace("-", "_"), value


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too) that reports a bad command line in one line, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


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


def train_options() -> list[dataclasses.Field]:
    """The fields of ``TrainConfig`` that are options (made with ``training.config.knob``)."""
    return [f for f in dataclasses.fields(TrainConfig) if "help" in f.metadata]


def add_train_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """An option per ``train_options`` field: ``--<name>`` of the field's type, help and choices; ``--no-<name>``
    for a bool that defaults to True, ``--<name>`` for one that defaults to False. Each defaults to None, so a
    given one can be told from one left out; ``train_config`` gives the field's default (or the dataset's for
    one the dataset sets). Returns {destination: option}."""
    types = typing.get_type_hints(TrainConfig)
    flags = {}
    for option in train_options():
        flag = option.name.replace("_", "-")
        if types[option.name] is bool:
            name, action = (f"--no-{flag}", "store_false") if option.default else (f"--{flag}", "store_true")
            parser.add_argument(name, dest=option.name, action=action, default=None, help=option.metadata["help"])
        else:
            name = f"--{flag}"
            parser.add_argument(name, type=option.metadata["parse"] or types[option.name], default=None,
                                choices=option.metadata["choices"], help=option.metadata["help"])
        flags[option.name] = name
    return flags


def train_config(args, source, **values) -> TrainConfig:
    """The ``TrainConfig`` of parsed ``train_options`` (one left unset takes its default, or ``source``'s value
    for a per-dataset one), with ``values`` for the fields that are no options."""
    for option in train_options():
        given = getattr(args, option.name)
        if given is None:
            given = getattr(source, option.name) if option.metadata["per_dataset"] else option.default
        values[option.name] = given
    return TrainConfig(**values)


# bench --protocol: the options each protocol takes besides the shared ones (BENCH_SHARED); the others are refused.
BENCH_PROTOCOLS = ("next-item", "authors")
BENCH_SHARED = ("dataset", "models", "seeds", "threads", "raw_dir", "results_dir", "protocol",
                "epochs", "patience", "lr", "batch_size", "dropout", "n_layers", "n_heads", "device")
AUTHORS_OPTIONS = ("head_width", "n_neighbours", "channel", "feature_seed", "min_user_edges", "scan_backend",
                   "eager")


def check_protocol_options(args) -> None:
    """OptionError naming the first option given to bench that its ``--protocol`` does not take (bench's
    protocol-specific options default to None, so a given one is one that is not None)."""
    for dest, flag in args.option_flags.items():
        if dest in BENCH_SHARED or getattr(args, dest) is None:
            continue
        belongs = "authors" if dest in AUTHORS_OPTIONS else "next-item"
        if belongs != args.protocol:
            raise OptionError(f"option {flag}: belongs to --protocol {belongs}, not to --protocol {args.protocol}")


def command_bench(args) -> None:
    import torch

    from .experiments.bench import cpu_threads

    check_protocol_options(args)
    torch.set_num_threads(cpu_threads(args.threads))
    if args.protocol == "authors":
        from .protocols.authors.commands import command_bench as authors_bench

        authors_bench(args)
        return
    from .experiments.bench import bench
    from .training.checkpoint import CHECKPOINT_DIR

    models = resolve_models(args.models)
    try:
        source = registry.get_dataset(args.dataset)
    except KeyError as error:
        raise OptionError(f"option --dataset: {error.args[0]}") from None
    config = train_config(args, source, backbone_options=dict(args.option or []))
    data_options = {"raw_dir": args.raw_dir, "split": args.split or "loo", "dedup": args.dedup or "none",
                    "min_user_interactions": args.min_user_interactions,
                    "min_item_interactions": args.min_item_interactions}
    bench(args.dataset, models, parse_seeds(args.seeds), config, data_options, args.results_dir,
          resume=bool(args.resume), checkpoint_dir=args.checkpoint_dir or CHECKPOINT_DIR)


def command_tables(args) -> None:
    from .protocols.authors import bench as authors_bench
    from .tracking.tables import parse_table_metrics, write_all_tables

    for path in [*write_all_tables(args.results_dir, parse_table_metrics(args.metrics)),
                 *authors_bench.write_all_tables(Path(args.results_dir))]:
        print(f"wrote {path}")


def command_import_runs(args) -> None:
    from .tracking.runs import import_records

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
    from .data import commands as data_commands
    from .experiments import scaling, split_study
    from .experiments.headline import driver as headline
    from .experiments.probes import cli as probe_commands
    from .experiments.throughput import command as throughput_command
    from .protocols.authors import commands as authors_commands
    from .tracking.tables import LOCAL_RESULTS_DIR

    parser = OneLineParser(prog="prism-rec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    listing = commands.add_parser("list", help="registered backbones and datasets")
    listing.add_argument("--params", action="store_true", help="also print parameter counts")
    listing.add_argument("--d-model", type=int, default=64)
    listing.set_defaults(func=command_list)

    bench = commands.add_parser("bench", help="train and evaluate models on a dataset, log to MLflow")
    bench.add_argument("--protocol", choices=BENCH_PROTOCOLS, default="next-item",
                       help="next-item (default): next-item prediction, every backbone trained by the suite's "
                            "trainer; authors: the PRISM authors' destination retrieval (README, \"The authors' "
                            "protocol\"), with its own defaults for the training options both take (--epochs, "
                            "--patience, --lr, --batch-size, --dropout, --n-layers, --n-heads, --device); the other "
                            "training options are next-item's")
    bench.add_argument("--dataset", default="ml-100k")
    bench.add_argument("--models", default="sasrec",
                       help="comma-separated backbone names, or 'all' (every registered backbone; --protocol authors: "
                            "its design's models)")
    bench.add_argument("--seeds", default="1", help="a count N (seeds 0..N-1) or a comma list")
    flags = add_train_options(bench)
    bench.add_argument("--threads", default="auto",
                       help="CPU threads: a count, or auto (default): OMP_NUM_THREADS if set, else 1, whatever the "
                            "load (other counts change the last bits of the metrics)")
    bench.add_argument("--raw-dir", help="folder of the dataset's raw files (default datasets/raw/<name>)")
    bench.add_argument("--results-dir", default=LOCAL_RESULTS_DIR,
                       help="where the table of the store's runs goes (default results/local, git-ignored; the "
                            "published tables in results/<dataset> are never written by bench)")
    next_item = bench.add_argument_group("--protocol next-item only")
    protocol_actions = [
        next_item.add_argument("--split", choices=("loo", "time"), help="loo (default) or time"),
        next_item.add_argument("--dedup", choices=("none", "first", "last"),
                               help="repeated (user, item) pairs: keep all (none, default), or only the first or last"),
        next_item.add_argument("--min-user-interactions", type=int),
        next_item.add_argument("--min-item-interactions", type=int),
        next_item.add_argument("--option", action="append", type=parse_option, metavar="KEY=VALUE",
                               help="backbone option, e.g. --option L=2 (repeatable)"),
        next_item.add_argument("--resume", action="store_true", default=None,
                               help="continue every run of these settings that has a checkpoint (interrupted or "
                                    "killed)"),
        next_item.add_argument("--checkpoint-dir",
                               help="where interrupted runs keep their checkpoints (default checkpoints/)")]
    authors = bench.add_argument_group("--protocol authors only (prism-rec authors train has the same options)")
    protocol_actions += authors_commands.add_bench_options(authors)
    flags.update({action.dest: action.option_strings[0] for action in protocol_actions})
    bench.set_defaults(option_flags=flags)
    bench.set_defaults(func=command_bench)

    tables = commands.add_parser("tables", help="rebuild results/local/<dataset>/auc.md (the authors' protocol's: "
                                 "<dataset>-authors/auc.md) from the MLflow store")
    tables.add_argument("--results-dir", default=LOCAL_RESULTS_DIR)
    tables.add_argument("--metrics", default="", help="columns after the default ones (AUC, Hit/NDCG@10,200,500), "
                        "e.g. mrr,ndcg_20,coverage_10,avg_pop_10 (coverage/avg_pop: runs evaluated since they exist)")
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
    authors_commands.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run a command; a bad option of any command ends it with one line and exit status 2 before any work
    (argparse's checks, then ``options.check_options`` and, where the command logs, the MLflow store's),
    an interruption with status 130, crashed trainings and other errors with status 1."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.invocation = shlex.join(["prism-rec", *argv])  # the command as run, recorded by the runs it trains
    try:
        check_options(args)
        if opens_store(args):
            from .tracking.store import check_store

            check_store()
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
