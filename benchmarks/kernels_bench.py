"""GPU check and benchmark of delta_scan (Triton) against an fp32 reference and fla-core 0.6.0.

For every (B, T, H, D) shape and variant (L = 0, 1, 3 with beta; beta None = SSD) it
  1. checks bf16 and fp32 outputs, final state and all input gradients against an fp32 reference
     (the per-token naive loop for T <= 256, else the chunked PyTorch path with tf32 off),
  2. times forward (no grad) and forward+backward with triton.testing.do_bench (median, ms),
  3. times fla's chunk_gated_delta_rule (L = 0) and chunk_simple_gla (SSD) on the same inputs,
and writes a markdown table. Kernels are compiled first by worker processes in parallel (shared
TRITON_CACHE_DIR), since compiling is most of the cost on a fresh machine.

    python benchmarks/kernels_bench.py --out results/kernels.md [--workers 12] [--fla] [--fla-bypass]
"""

import argparse
import datetime
import importlib
import multiprocessing
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(256, 200, 4, 32), (256, 200, 2, 64), (64, 1024, 4, 64), (16, 4096, 8, 64), (8, 8192, 8, 128)]
VARIANTS = {"L=0": (True, 0), "L=1": (True, 1), "L=3": (True, 3), "SSD": (False, 0)}  # name: (with beta, L)
GRAD_NAMES = ("q", "k", "v", "g", "beta", "extra_k", "extra_v")


def load_kernels():
    """prism_rec.kernels when installed, else the kernels/ folder of this checkout."""
    try:
        return importlib.import_module("prism_rec.kernels")
    except ImportError:
        sys.path.insert(0, str(REPO))
        return importlib.import_module("kernels")


def make_inputs(shape, variant, dtype, seed=0):
    """Inputs on the GPU: unit-norm keys, decays in (0, 1), beta in (0, 1); fp32 g and beta."""
    B, T, H, D = shape
    with_beta, L = VARIANTS[variant]
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, device="cuda", generator=gen)

    inputs = {
        "q": randn(B, T, H, D).to(dtype),
        "k": F.normalize(randn(B, T, H, D), dim=-1).to(dtype),
        "v": randn(B, T, H, D).to(dtype),
        "g": F.logsigmoid(randn(B, T, H) + 3.0),
        "beta": torch.sigmoid(randn(B, T, H)) if with_beta else None,
        "extra_k": (0.5 * randn(B, T, H, L, D)).to(dtype) if L else None,
        "extra_v": (0.5 * randn(B, T, H, L, D)).to(dtype) if L else None,
        "initial_state": None,
    }
    return inputs


def with_grad(inputs):
    return {n: None if x is None else x.detach().clone().requires_grad_() for n, x in inputs.items()}


def forward_backward(scan, inputs, d_o, backend, chunk_size=None):
    """o, final state and gradients of sum(o * d_o) + sum(state)."""
    inputs = with_grad(inputs)
    if chunk_size is None:
        o, state = scan.delta_scan(**inputs, output_final_state=True, backend=backend)
    else:
        o, state = scan.triton_chunk.triton_delta_scan(**inputs, scale=inputs["q"].shape[-1] ** -0.5, chunk_size=chunk_size)
    (o.float() * d_o).sum().add(state.sum()).backward()
    grads = {"d_" + n: inputs[n].grad for n in GRAD_NAMES if inputs[n] is not None}
    return {"o": o.detach(), "final_state": state.detach(), **grads}


def worst_relative_error(result, reference):
    """max over tensors of ||x - x_ref|| / ||x_ref|| (norm-wise); returns (error, tensor name)."""
    errors = {n: ((result[n].float() - reference[n].float()).norm() / reference[n].float().norm()).item() for n in reference}
    name = max(errors, key=lambda n: errors[n] if errors[n] == errors[n] else float("inf"))
    return errors[name], name


