"""Micro-benchmark of the full-softmax loss (prism_rec/training/losses.py): forward+backward of the fused
Triton path under each candidate launch config of each of its kernels, and of the chunked path (cuBLAS),
fp32 inputs under bf16 autocast as in the training step.

    python benchmarks/loss_bench.py --out results/loss.md [--time-budget SECONDS] [--repeats 20]
        [--shapes 12800x20000x64,...] [--candidates pruned|grid] [--smoke]

Per shape (rows x items x d): the chunked path and the fused path with ``FUSED_CONFIGS`` end to end
(full_softmax_loss_sum, forward+backward); each fused kernel (forward, backward_hidden, backward_table)
alone (with the PyTorch sum of its parts) under every candidate config, checked against the
``FIXED_CONFIG`` candidate's output; the fused path again with each kernel's fastest candidate; and a
per-kernel breakdown (torch.profiler) of the three end-to-end runs. Times are medians of synchronised
repeats after warm-up (CUDA events on the GPU), each called eagerly and replayed as a CUDA graph (which
also checks that it captures: a host synchronisation fails the capture); candidates are ranked by the
graph time, the GPU's own, where it ran (the chunked path, whose checkpoints save the RNG state, is timed
eagerly only). The picking is done here, once, and printed as a ``FUSED_CONFIGS`` table to paste into
losses.py (see its docstring for why the library does not autotune at run time). Shapes and candidates
left when --time-budget runs out are reported as skipped; the report is rewritten atomically after every
shape.
--smoke runs two tiny shapes and two candidates; on CPU it needs TRITON_INTERPRET=1 (the kernels then run in
Triton's interpreter, so compile errors show without a GPU).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from prism_rec.files import write_atomically  # noqa: E402
from prism_rec.markdown import pipe_table  # noqa: E402
from prism_rec.training.losses import (  # noqa: E402
    FIXED_CONFIG,
    FUSED_CONFIGS,
    FUSED_KERNELS,
    LaunchConfig,
    chunked_logsumexp,
    full_softmax_loss_sum,
    fused_logsumexp,
    launch_backward,
    launch_forward,
    product_operands,
    tile_width,
)

SHAPES = [(12800, 20000, 64), (51200, 20000, 64), (49152, 20000, 64), (12800, 80000, 64), (12800, 20000, 256)]
SMOKE_SHAPES = [(70, 300, 24), (130, 257, 64)]  # partial row and item tiles; d off and on a power of two
# (block rows, block items, warps, stages); each also with 4 programs per SM (a split: no new compile)
BLOCKS = [(64, 128, 4, 3), (64, 128, 4, 2), (64, 128, 4, 4), (64, 128, 8, 3), (64, 64, 4, 3), (64, 64, 4, 4),
          (64, 256, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3), (128, 256, 8, 2)]
PRUNED = [FIXED_CONFIG] + [LaunchConfig(*b, p) for b in BLOCKS for p in (2, 4) if LaunchConfig(*b, p) != FIXED_CONFIG]
GRID = [FIXED_CONFIG] + [LaunchConfig(*c) for c in itertools.product((64, 128), (64, 128, 256), (4, 8), (2, 3, 4),
                                                                     (2, 4)) if LaunchConfig(*c) != FIXED_CONFIG]
SMOKE_CANDIDATE = LaunchConfig(128, 64, 4, 3)  # both block sizes other than the fixed config's
GAP_LIMIT = 1e-3  # largest relative gap of a candidate's output to the fixed config's: only sum order differs
MARGIN_S = 15.0  # a measurement starts only with this much of the budget left (a first launch compiles)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(n) for n in item.split("x")) for item in text.split(",")]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device: torch.device, warmup: int, repeats: int) -> float:
    """Median wall time of ``fn()`` in ms over ``repeats`` calls after ``warmup`` (CUDA events on the GPU)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    synchronize(device)
    return statistics.median(start.elapsed_time(end) for start, end in events)


