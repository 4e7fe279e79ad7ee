"""``prism-rec probe``: train the mechanistic probes and write results/probes.md (see ``add_parser``)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ..tracking import PROJECT_ROOT
from .model import parse_model_spec
from .settings import PROFILES, ProbeSettings
from .tasks import resolve_tasks

DEFAULT_MODELS = "sasrec,transformer++,gated_deltanet,mamba2,prism:L=2,prism-L0"
SETTING_OPTIONS = ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "steps", "batch_size", "lr",
                   "weight_decay", "grad_clip", "eval_size")


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '1,5,7' -> [1, 5, 7]."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        raise ValueError(f"option --seeds: expected a count or a comma list of integers, got {text!r}") from None
    if not seeds:
        raise ValueError(f"option --seeds: need at least one seed, got {text!r}")
    return seeds


def command_line(args: argparse.Namespace) -> str:
    """The invocation as a ``prism-rec probe`` command, options in a fixed order, defaults left out."""
    words = ["prism-rec", "probe"]
    for name in ("tasks", "models", "seeds", "profile", *SETTING_OPTIONS, "device", "workers", "time_budget", "out"):
        value = getattr(args, name)
        if value is not None:
            words += [f"--{name.replace('_', '-')}", str(value)]
    return " ".join(shlex.quote(word) for word in words + (["--no-mlflow"] if args.no_mlflow else []))


def command_probe(args: argparse.Namespace) -> None:
    from .runner import log_manifest_to_mlflow, run_probes

    if args.log_manifest:
        count = log_manifest_to_mlflow(Path(args.out), command_line(args))
        print(f"{count} manifest runs of {args.out} are in MLflow experiment 'probes'")
        return

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise ValueError(f"option --models: no model in {args.models!r}")
    for model in models:
        parse_model_spec(model)
    result = run_probes(
        tasks=resolve_tasks(args.tasks), models=models, seeds=parse_seeds(args.seeds), profile=args.profile,
        overrides={name: getattr(args, name) for name in SETTING_OPTIONS}, out_dir=Path(args.out),
        device=args.device, workers=args.workers, time_budget=args.time_budget,
        command=command_line(args),
        log_mlflow=not args.no_mlflow)
    if result["counts"]["failed"]:
        raise SystemExit(f"prism-rec probe: {result['counts']['failed']} run(s) failed (see the log above)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand to ``prism-rec``'s subparsers."""
    probe = subparsers.add_parser("probe", help="train mechanistic probes (paper Table 4), write results/probes.md",
                                  description=__doc__)
    probe.add_argument("--tasks", default="all", help="comma list of probe tasks, or 'all'")
    probe.add_argument("--models", default=DEFAULT_MODELS,
                       help="comma list of backbones, options after colons (prism:L=2); default: %(default)s")
    probe.add_argument("--seeds", default="3", help="a count N (seeds 0..N-1) or a comma list; default 3")
    probe.add_argument("--profile", choices=PROFILES, default="paper",
                       help="paper: Table 4's settings; authors-code: the authors' probing script's")
    defaults = ProbeSettings()
    for name in SETTING_OPTIONS:
        probe.add_argument(f"--{name.replace('_', '-')}", type=type(getattr(defaults, name)), default=None,
                           help=f"override the profile's {name} (paper profile: {getattr(defaults, name)})")
    probe.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N, or a list "
                       "cuda:0,cuda:1 (worker i on the i-th, cyclically)")
    probe.add_argument("--workers", type=int, default=1, help="training processes at once, sharing the device")
    probe.add_argument("--time-budget", type=float, default=None,
                       help="seconds; start no run after it, pause in-flight ones (checkpointed, resumable)")
    probe.add_argument("--out", default=str(PROJECT_ROOT / "results"),
                       help="folder of probes.md, probes_manifest.jsonl, probes_checkpoints.pt")
    probe.add_argument("--no-mlflow", action="store_true", help="do not log runs to MLflow")
    probe.add_argument("--log-manifest", action="store_true",
                       help="only log the finished runs of --out's manifest to MLflow (after a --no-mlflow run)")
    probe.set_defaults(func=command_probe)
    return probe