def check_case(scan, shape, variant, dtypes):
    """Relative errors of Triton results (inputs in each of dtypes) against the fp32 reference."""
    inputs32 = make_inputs(shape, variant, torch.float32, seed=1)
    d_o = torch.randn(inputs32["v"].shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    reference_backend = "naive" if shape[1] <= 256 else "torch"
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = forward_backward(scan, inputs32, d_o, reference_backend)
    errors = {}
    for dtype in dtypes:
        inputs = {n: None if x is None else (x.to(dtype) if n not in ("g", "beta") else x) for n, x in inputs32.items()}
        errors[dtype] = worst_relative_error(forward_backward(scan, inputs, d_o, "triton"), reference)
    del reference
    torch.cuda.empty_cache()
    return reference_backend, errors


def fla_function(variant):
    if variant == "L=0":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        return lambda q, k, v, g, beta: chunk_gated_delta_rule(q, k, v, g, beta)
    from fla.ops.simple_gla import chunk_simple_gla
    return lambda q, k, v, g, beta: chunk_simple_gla(q, k, v, g)


def timed_calls(scan, shape, variant, who, chunk_size=None):
    """(forward, forward+backward) closures for ours or fla on bf16 inputs; backward may be None."""
    inputs = make_inputs(shape, variant, torch.bfloat16)
    grad_inputs = with_grad(inputs)
    d_o = torch.randn_like(inputs["v"])
    if who == "ours":
        if chunk_size is None:
            def run(x):
                return scan.delta_scan(**x, backend="triton")[0]
        else:
            def run(x):
                return scan.triton_chunk.triton_delta_scan(**x, scale=shape[3] ** -0.5, chunk_size=chunk_size)[0]
    else:
        fla_call = fla_function(variant)

        def run(x):
            return fla_call(x["q"], x["k"], x["v"], x["g"], x["beta"])[0]

    def forward():
        with torch.no_grad():
            run(inputs)

    def forward_backward_once():
        run(grad_inputs).backward(d_o)

    return forward, forward_backward_once, [x for x in grad_inputs.values() if x is not None]


def bench(fn, grad_to_none=None):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=50, grad_to_none=grad_to_none, return_mode="median")


def check_dtypes(shape):
    """fp32 inputs are checked at the recommendation shapes only (separate kernels, compile time)."""
    return (torch.bfloat16, torch.float32) if shape[1] <= 256 else (torch.bfloat16,)


def warm_worker(task):
    """Compile (and autotune) one case in a worker process; returns an error line or None."""
    who, shape, variant, chunk_size, part = task
    scan = load_kernels()
    try:
        if who == "check":
            check_case(scan, shape, variant, (torch.float32,))
        else:
            forward, fwd_bwd, _ = timed_calls(scan, shape, variant, who, chunk_size)
            forward() if part == "forward" else fwd_bwd()
        torch.cuda.synchronize()
        return None
    except Exception as error:  # report and go on: one refusal (fla's #640 guard) must not stop the rest
        return f"{task}: {type(error).__name__}: {str(error).splitlines()[0][:200]}"


def bypass_fla_hopper_guard():
    """fla refuses its gated backward on Hopper with Triton < 3.7.1 (fla issue 640); lift it for timing."""
    import fla.ops.common.chunk_o as chunk_o

    chunk_o.TRITON_ABOVE_3_7_1 = True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "results" / "kernels.md"))
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--fla", action="store_true", help="also time fla-core (needs it importable)")
    parser.add_argument("--fla-bypass", action="store_true", help="time fla's backward with its Hopper guard lifted")
    parser.add_argument("--chunk-sizes", default="", help="comma list: also time these Triton chunk sizes (every selected shape, L=0 and L=3)")
    parser.add_argument("--shapes", default="", help="indices into the shape list, comma separated")
    args = parser.parse_args()
    started = time.time()
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    chunk_sizes = [int(c) for c in args.chunk_sizes.split(",") if c]
    if args.fla_bypass:
        bypass_fla_hopper_guard()

    parts = ("forward", "train")
    tasks = [("ours", s, v, None, p) for s in reversed(shapes) for v in VARIANTS for p in parts]  # longest compiles first
    tasks += [("check", s, v, None, "") for s in shapes for v in VARIANTS if torch.float32 in check_dtypes(s)]
    tasks += [("ours", s, v, c, p) for s in shapes for v in ("L=0", "L=3") for c in chunk_sizes for p in parts]
    if args.fla:
        tasks += [("fla", s, v, None, p) for s in shapes for v in ("L=0", "SSD") for p in parts]
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.workers, initializer=bypass_fla_hopper_guard if args.fla_bypass else None) as pool:
        warm_errors = [e for e in pool.map(warm_worker, tasks, chunksize=1) if e]
    print(f"compiled {len(tasks)} cases in {time.time() - started:.0f} s; errors: {len(warm_errors)}", flush=True)
    for line in warm_errors:
        print("  ", line, flush=True)

    scan = load_kernels()
    rows, sweep_rows = [], []
    for shape in shapes:
        for variant in VARIANTS:
            reference_backend, errors = check_case(scan, shape, variant, check_dtypes(shape))
            forward, fwd_bwd, leaves = timed_calls(scan, shape, variant, "ours")
            ours = (bench(forward), bench(fwd_bwd, leaves))
            fla = (None, None, "")
            if args.fla and variant in ("L=0", "SSD"):
                fla_forward, fla_fwd_bwd, fla_leaves = timed_calls(scan, shape, variant, "fla")
                fla_fwd_ms = bench(fla_forward)
                try:
                    fla = (fla_fwd_ms, bench(fla_fwd_bwd, fla_leaves), "")
                except Exception as error:
                    fla = (fla_fwd_ms, None, f"bwd refused: {str(error).splitlines()[0][:80]}")
            rows.append((shape, variant, ours, fla, reference_backend, errors))
            for chunk_size in chunk_sizes if variant in ("L=0", "L=3") else []:
                forward, fwd_bwd, leaves = timed_calls(scan, shape, variant, "ours", chunk_size)
                sweep_rows.append((shape, variant, chunk_size, bench(forward), bench(fwd_bwd, leaves)))
            write_report(Path(args.out), rows, sweep_rows, args, time.time() - started, final=False)
            print(format_row(rows[-1]), flush=True)
    write_report(Path(args.out), rows, sweep_rows, args, time.time() - started, final=True)


