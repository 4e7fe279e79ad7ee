"""Which delta-scan backend each backbone's token mixer should take: the mixer's forward+backward per backend.

    python benchmarks/mixer_scan_bench.py --out results/mixer_scan.md [--mixers mamba2,gated_deltanet,prism]
        [--shapes 256x50,256x200,12x4096] [--backends triton,chunk_parallel,chunk_split,torch] [--time-budget S]
        [--smoke]

Each cell builds the first mixer of the registered backbone (d_model 64, 2 heads, its registered defaults) with
its scan backend set, runs it as the backbone does under bf16 autocast on CUDA (x fp32 like the residual stream,
mask all ones), then backward of a fixed random cotangent; ms = triton.testing.do_bench median of
forward+backward. The "auto" column names what kernels/delta_scan.py's auto_backend picks at that length. The
kernel-level scan times of results/kernels.md use K = V = D inputs built by kernels_bench.py; this table times
the scan with the inputs the mixer makes (mamba2's q is C broadcast over heads, its beta None). Cells past
--time-budget are left out and named. --smoke runs one tiny shape on the CPU (TRITON_INTERPRET=1; one call each,
not a measurement).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from bench_options import parse_dims

MIXERS = ("mamba2", "gated_deltanet", "prism")
SHAPES = [(256, 50), (256, 200), (12, 4096)]
BACKENDS = ("triton", "chunk_parallel", "chunk_split", "torch")


def parse_choices(option: str, text: str, allowed: tuple[str, ...]) -> list[str]:
    names = text.split(",")
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise SystemExit(f"{option}: unknown {unknown}; choose from {', '.join(allowed)}")
    return names


def make_mixer(name: str, backend: str):
    """The first token mixer of backbone ``name`` as the registry builds it at d_model 64, its scan on ``backend``."""
    from prism_rec.registry import build_backbone

    return build_backbone(name, 64, n_heads=2, backend=backend).stack.mixers[0]


def measure(name: str, shape: tuple[int, int], backend: str, device: str, smoke: bool) -> float:
    import torch
    import triton

    torch.manual_seed(0)
    mixer = make_mixer(name, backend).to(device)
    B, T = shape
    x = torch.randn(B, T, 64, device=device, requires_grad=True)  # [B, T, d] fp32, as the backbones' residual stream
    mask = torch.ones(B, T, dtype=torch.bool, device=device)
    dy = torch.randn_like(x)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            y = mixer(x, mask)
        y.backward(dy)

    if smoke:
        started = time.perf_counter()
        step()
        return (time.perf_counter() - started) * 1000
    return triton.testing.do_bench(step, warmup=5, rep=40, grad_to_none=[x, *mixer.parameters()],
                                   return_mode="median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixers", default=",".join(MIXERS))
    parser.add_argument("--shapes", type=lambda text: parse_dims(text, "BxT"), default=SHAPES)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--time-budget", type=float, default=float("inf"), help="seconds; later cells are skipped")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    mixers = parse_choices("--mixers", args.mixers, MIXERS)
    backends = parse_choices("--backends", args.backends, BACKENDS)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.shapes = [(2, 40)]
    import torch
    import triton
    from prism_rec.kernels.delta_scan import auto_backend

    from prism_rec.files import write_atomically
    from prism_rec.markdown import pipe_table
    from prism_rec.tracking.store import machine_description

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("mixer_scan_bench: no CUDA device (use --smoke on a CPU)")
    started, rows, skipped = time.monotonic(), [], []
    for name in mixers:
        for shape in args.shapes:
            times = {}
            for backend in backends:
                if time.monotonic() - started > args.time_budget:
                    skipped.append(f"{name} {shape[0]}x{shape[1]} {backend}")
                    continue
                times[backend] = measure(name, shape, backend, device, args.smoke)
                print(name, shape, backend, f"{times[backend]:.3f} ms", flush=True)
            if not times:
                continue
            best = min(times, key=times.get)
            rows.append([name, f"{shape[0]}x{shape[1]}", *(f"{times[b]:.3f}" if b in times else "-" for b in backends),
                         auto_backend(True, shape[1]), best])
    command = " ".join(["python", "benchmarks/mixer_scan_bench.py", *sys.argv[1:]])
    text = "\n".join([
        f"# Token mixers' forward+backward per scan backend: {machine_description(torch.device(device))}", "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; triton "
        f"{triton.__version__}; command `{command}`. d_model 64, 2 heads, bf16 autocast; ms = triton.testing.do_bench "
        "median" + (" (smoke run on the CPU under TRITON_INTERPRET=1: one call, not a measurement)" if args.smoke
                    else "") + "; auto = the backend kernels/delta_scan.py's auto_backend picks on CUDA.", "",
        pipe_table(["mixer", "B x T", *(f"{b} ms" for b in backends), "auto", "fastest"], rows,
                   align="ll" + "r" * len(backends) + "ll"), "",
        *([f"Skipped past --time-budget {args.time_budget:g} s: {'; '.join(skipped)}.", ""] if skipped else [])])
    write_atomically(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
