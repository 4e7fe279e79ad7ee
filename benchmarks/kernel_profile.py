"""Where a delta scan's forward+backward spends its device time: torch.profiler per kernel, per backend.

    python benchmarks/kernel_profile.py --shapes 8x8192x8x128 [--backends chunk_parallel,triton,fla]
        [--variants L=0,L=3] [--blocks chunk=16,sequential_stages=2 --blocks ...] [--steps 5] [--out FILE]

For every shape, variant, backend (and block-size override set of ours) it builds the inputs of
benchmarks/kernels_bench.py (bf16 q, k, v, fp32 g and beta), runs two forward+backward calls untimed
(compilation, fla's autotuning), then profiles --steps more and reports each CUDA kernel's device time
per call (ms), its launches per call, and the total beside the wall time per call. fla is
chunk_gated_delta_rule (L = 0) or chunk_simple_gla (SSD), its backward's Hopper guard lifted as
kernels_bench --fla-bypass does. A --blocks set names fields of kernels/chunk_parallel.py's Blocks
(OVERRIDE_RULES) for chunk_parallel, chunk_size and value_block for triton, CHUNK_SPLIT_OVERRIDES for
chunk_split; '' (the default) is the backend's automatic sizes through delta_scan. A failing case is reported as a line.
"""

import argparse
import datetime
import functools
import importlib
import time
from pathlib import Path

import torch
from kernels_bench import bypass_fla_hopper_guard, guarded, load_kernels, parse_shapes, timed_calls
from torch.profiler import ProfilerActivity, profile

TRITON_OVERRIDES = ("chunk_size", "value_block")
CHUNK_SPLIT_OVERRIDES = ("chunk", "key_block", "value_block", "sequential_value")  # chunk_split_delta_scan's

TOP_KERNELS = 8


def profile_case(scan, shape, variant, who, overrides, steps):
    """(wall ms per call, device ms per call, [(kernel, ms per call, launches per call)] longest first)."""
    _, forward_backward, _ = timed_calls(scan, shape, variant, who, overrides)
    for _ in range(2):
        forward_backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        started = time.perf_counter()
        for _ in range(steps):
            forward_backward()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - started) * 1000 / steps
    per_kernel = {}
    for event in profiler.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            total, count = per_kernel.get(event.name, (0.0, 0))
            per_kernel[event.name] = (total + event.device_time / 1000, count + 1)
    kernels = sorted(((name, total / steps, count / steps) for name, (total, count) in per_kernel.items()),
                     key=lambda row: -row[1])
    return wall_ms, sum(row[1] for row in kernels), kernels


def parse_blocks(text, backends, chunk_parallel):
    """'name=value,...' -> {backend of ours: overrides} ('' -> None: the automatic sizes); a clear error,
    naming the set, for a name a listed backend does not take or a value out of its range (chunk_parallel:
    its OVERRIDE_RULES; triton: TRITON_OVERRIDES; chunk_split: CHUNK_SPLIT_OVERRIDES)."""
    if not text:
        return {backend: None for backend in backends}
    try:
        overrides = chunk_parallel.Blocks.parse(text, names=None)
        accepted = {"chunk_parallel": tuple(chunk_parallel.OVERRIDE_RULES), "triton": TRITON_OVERRIDES,
                    "chunk_split": CHUNK_SPLIT_OVERRIDES}
        for backend in set(backends) & set(accepted):
            unknown = set(overrides) - set(accepted[backend])
            if unknown:
                raise ValueError(f"{backend} takes {', '.join(accepted[backend])}, not {', '.join(sorted(unknown))}")
        if "chunk_parallel" in backends:
            chunk_parallel.check_overrides(overrides)
    except ValueError as error:
        raise ValueError(f"--blocks {text!r}: {error}") from None
    return {backend: overrides for backend in backends}


def distinct(items):
    """The items in order, each once (dicts are not hashable)."""
    kept = []
    for item in items:
        if item not in kept:
            kept.append(item)
    return kept


def format_case(shape, variant, who, overrides, result):
    named = ",".join(f"{name}={value}" for name, value in (overrides or {}).items())
    label = f"| {shape} | {variant} | {who} {named} |"
    if isinstance(result, str):
        return f"{label} failed: {result} | | |"
    wall_ms, device_ms, kernels = result
    top = "; ".join(f"{name[:40]} {ms:.3f} ms x{launches:g}" for name, ms, launches in kernels[:TOP_KERNELS])
    return f"{label} {wall_ms:.3f} | {device_ms:.3f} | {top} |"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8x8192x8x128", help="as kernels_bench.py: indices, issue20 or BxTxHxD")
    parser.add_argument("--backends", default="chunk_parallel,fla", help="triton, chunk_parallel, chunk_split, fla")
    parser.add_argument("--variants", default="L=0", help="L=0, L=1, L=3, SSD (fla: L=0 and SSD only)")
    parser.add_argument("--blocks", action="append",
                        help="block-size overrides of ours, name=value,... (repeat for more sets; '': automatic)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    scan = load_kernels()
    backends = args.backends.split(",")
    chunk_parallel = importlib.import_module(f"{scan.__name__}.chunk_parallel")
    try:
        override_sets = [parse_blocks(text, backends, chunk_parallel) for text in args.blocks or [""]]
    except ValueError as error:
        parser.error(str(error))
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device (the profile is of GPU kernels)")
    bypass_fla_hopper_guard()
    lines = [
        f"# Delta-scan kernel profile: {torch.cuda.get_device_name()}",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; command "
        f"`python benchmarks/kernel_profile.py --shapes {args.shapes} --backends {args.backends} --variants "
        f"{args.variants}{''.join(f' --blocks {b}' for b in args.blocks or [])} --steps {args.steps}`. "
        "bf16 q, k, v, fp32 g and beta; "
        "per forward+backward call (the gradient of every input): wall ms, CUDA kernel ms, and the longest kernels.",
        "",
        "| (B, T, H, D) | variant | backend | wall ms | device ms | longest kernels (ms per call x launches) |",
        "|---|---|---|---:|---:|---|",
    ]
    for shape in parse_shapes(args.shapes):
        for variant in args.variants.split(","):
            for who in backends:
                if who == "fla" and variant not in ("L=0", "SSD"):
                    continue
                for overrides in [None] if who == "fla" else distinct(o[who] for o in override_sets):
                    result = guarded(functools.partial(profile_case, scan, shape, variant, who, overrides,
                                                       args.steps))
                    lines.append(format_case(shape, variant, who, overrides, result))
                    print(lines[-1], flush=True)
                    torch.cuda.empty_cache()
                    if args.out:
                        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