def ms(x):
    return "-" if x is None else f"{x:.3f}"


def format_row(row):
    shape, variant, ours, fla, reference_backend, errors = row
    ratio = f"{fla[1] / ours[1]:.2f}x" if fla[1] else (f"fwd {fla[0] / ours[0]:.2f}x" if fla[0] else "-")
    err = " / ".join(f"{errors[d][0]:.1e} ({errors[d][1]})" if d in errors else "-" for d in (torch.bfloat16, torch.float32))
    note = f" {fla[2]}" if fla[2] else ""
    return f"| {shape} | {variant} | {ms(ours[0])} / {ms(ours[1])} | {ms(fla[0])} / {ms(fla[1])} | {ratio} | {err} vs {reference_backend} |{note}"


def write_report(path, rows, sweep_rows, args, elapsed, final):
    import triton

    try:
        fla_version = importlib.metadata.version("fla-core")
    except importlib.metadata.PackageNotFoundError:
        fla_version = "not installed"
    lines = [
        "# delta_scan (Triton) on the GPU",
        "",
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; Triton {triton.__version__}; fla-core {fla_version}; Python {platform.python_version()}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; script wall time {elapsed:.0f} s",
        f"- command: `python benchmarks/kernels_bench.py {' '.join(sys.argv[1:])}`",
        "- bf16 q, k, v (and extra keys/values), fp32 g and beta; times are triton.testing.do_bench medians in ms;",
        "  forward without grad, forward+backward with grads of every input; fla = chunk_gated_delta_rule for L=0,",
        "  chunk_simple_gla for SSD (beta None, L=0); ratio = fla / ours (forward+backward, else forward).",
        "- error: max over o, final state and every input gradient of ||x - x_ref|| / ||x_ref||, bf16 / fp32",
        "  inputs (fp32 at T <= 256 only), against the fp32 reference named (naive per-token loop, or the torch",
        "  chunk path with tf32 off).",
    ]
    if args.fla_bypass:
        lines.append("- fla backward timed with its Hopper guard (fla issue 640, Triton < 3.7.1) lifted: timing only, results unchecked.")
    lines += ["", "| (B, T, H, D) | variant | ours fwd / fwd+bwd | fla fwd / fwd+bwd | ratio | max rel. error bf16 / fp32 |", "|---|---|---|---|---|---|"]
    lines += [format_row(r) for r in rows]
    if sweep_rows:
        lines += ["", "Chunk-size sweep (ours, bf16):", "", "| (B, T, H, D) | variant | chunk | fwd | fwd+bwd |", "|---|---|---|---|---|"]
        lines += [f"| {s} | {v} | {c} | {ms(f)} | {ms(fb)} |" for s, v, c, f, fb in sweep_rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    if final:
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
