"""``prism-rec throughput``: measure, report, log."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import time
from pathlib import Path

import torch

from ... import registry
from ...files import write_atomically
from ...options import resolve_models
from ...paths import RESULTS_DIR
from ...tracking.store import machine_description
from ...training.devices import ONE_DEVICE_HELP, resolve_device
from .measure import BackboneResults, measure_backbone
from .report import markdown_report, plot, read_report
from .shapes import CONFIGURATIONS, Configuration
from .store import EXPERIMENT, import_store, log_to_mlflow


def run(models: list[str], configuration: Configuration, device: torch.device, results_dir: Path,
        use_mlflow: str, total_budget_s: float | None, command: str) -> list[BackboneResults]:
    """Measure every shape of ``configuration`` for each of ``models`` in turn, rewriting the report after
    each, so that a run cut short still leaves the backbones it finished."""
    if use_mlflow == "on" and importlib.util.find_spec("mlflow") is None:
        raise ValueError("option --mlflow on: mlflow is not installed (use --mlflow auto or off)")
    log = use_mlflow == "on" or (use_mlflow == "auto" and importlib.util.find_spec("mlflow") is not None)
    mlflow_note = (f'Logged to MLflow, experiment "{EXPERIMENT}".' if log else
                   f"Not logged to MLflow ({'--mlflow off' if use_mlflow == 'off' else 'mlflow not installed here'}).")
    markdown_path = results_dir / f"{configuration.file_stem}.md"
    plot_path = results_dir / f"{configuration.file_stem}.png"
    deadline = None if total_budget_s is None else time.perf_counter() + total_budget_s
    results: list[BackboneResults] = []
    for backbone in models:
        for shape in configuration.shapes:
            results.append(measure_backbone(backbone, shape, configuration, device, deadline))
            report = markdown_report(results, configuration, device, command, mlflow_note)
            write_atomically(markdown_path, report)
    plot(results, configuration, plot_path, f"Training throughput, {machine_description(device)}")
    if log:
        log_to_mlflow(results, configuration, device, command)
    print(f"wrote {markdown_path} and {plot_path}")
    return results


def command_line(args: argparse.Namespace) -> str:
    """The command as run, every option spelled out, for the report and the MLflow tags."""
    words = ["prism-rec", "throughput"]
    for option in ("models", "config", "device", "warmup", "steps", "case_budget", "total_budget", "results_dir",
                   "report_name", "mlflow"):
        value = getattr(args, option)
        if value is not None:
            words += [f"--{option.replace('_', '-')}", str(value)]
    return shlex.join(words)


def command_throughput(args: argparse.Namespace) -> None:
    results_dir = Path(args.results_dir) if args.results_dir else RESULTS_DIR
    if args.import_store and args.report_name is not None:
        raise ValueError("option --report-name: not with --import-store (the imported runs name their report)")
    if args.redraw:
        if args.import_store or args.report_name is not None:
            raise ValueError("option --redraw: not with --import-store or --report-name (the report names its plot)")
        results, configuration, device = read_report(args.redraw)
        path = plot(results, configuration, args.redraw.with_suffix(".png"), f"Training throughput, {device}")
        print(f"redrew {path} (and its SVG) from {args.redraw}")
        return
    if args.import_store:
        print(f"copied {import_store(args.import_store, results_dir)} run(s) from {args.import_store}; "
              f"plot redrawn in {results_dir}")
        return
    device = resolve_device(args.device)
    name = args.config if args.config != "auto" else ("paper" if device.type == "cuda" else "tiny")
    for option, value, least in (("warmup", args.warmup, 1), ("steps", args.steps, 1),
                                 ("case-budget", args.case_budget, 1e-9), ("total-budget", args.total_budget, 1e-9)):
        if value is not None and value < least:
            raise ValueError(f"option --{option}: must be {'>= 1' if least == 1 else '> 0'}, got {value}")
    if args.report_name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", args.report_name):
        raise ValueError(f"option --report-name: a file name without a folder or extension, got {args.report_name!r}")
    overrides = {"warmup": args.warmup, "steps": args.steps, "case_budget_s": args.case_budget,
                 "file_stem": args.report_name}
    configuration = Configuration(**{**CONFIGURATIONS[name].__dict__,
                                     **{key: value for key, value in overrides.items() if value is not None}})
    models = resolve_models(args.models)
    untrained = [model for model in models if not registry.trains(model)]
    if untrained:
        print(f"skipped {', '.join(untrained)}: no training step to time (it counts training interactions)")
    run([model for model in models if registry.trains(model)], configuration, device, results_dir, args.mlflow,
        args.total_budget, command_line(args))


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``throughput`` subcommand to ``subparsers`` (an argparse sub-parser action)."""
    parser = subparsers.add_parser("throughput", help="training tokens/s and peak memory across sequence lengths")
    parser.add_argument("--models", default="all", help="comma-separated backbone names, or 'all' (default)")
    parser.add_argument("--config", choices=("auto", *CONFIGURATIONS), default="auto",
                        help="paper: 0.13B LM shape at 2K-16K and the recsys shape; tiny: toy sizes for CI; "
                             "auto: paper on CUDA, tiny elsewhere")
    parser.add_argument("--device", default="auto", help=ONE_DEVICE_HELP)
    parser.add_argument("--warmup", type=int, help="warm-up steps per case, at least 1 (paper 2, tiny 1)")
    parser.add_argument("--steps", type=int, help="timed steps per case (paper 10, tiny 2)")
    parser.add_argument("--case-budget", type=float, help="seconds per case before it counts as over time "
                                                          "(paper 20, tiny 10)")
    parser.add_argument("--total-budget", type=float, help="seconds for the whole run; cases left are marked not run")
    parser.add_argument("--results-dir", help=f"folder of the report and plot (default {RESULTS_DIR})")
    parser.add_argument("--report-name", help="file name of the report and plot, without extension (default "
                                              "throughput, throughput-tiny): a run of some backbones with its "
                                              "own budgets beside the main report")
    parser.add_argument("--mlflow", choices=("auto", "on", "off"), default="auto",
                        help="log to MLflow: auto = when mlflow is importable")
    parser.add_argument("--import-store", metavar="URI",
                        help="measure nothing: copy the finished throughput runs of this MLflow store (e.g. "
                             "sqlite:///x.db from a GPU machine) into the current one and redraw the plot in "
                             "--results-dir from them (the measuring options do not apply)")
    parser.add_argument("--redraw", metavar="REPORT", type=Path,
                        help="measure nothing: redraw the plot beside REPORT (a results/throughput*.md this command "
                             "wrote) from its tables")
    parser.set_defaults(func=command_throughput)
    return parser
