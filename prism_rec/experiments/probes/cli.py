"""``prism-rec probe``: train the mechanistic probes and write results/probes.md (see ``add_parser``).

``--grid`` trains the v2 grid of ``grid.py`` (both profiles, 3 seeds, every task, eight models, the local
XOR length sweep) in its priority order and writes the v2 report; otherwise the product of ``--tasks``,
``--models`` and ``--seeds`` at one ``--profile`` is trained and tabled.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ...options import parse_seeds
from ...paths import RESULTS_DIR
from ...training.compile import COMPILE_MODES, WHOLE_STEP_MODES
from ..campaign import DEVICE_HELP, add_executor_options, executor_from_args
from .grid import grid_runs, product_runs
from .model import parse_model_spec
from .settings import PROFILES, ProbeSettings
from .tasks import resolve_tasks

DEFAULT_MODELS = "sasrec,transformer++,gated_deltanet,mamba2,prism:L=2,prism-L0"
CHECK_TOLERANCE = {"output": 1e-4, "gradients": 1e-3, "loss_curve": 1e-3}  # relative gaps, fp32 with TF32 off
SETTING_OPTIONS = ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "steps", "batch_size", "lr",
                   "weight_decay", "grad_clip", "eval_size")


def command_line(args: argparse.Namespace) -> str:
    """The invocation as a ``prism-rec probe`` command, options in a fixed order, defaults left out."""
    words = ["prism-rec", "probe"]
    chosen = () if args.grid else ("tasks", "models", "seeds", "profile")  # the grid fixes these
    for name in (*chosen, *SETTING_OPTIONS, "device", "compile", "workers", "time_budget", "start_margin",
                 "checkpoint_limit", "out"):
        value = getattr(args, name)
        if value is not None:
            words += [f"--{name.replace('_', '-')}", str(value)]
    flags = [f"--{name.replace('_', '-')}" for name in ("grid", "no_mlflow") if getattr(args, name)]
    return " ".join(shlex.quote(word) for word in words + flags)


def check_compiled_steps(runs, mode: str, device: str) -> None:
    """Compiled training against eager (``train.compiled_step_gaps``: one step's loss and gradients, and a
    short training's loss curve; fp32, TF32 off) for each model of ``runs``, at its first run's task and
    settings, on the first device of ``device``; raises when a gap passes ``CHECK_TOLERANCE``."""
    import torch

    from ...training.devices import check_devices
    from .train import CHECK_STEPS, compiled_step_gaps

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    first_runs, failures, first_device = {}, [], check_devices(device)[0]
    for run in runs:
        first_runs.setdefault(run.model, run)
    for run in first_runs.values():
        gaps = compiled_step_gaps(run.model, run.task, run.settings, mode, first_device)
        print(f"compile {mode}, {run.label}: relative gap of the loss {gaps['output']:.1e}, of the gradients "
              f"{gaps['gradients']:.1e} (worst: {gaps['worst']}), of the loss curve of {CHECK_STEPS} steps "
              f"{gaps['loss_curve']:.1e}", flush=True)
        if any(gaps[name] > tolerance for name, tolerance in CHECK_TOLERANCE.items()):
            failures.append(run.model)
    if failures:
        raise ValueError(f"option --check-compile: compiled and eager differ beyond {CHECK_TOLERANCE} for "
                         f"{', '.join(failures)}")


def command_probe(args: argparse.Namespace) -> None:
    from .report import write_grid_report, write_results_table
    from .runner import log_manifest_to_mlflow, run_probes

    if args.log_manifest:
        count = log_manifest_to_mlflow(Path(args.out), command_line(args))
        print(f"{count} manifest runs of {args.out} are in MLflow experiment 'probes'")
        return

    if args.checkpoint_limit is not None and args.checkpoint_limit <= 0:
        raise ValueError(f"option --checkpoint-limit: must be > 0 MiB, got {args.checkpoint_limit}")
    if args.grid:
        overridden = [name for name in SETTING_OPTIONS if getattr(args, name) is not None]
        if overridden:
            raise ValueError(f"option --grid: the grid fixes its settings; drop --{overridden[0].replace('_', '-')}")
        runs = grid_runs()
    else:
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        if not models:
            raise ValueError(f"option --models: no model in {args.models!r}")
        runs = product_runs(resolve_tasks(args.tasks), models, parse_seeds(args.seeds), args.profile,
                            {name: getattr(args, name) for name in SETTING_OPTIONS})
    for model in dict.fromkeys(run.model for run in runs):
        parse_model_spec(model)
    if args.check_compile:
        check_compiled_steps(runs, args.compile, args.device)
        return
    command = command_line(args)
    limit = None if args.checkpoint_limit is None else int(args.checkpoint_limit * 2**20)
    executor = executor_from_args(args, args.time_budget, "--time-budget")
    try:
        result = run_probes(runs, Path(args.out), time_budget=args.time_budget, command=command,
                            log_mlflow=not args.no_mlflow, checkpoint_limit=limit, compile=args.compile,
                            start_margin=args.start_margin, executor=executor)
    finally:
        executor.close()
    if args.grid:
        table = write_grid_report(Path(args.out), command, result["unfinished"])
    else:
        table = write_results_table(Path(args.out), runs, command, result["unfinished"])
    print(table.read_text(), flush=True)
    if result["counts"]["failed"]:
        raise SystemExit(f"prism-rec probe: {result['counts']['failed']} run(s) failed (see the log above)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand to ``prism-rec``'s subparsers."""
    probe = subparsers.add_parser("probe", help="train mechanistic probes (paper Table 4), write results/probes.md",
                                  description=__doc__)
    probe.add_argument("--grid", action="store_true",
                       help="train the v2 grid (prism_rec/experiments/probes/grid.py) in its priority order and "
                            "write its report; --tasks, --models, --seeds and --profile are not read, setting "
                            "options refused")
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
    probe.add_argument("--device", default="auto", help=DEVICE_HELP)
    # the probes train through their own loop (probes/train.py), not TrainingStep: no whole-step modes
    probe.add_argument("--compile", choices=[m for m in COMPILE_MODES if m not in WHOLE_STEP_MODES], default="graphs",
                       help="the training step's compile mode (prism_rec/training/compile.py): graphs (the "
                            "default: the eager kernels replayed as CUDA graphs, seconds to compile; off on CPU), off, "
                            "inductor, cudagraphs (inductor + CUDA graphs; inductor on CPU), auto (a backbone's "
                            "verified mode, compile.py's VERIFIED_MODES; the probe models have none: off)")
    probe.add_argument("--check-compile", action="store_true",
                       help="only check the compiled training against eager for each model planned (one "
                            "step's loss and gradients, a short training's loss curve; fp32, TF32 off, first "
                            f"device), then exit; fails beyond the relative gaps {CHECK_TOLERANCE}")
    probe.add_argument("--workers", type=int, default=1, help="training processes at once, sharing the device")
    probe.add_argument("--time-budget", type=float, default=None,
                       help="seconds; start no run after it, pause in-flight ones (checkpointed, resumable; one "
                            "still in a step 15 s later is abandoned)")
    probe.add_argument("--start-margin", type=float, default=60.0,
                       help="seconds; with --time-budget, start no run this close to its end (a run pauses only "
                            "between steps, and its first step, the compilation, can take this long); "
                            "default %(default)s")
    probe.add_argument("--checkpoint-limit", type=float, default=None,
                       help="MiB; paused runs whose checkpoints would make probes_checkpoints.pt larger are "
                            "dropped and start over next time (what a device call can bring back)")
    probe.add_argument("--out", default=str(RESULTS_DIR),
                       help="folder of probes.md, probes_manifest.jsonl, probes_checkpoints.pt")
    probe.add_argument("--no-mlflow", action="store_true", help="do not log runs to MLflow")
    add_executor_options(probe)
    probe.add_argument("--log-manifest", action="store_true",
                       help="only log the finished runs of --out's manifest to MLflow (after a --no-mlflow run)")
    probe.set_defaults(func=command_probe)
    return probe