def graph_ms(fn, device: torch.device, warmup: int, repeats: int) -> float | str:
    """Median time of replaying ``fn`` captured as one CUDA graph (warmed up on a side stream first): the
    GPU's time without the host's, and the check that ``fn`` captures (a host synchronisation fails it)."""
    if device.type != "cuda":
        return "no CUDA"
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_ms(graph.replay, device, 1, repeats)


def timing(fn, device: torch.device, args, graph: bool = True) -> dict:
    """``fn``'s median ms called eagerly and (``graph``) replayed as a CUDA graph (or why not)."""
    return {"eager": median_ms(fn, device, args.warmup, args.repeats),
            "graph": attempt(lambda: graph_ms(fn, device, args.warmup, args.repeats)) if graph else "not captured"}


def pick_ms(value) -> float | None:
    """The time candidates are ranked by: the graph replay's where it ran (the GPU's own), else the eager one."""
    if not isinstance(value, dict):
        return None
    return value["graph"] if isinstance(value["graph"], float) else value["eager"]


def kernel_breakdown(fn, device: torch.device, repeats: int) -> list[tuple[str, float, float]]:
    """(kernel, launches per call, ms per call) of ``fn`` from torch.profiler, slowest first (on CPU: the
    operators' own CPU time)."""
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    fn()
    synchronize(device)
    with torch.profiler.profile(activities=activities) as profile:
        for _ in range(repeats):
            fn()
        synchronize(device)
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    rows = []
    for event in profile.key_averages():
        if event.device_type != kind:
            continue
        microseconds = event.self_device_time_total if cuda else event.self_cpu_time_total
        if microseconds > 0:
            rows.append((event.key, event.count / repeats, microseconds / 1e3 / repeats))
    return sorted(rows, key=lambda row: -row[2])


class Budget:
    def __init__(self, seconds: float | None):
        self.end = None if seconds is None else time.monotonic() + seconds

    def allows(self) -> bool:
        return self.end is None or self.end - time.monotonic() > MARGIN_S


def relative_gap(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12))


def inputs(shape, device: torch.device, seed: int = 0):
    """fp32 hidden [N, d] and table [I, d] (the step's parameters and encoder output), targets [N]."""
    n, items, d = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    hidden = torch.randn(n, d, device=device, generator=generator).requires_grad_()
    table = (torch.randn(items, d, device=device, generator=generator) * 0.3).requires_grad_()
    targets = torch.randint(0, items, (n,), device=device, generator=generator)
    return hidden, table, targets


def forward_backward(loss_fn, hidden, table, targets, device):
    """One forward+backward of ``loss_fn(hidden, table, targets)`` under bf16 autocast, as a closure."""
    def run():
        hidden.grad = table.grad = None
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):  # no cache: captures
            loss = loss_fn(hidden, table, targets)
        loss.backward()
    return run


def fused_with(configs):
    """The fused loss with ``configs`` in place of FUSED_CONFIGS: the sum full_softmax_loss_sum computes."""
    def loss(hidden, table, targets):
        positive = (hidden * table[targets]).sum(-1).float()  # [N]
        return (fused_logsumexp(hidden, table, configs=configs) - positive).sum()
    return loss


def kernel_calls(hidden, table):
    """Per fused kernel, a function of a config that launches it alone on the bf16 operands of the step."""
    hidden_c, table_c = product_operands(hidden.detach(), table.detach(), torch.bfloat16)
    with torch.no_grad():
        lse = chunked_logsumexp(hidden_c, table_c)  # the backward kernels' input, whichever forward fails
    grad = torch.ones_like(lse)
    return {
        "forward": lambda c: launch_forward(hidden_c, table_c, torch.bfloat16, None, c),
        "backward_hidden": lambda c: launch_backward(hidden_c, table_c, lse, grad, torch.bfloat16, None, c, False),
        "backward_table": lambda c: launch_backward(hidden_c, table_c, lse, grad, torch.bfloat16, None, c, True),
    }


