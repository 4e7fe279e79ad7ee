"""Training-step time of every backbone with the full-softmax loss, and solo training throughput.

    python benchmarks/step_bench.py [--models all|a,b] [--loss-path fused,chunked] [--compile off,cudagraphs]
                                    [--shapes 256x50,12x4096 --floor] [--datasets all|a,b] [--time-budget SECONDS]

One step = the training step ``fit`` trains with, prism_rec/training/step.py's ``TrainingStep`` (forward,
backward, AdamW over the trainer's parameter groups; bf16 autocast on CUDA, fp32 on CPU; the full-softmax loss
on the path named by --loss-path), built by step_timing.bench_step. Step table: random full windows of
--batch-size x T for T in --lengths (or the B x T of --shapes) over --items items (d_model 64, 2 layers, 2
heads), the median wall time of --steps steps after --warmup (synchronised per step) and the peak memory, for
every loss path and every step mode of --compile (prism_rec/training/compile.py: off = eager, inductor,
cudagraphs, graphs, step-graphs and step-cudagraphs = the whole step as one CUDA graph, auto = the backbone's
verified mode; a whole-step mode is checked against the eager step, loss, gradients and parameters); --floor
adds the floor (the same step with an identity mixer) to the step table and the ratios of every backbone to it
and to sasrec (step_floor.py); on CUDA every checked backbone's eager step is also run once under
torch.cuda.set_sync_debug_mode("error") (step_checks.py). Books scale: --books-models at --books-items items,
T 200; a torch.profiler breakdown of each backbone and step mode at the first shape (wall and device ms per
step, kernel launches, top operators by device time). Solo throughput (--datasets): per dataset, backbone and
--solo-compile mode, real training windows (full batches of --batch-size, the dataset's window), tokens/s =
the mean real target positions of a batch (counted as trainer.py does) over the median of --solo-steps steps
after --solo-warmup (fewer, at least 2, where they would take more than --cell-seconds; each step
synchronised, the slowest kept as step_ms_max); from them, the speed-up of the compiled step per dataset (sum
of the backbones' eager step times over the compiled ones). On CUDA the script first checks the fused loss
against the chunked one (loss and gradients) and stops if they differ.

results/step.md (the floor, the ratios, the verified compile modes) is made on the GPU by

    python benchmarks/step_bench.py --models sasrec,transformer++,gated_deltanet,prism,mamba2 --floor \
        --shapes 256x50,256x200,12x4096,3x16384 --loss-path fused --compile off,graphs,cudagraphs \
        --check-compiled sasrec,transformer++,gated_deltanet,prism,mamba2 --books-models= --profile-steps 0 \
        --warmup 6 --steps 15 --cell-seconds 2 --time-budget 480 --out-dir "$OUT/step"

(or its shapes split over two GPUs and merged, below).

A backbone's mode that failed its check against eager (--check-compiled) is not timed (its cells say
refused). Every cell is caught on its own (its status says why it failed) and the files are rewritten after every
cell, so a run cut short keeps what it measured (the modes of --compile in turn, each at every shape); once
--time-budget seconds have passed (from the end of the checks against eager), the cells not started are
recorded as skipped. Writes <out>/step.md,
step.csv and step.json (everything, for --merge), and with --datasets <out>/solo_throughput.csv (the rows of
the last --solo-compile mode, the one a grid would train with). ``--merge DIR,DIR,...`` makes one report of
runs made side by side, one per GPU:

    CUDA_VISIBLE_DEVICES=0 python benchmarks/step_bench.py --lengths 50 ... --out-dir /tmp/a &
    CUDA_VISIBLE_DEVICES=1 python benchmarks/step_bench.py --lengths 200 ... --out-dir /tmp/b & wait
    python benchmarks/step_bench.py --merge /tmp/a,/tmp/b --out-dir $OUT/step
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from bench_options import parse_dims
from step_checks import check_compiled, check_fused, check_host_syncs
from step_report import Report, merge, step_markdown
from step_solo import measure_solo
from step_timing import (
    FLOOR,
    Budget,
    bench_step,
    dtype_label,
    failure,
    peak_memory_gib,
    profile_steps,
    random_windows,
    reset_memory,
    timed_steps,
)

from prism_rec.markdown import fill
from prism_rec.paths import TEMPLATES_DIR
from prism_rec.registry import list_backbones, trains
from prism_rec.tracking.store import machine_description, triton_version
from prism_rec.training.compile import resolve_compile
from prism_rec.training.devices import resolve_device
from prism_rec.training.losses import resolve_path

TOP_OPERATORS = 8


def step_cell(section: str, backbone: str, n_items: int, batch_size: int, length: int, loss_path: str,
              compile_mode: str, args, device, budget: Budget, refused: bool = False) -> dict:
    """One cell of the step table: the median ms and peak memory of ``backbone``'s step in ``compile_mode``
    (not measured when ``refused``: the mode failed its check against eager for the backbone)."""
    row = {"section": section, "model": backbone, "seq_len": length, "n_items": n_items, "batch_size": batch_size,
           "loss_path": loss_path, "compile": compile_mode, "dtype": dtype_label(device), "step_ms": "",
           "peak_memory_gib": "", "target_tokens": batch_size * length, "status": "ok", "warmup_s": ""}
    if refused or budget.spent():
        row["status"] = "refused: failed its check against eager" if refused else "skipped: time budget"
        return row
    step = None
    try:
        step = bench_step(n_items, backbone, batch_size, length, args, device, loss_path, compile_mode)
        reset_memory(device)
        batches = random_windows(n_items, batch_size, length, 4)
        started = time.perf_counter()
        times = timed_steps(step, batches, args.warmup, args.steps, args.cell_seconds)
        row["warmup_s"] = f"{time.perf_counter() - started - sum(times) / 1000:.1f}"  # compilation included
        row["step_ms"] = f"{statistics.median(times):.3f}"
        memory = peak_memory_gib(device)
        row["peak_memory_gib"] = "" if memory is None else f"{memory:.2f}"
    except Exception as error:  # one cell's failure is reported in its cell, the others still run
        row["status"] = failure(error)
    finally:
        del step
        reset_memory(device)
    print(f"{section} {backbone} {batch_size}x{length} items={n_items} {loss_path} compile={compile_mode}: "
          f"{row['step_ms'] or row['status']} ms, peak {row['peak_memory_gib'] or '-'} GiB", flush=True)
    return row


def profile_backbone(backbone: str, n_items: int, batch_size: int, length: int, loss_path: str, compile_mode: str,
                     args, device) -> dict:
    """The profile row of ``backbone`` (step_timing.profile_steps over --profile-steps steps after warm-up)."""
    try:
        step = bench_step(n_items, backbone, batch_size, length, args, device, loss_path, compile_mode)
        found = profile_steps(step, random_windows(n_items, batch_size, length, 2), args.warmup + 1,
                              args.profile_steps, TOP_OPERATORS)
        return {"wall_ms": f"{found['wall_ms']:.2f}", "device_ms": f"{found['device_ms']:.2f}",
                "launches": f"{found['launches']:.0f}",
                "top": ", ".join(f"`{name[:60]}` {ms:.2f}" for name, ms in found["top"])}
    except Exception as error:
        return {"wall_ms": "", "device_ms": "", "launches": "", "top": f"profile {failure(error)}"}
    finally:
        reset_memory(device)


def parse_list(value: str, everything: list[str] | tuple[str, ...]) -> list[str]:
    return list(everything) if value == "all" else [part for part in value.split(",") if part]


def parse_shapes(args: argparse.Namespace) -> list[tuple[int, int]]:
    """The (batch, length) of the step table: --shapes "BxT,...", else --batch-size with each of --lengths."""
    if not args.shapes:
        return [(args.batch_size, int(length)) for length in args.lengths.split(",") if length]
    return parse_dims(args.shapes, "BxT")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="all", help="backbones, comma-separated, or all (default)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--lengths", default="50,200")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--shapes", default="", help="BATCHxLENGTH pairs of the step table, comma-separated "
                                                      "(replace --lengths and --batch-size there)")
    parser.add_argument("--floor", action="store_true",
                        help="also the floor (the step with an identity mixer) and every backbone's ratio to it")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cell-seconds", type=float, default=3.0,
                        help="fewer timed steps (at least 2) when a cell would take longer than this")
    parser.add_argument("--loss-path", default="fused,chunked", help="fused, chunked or both (comma-separated)")
    parser.add_argument("--compile", default="off",
                        help="step modes, comma-separated: off, inductor, cudagraphs, graphs, step-graphs, "
                             "step-cudagraphs, auto")
    parser.add_argument("--check-compiled", default="prism",
                        help="backbones whose compiled encoder is checked against eager first ('' for none)")
    parser.add_argument("--check-modes", default="",
                        help="the modes of --compile that --check-compiled checks ('': all of them)")
    parser.add_argument("--check-only", action="store_true",
                        help="only the checks of --check-compiled in the modes of --compile; exit 1 if one fails")
    parser.add_argument("--books-models", default="sasrec", help="backbones at Books scale ('' for none)")
    parser.add_argument("--books-items", type=int, default=340000)
    parser.add_argument("--books-length", type=int, default=200)
    parser.add_argument("--profile-steps", type=int, default=3, help="0: no per-operator breakdown")
    parser.add_argument("--datasets", default="", help="solo throughput on these datasets (all: the headline six)")
    parser.add_argument("--solo-models", default="", help="backbones of the solo runs ('': those of --models)")
    parser.add_argument("--solo-compile", default="", help="step modes of the solo runs ('': those of --compile)")
    parser.add_argument("--solo-steps", type=int, default=30)
    parser.add_argument("--solo-warmup", type=int, default=5)
    parser.add_argument("--solo-loss-path", default="auto", help="loss path of the solo runs (auto: fused on CUDA)")
    parser.add_argument("--no-steps", action="store_true", help="only the solo throughput")
    parser.add_argument("--time-budget", type=float, default=float("inf"),
                        help="seconds after the checks after which no cell starts (those left are recorded as skipped)")
    parser.add_argument("--merge", default="",
                        help="only merge the step.json of these run folders (comma-separated) into --out-dir")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.merge:
        print(step_markdown(merge([Path(part) for part in args.merge.split(",") if part], args.out_dir)), flush=True)
        return
    shapes = parse_shapes(args)
    device = resolve_device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)
    command = "python benchmarks/step_bench.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    models = trained_backbones(parse_list(args.models, list_backbones()))
    loss_paths = usable_loss_paths(args.loss_path, device)
    compile_modes = [mode for mode in args.compile.split(",") if mode]
    for mode in compile_modes:
        resolve_compile(mode, device)  # an unknown mode stops the run before anything is measured
    solo_modes = [mode for mode in args.solo_compile.split(",") if mode] or compile_modes
    header = report_header(args, device, command, shapes)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    checks, verified = startup_checks(args, device, loss_paths, compile_modes)
    budget = Budget(args.time_budget)  # from here: the checks are not cut short by it
    if args.check_only:
        sys.exit(0 if all(ok for _, _, ok in verified) else 1)
    solo_mode = resolve_compile(solo_modes[-1], device) if args.datasets and solo_modes else None
    report = Report(args.out_dir, header, checks, solo_mode, command, verified)
    if not args.no_steps:
        measure_step_cells(report, args, models, shapes, loss_paths, compile_modes, device, budget)
    if args.datasets:
        solo_models = trained_backbones(parse_list(args.solo_models, models)) if args.solo_models else models
        measure_solo(report, args, solo_models, solo_modes, device, command, budget)
    report.write()
    print(step_markdown(report), flush=True)


def usable_loss_paths(option: str, device: torch.device) -> list[str]:
    """The loss paths of ``--loss-path`` that run on ``device`` (the others said and skipped)."""
    loss_paths = []
    for path in option.split(","):
        try:
            loss_paths.append(resolve_path(path, device))
        except ValueError as error:
            print(f"loss path {path!r} skipped on {device}: {error}", flush=True)
    return loss_paths


def report_header(args: argparse.Namespace, device: torch.device, command: str,
                  shapes: list[tuple[int, int]]) -> list[str]:
    text = fill(TEMPLATES_DIR / "step_header.md", machine=machine_description(device),
                when=f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}", torch=torch.__version__,
                triton=triton_version(), dtype=dtype_label(device), command=command,
                shapes=", ".join(f"{b} x {t}" for b, t in shapes), items=f"{args.items:,}", d_model=args.d_model,
                n_layers=args.n_layers, n_heads=args.n_heads, steps=args.steps, warmup=args.warmup)
    return text.split("\n")


def startup_checks(args: argparse.Namespace, device: torch.device, loss_paths: list[str],
                   compile_modes: list[str]) -> tuple[list[str], list]:
    """The fused loss, the compiled encoders and (CUDA) the step's host synchronisation, before anything
    is timed: report lines, and [backbone, mode, passed] of every compiled check."""
    checks = []
    timing = not (args.no_steps or args.check_only)
    if device.type == "cuda" and "fused" in loss_paths and timing:
        checks += ["Fused loss against the chunked one (stops the run when they differ):", *check_fused(device), ""]
    backbones = trained_backbones(parse_list(args.check_compiled, []))
    lines, passed = check_compiled(backbones, [m for m in args.check_modes.split(",") if m] or compile_modes, device)
    # on CUDA a failure under CUDA graphs is checked again without them: a failure of the graphs or the compiler
    failed = [b for (b, mode), ok in passed.items() if mode == "cudagraphs" and not ok]
    if device.type == "cuda" and failed and not args.check_only:
        more_lines, more = check_compiled(failed, ["inductor"], device)
        lines, passed = lines + more_lines, {**passed, **more}
    if lines:
        checks += ["Compiled encoder against eager (fp32, TF32 off, dropout 0):", *lines, ""]
    if device.type == "cuda" and backbones and timing:
        checks += ["Host synchronisation in the eager step (torch.cuda.set_sync_debug_mode):",
                   *check_host_syncs(backbones, args, device), ""]
    return checks, [[backbone, mode, ok] for (backbone, mode), ok in passed.items()]


def measure_step_cells(report: Report, args: argparse.Namespace, models: list[str], shapes: list[tuple[int, int]],
                       loss_paths: list[str], compile_modes: list[str], device: torch.device, budget: Budget) -> None:
    """Every step cell, in the order a run cut short should keep: the modes of --compile in turn, each at
    every shape (the floor first); then the profiles at the first shape, then Books scale. "auto" is resolved
    per backbone, and a mode that resolves to one measured already is not measured again."""
    table_models = [FLOOR, *models] if args.floor else models
    done = set()
    failed = {(backbone, mode) for backbone, mode, ok in report.verified if not ok}

    def measure(section: str, backbones: list[str], items: int, cells_shapes: list[tuple[int, int]],
                mode: str) -> None:
        for batch, length in cells_shapes:
            for backbone in backbones:
                for path in loss_paths:
                    resolved = resolve_compile(mode, device, backbone=backbone)
                    if (section, backbone, batch, length, path, resolved) not in done:
                        done.add((section, backbone, batch, length, path, resolved))
                        report.rows.append(step_cell(section, backbone, items, batch, length, path, resolved, args,
                                                     device, budget, (backbone, resolved) in failed))
                        report.write()

    for mode in compile_modes:
        measure("step", table_models, args.items, shapes, mode)
    for backbone in models if args.profile_steps and shapes and loss_paths else []:
        for mode in dict.fromkeys(resolve_compile(m, device, backbone=backbone) for m in compile_modes):
            if not budget.spent():
                batch, length = shapes[0]
                shape = {"model": backbone, "seq_len": length, "loss_path": loss_paths[0], "compile": mode}
                report.profiles.append({**shape, **profile_backbone(backbone, args.items, batch, length,
                                                                    loss_paths[0], mode, args, device)})
                report.write()
    for mode in compile_modes:
        measure("books", parse_list(args.books_models, models), args.books_items, [(args.batch_size,
                                                                                     args.books_length)], mode)


def trained_backbones(names: list[str]) -> list[str]:
    """``names`` without the recommenders that do not train (said once each)."""
    models = []
    for backbone in names:
        if not trains(backbone):
            print(f"{backbone}: ranks by popularity and trains nothing; skipped", flush=True)
        else:
            models.append(backbone)
    return models


if __name__ == "__main__":
    main()