def attempt(fn):
    """``fn()``, or the error's first line when it fails (a config over the shared memory, say): reported,
    not raised."""
    try:
        return fn()
    except Exception as error:
        first_line = (str(error).splitlines() or [""])[0][:80]
        return f"failed: {type(error).__name__}: {first_line}".replace("|", "/")


def bench_shape(shape, candidates, device, args, budget: Budget) -> dict:
    """Every measurement of one shape (see the module docstring)."""
    hidden, table, targets = inputs(shape, device)
    result = {"shape": shape, "end_to_end": {}, "kernels": {k: {} for k in FUSED_KERNELS}, "breakdown": {}}
    runs = {"chunked": forward_backward(lambda h, t, y: full_softmax_loss_sum(h, t, y, path="chunked"),
                                        hidden, table, targets, device),
            "fused (FUSED_CONFIGS)": forward_backward(lambda h, t, y: full_softmax_loss_sum(h, t, y, path="fused"),
                                                      hidden, table, targets, device)}
    for name, run in runs.items():
        result["end_to_end"][name] = attempt(lambda: timing(run, device, args, graph=name != "chunked"))  # noqa: B023
    calls = kernel_calls(hidden, table)
    for kernel in FUSED_KERNELS:
        reference = None  # the output of the first candidate that runs: the fixed config's unless it fails
        for config in candidates:
            if not budget.allows():
                result["kernels"][kernel][config] = "skipped (time budget)"
                continue
            output = attempt(lambda: calls[kernel](config))  # noqa: B023 (called here)
            if isinstance(output, str):
                result["kernels"][kernel][config] = output
                continue
            reference = output if reference is None else reference
            gap = relative_gap(output, reference)
            timed = attempt(lambda: timing(lambda: calls[kernel](config), device, args))  # noqa: B023
            result["kernels"][kernel][config] = (timed | {"gap": gap} if gap < GAP_LIMIT else f"WRONG: gap {gap:.1e}") \
                if isinstance(timed, dict) else timed
    best = {}
    for kernel, timings in result["kernels"].items():
        timed = {c: pick_ms(v) for c, v in timings.items() if isinstance(v, dict)}
        best[kernel] = min(timed, key=timed.get) if timed else FIXED_CONFIG
    result["best"] = best
    runs["fused (fixed)"] = forward_backward(fused_with(dict.fromkeys(FUSED_KERNELS, FIXED_CONFIG)),
                                             hidden, table, targets, device)
    runs["fused (best)"] = forward_backward(fused_with(best), hidden, table, targets, device)
    for name in ("fused (fixed)", "fused (best)"):
        result["end_to_end"][name] = attempt(lambda: timing(runs[name], device, args))  # noqa: B023
    for name in ("chunked", "fused (fixed)", "fused (best)"):
        result["breakdown"][name] = attempt(lambda: kernel_breakdown(runs[name], device,  # noqa: B023
                                                                     max(1, args.repeats // 4)))
    return result


def cell(value) -> str:
    """A time in ms, "eager / graph" ms of a ``timing``, or the failure text in its place."""
    if isinstance(value, dict):
        return f"{cell(value['eager'])} / {cell(value['graph'])}"
    return value if isinstance(value, str) else f"{value:.3f}"


def tflops(shape, value) -> str:
    n, items, d = shape
    ms = pick_ms(value)
    return "" if ms is None else f"{10 * n * items * d / (ms * 1e-3) / 1e12:.1f}"


def speedup(slow, fast, eager: bool = False) -> str:
    """The ratio of two timings' ranking times (``pick_ms``), or (``eager``) of their eager times."""
    slow, fast = ((t["eager"] if isinstance(t, dict) else None) if eager else pick_ms(t) for t in (slow, fast))
    return "" if slow is None or fast is None else f"{slow / fast:.2f}x"


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


def suggestions(results: list[dict]) -> dict[int, dict]:
    """Per tile width of the completed shapes, ``suggestion`` over its shapes."""
    widths = sorted({tile_width(r["shape"][2]) for r in results})
    return {w: suggestion([r for r in results if tile_width(r["shape"][2]) == w]) for w in widths}


def suggestion(results: list[dict]) -> dict:
    """Per kernel, the candidate measured at every shape of ``results`` with the smallest geometric mean of
    its time over the fixed config's there (FIXED_CONFIG when none is)."""
    chosen = {}
    for kernel in FUSED_KERNELS:
        ratios = {}
        for result in results:
            timings = result["kernels"][kernel]
            fixed = pick_ms(timings.get(FIXED_CONFIG))
            if fixed is None:
                continue
            for config, value in timings.items():
                ms = pick_ms(value)
                ratios.setdefault(config, []).append(None if ms is None else ms / fixed)
        complete = {c: r for c, r in ratios.items() if r and None not in r and len(r) == len(ratios[FIXED_CONFIG])}
        chosen[kernel] = min(complete, key=lambda c: statistics.geometric_mean(complete[c])) if complete \
            else FIXED_CONFIG
    return chosen


def report(header: list[str], results: list[dict], skipped: list, candidates: list) -> str:
    lines = [*header, "", "## End to end (forward+backward, median ms: eager / replayed as a CUDA graph)", ""]
    rows = []
    for r in results:
        e = r["end_to_end"]
        picked = " / ".join(r["best"][k].name for k in FUSED_KERNELS)
        rows.append([shape_name(r["shape"]), *(cell(e[name]) for name in (
            "chunked", "fused (FUSED_CONFIGS)", "fused (fixed)", "fused (best)")),
            speedup(e["fused (fixed)"], e["fused (best)"]), speedup(e["chunked"], e["fused (best)"], eager=True),
            tflops(r["shape"], e["fused (best)"]), picked])
    rows += [[shape_name(s), *["skipped (time budget)"] * 7, ""] for s in skipped]
    lines.append(pipe_table(["rows x items x d", "chunked", "fused, FUSED_CONFIGS", "fused, fixed", "fused, best",
                             "best vs fixed", "best vs chunked", "fused, best: TFLOP/s", "best config (forward / "
                             "backward_hidden / backward_table)"], rows, "lrrrrrrrl"))
    lines += ["", "Best vs fixed and TFLOP/s take the graph replay's time where it ran (the GPU's own), else the "
              "eager one; best vs chunked the eager times; TFLOP/s: the fused path's products, 10 N I d "
              "floating-point operations (the forward's logits, each backward's logits and gradient product), over "
              "its forward+backward time."]
    lines += ["", "Fastest candidate per kernel over the shapes above of each tile width (geometric mean of its "
              "time over the fixed config's), as entries of losses.py's table:", "", "```python",
              *(f"FUSED_CONFIGS[{width}] = " + "{" + ", ".join(
                  f'"{k}": LaunchConfig({", ".join(map(str, chosen[k]))})' for k in FUSED_KERNELS) + "}"
                for width, chosen in suggestions(results).items()), "```"]
    for r in results:
        lines += ["", f"## {shape_name(r['shape'])}: each kernel alone (median ms, eager / graph replay; "
                  "* fastest by the graph time, else the eager)", ""]
        rows = []
        for config in candidates:
            row = [config.name + (" (fixed)" if config == FIXED_CONFIG else "")]
            for kernel in FUSED_KERNELS:
                value = r["kernels"][kernel].get(config, "")
                row.append(cell(value) + (" *" if config == r["best"][kernel] and isinstance(value, dict) else ""))
            rows.append(row)
        lines.append(pipe_table(["config", *FUSED_KERNELS], rows, "lrrr"))
        for name, kernels in r["breakdown"].items():
            lines += ["", f"Per kernel, {name} (torch.profiler; ms per forward+backward):", ""]
            lines.append(kernels if isinstance(kernels, str) else pipe_table(["kernel", "launches", "ms"], [
                [k[:90].replace("|", "/"), f"{count:g}", cell(t)] for k, count, t in kernels[:12]], "lrr"))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the markdown report to write")
    parser.add_argument("--shapes", default=None, help="comma list of ROWSxITEMSxD (default: the five of SHAPES)")
    parser.add_argument("--candidates", choices=("pruned", "grid"), default="pruned")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--time-budget", type=float, default=None, help="seconds; what is left is skipped")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, two candidates, two repeats")
    args = parser.parse_args()
    budget = Budget(args.time_budget)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("without CUDA the fused kernels run only in Triton's interpreter: set TRITON_INTERPRET=1")
    if device.type != "cuda" and not args.smoke:
        parser.error("without CUDA only --smoke runs (the interpreter is far too slow for the full shapes)")
    candidates = GRID if args.candidates == "grid" else PRUNED
    shapes = parse_shapes(args.shapes) if args.shapes else SHAPES
    if args.smoke:
        candidates, args.repeats, args.warmup = [FIXED_CONFIG, SMOKE_CANDIDATE], 2, 1
        shapes = parse_shapes(args.shapes) if args.shapes else SMOKE_SHAPES
    torch.backends.cuda.matmul.allow_tf32 = False
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})"
    import triton
    header = ["# Full-softmax loss: fused Triton kernels per launch config and the chunked path", "",
              f"Machine: {machine}, {platform.node()}; torch {torch.__version__}, Triton {triton.__version__}"
              + (", TRITON_INTERPRET=1" if os.environ.get("TRITON_INTERPRET") == "1" else "") + ".",
              "Inputs: fp32 hidden [N, d] ~ N(0, 1) and table [I, d] ~ N(0, 0.3^2) under bf16 autocast (bf16 "
              "products, fp32 sums), random targets; TF32 off.",
              f"Median of {args.repeats} synchronised repeats after {args.warmup} warm-up calls; candidates: "
              f"{args.candidates} ({len(candidates)}); config names "
              "n<block rows>_i<block items>_w<warps>_s<stages>_p<programs per SM>; "
              "FUSED_CONFIGS: " + "; ".join(f"tile width {w}: " + ", ".join(
                  f"{k} {c.name}" for k, c in FUSED_CONFIGS[w].items()) for w in sorted({tile_width(s[2])
                                                                                     for s in shapes})) + ".",
              f"Command: `python3 {' '.join(sys.argv)}`"]
    results = []
    for index, shape in enumerate(shapes):
        if not budget.allows():
            write_atomically(args.out, report(header, results, shapes[index:], candidates))
            break
        print(f"shape {shape_name(shape)} ...", flush=True)
        results.append(bench_shape(shape, candidates, device, args, budget))
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the shape's tensors, freed on return
        r = results[-1]
        for kernel in FUSED_KERNELS:
            fixed, best = r["kernels"][kernel].get(FIXED_CONFIG), r["kernels"][kernel].get(r["best"][kernel])
            print(f"  {kernel}: picked {r['best'][kernel].name} ({cell(best)}), fixed ({cell(fixed)}); ms eager / "
                  "graph", flush=True)
        e = r["end_to_end"]
        fixed, best = e["fused (fixed)"], e["fused (best)"]
        verdict = ("beats" if pick_ms(best) < pick_ms(fixed) else "does not beat") if speedup(fixed, best) \
            else "cannot be compared to"
        print(f"  forward+backward, ms eager / graph: chunked {cell(e['chunked'])}, fused fixed {cell(fixed)}, "
              f"fused best {cell(best)}: best {verdict} the fixed config ({speedup(fixed, best)})", flush=True)
        write_atomically(args.out, report(header, results, [], candidates))
    for width, chosen in suggestions(results).items():
        print(f"suggested FUSED_CONFIGS[{width}]: " + ", ".join(f"{k} {chosen[k].name}" for k in FUSED_KERNELS),
              flush=True)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
