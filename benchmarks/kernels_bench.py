"""GPU check and benchmark of delta_scan's Triton backends against an fp32 reference and fla-core 0.6.0.

  1. small-shape check: every backend and variant, fp32 and bf16 inputs with an initial state, at lengths
     off the chunk multiples, against the naive per-token loop in fp32 (outputs, final state, every
     input gradient);
  2. for every (B, T, H, D) shape and variant (L = 0, 1, 3 with beta; beta None = SSD): bf16 (and fp32 at
     T <= 256) errors of each backend against an fp32 reference (the naive loop for T <= 256, else the
     chunked PyTorch path with tf32 off), then forward (no grad) and forward+backward times with
     triton.testing.do_bench (median, ms);
  3. fla's chunk_gated_delta_rule (L = 0) and chunk_simple_gla (SSD) on the same inputs.
A failing cell (a compile error, out of memory, fla's refusal) is reported in the table, not raised; every
check and timing cell runs in a cell worker process, so a CUDA error that poisons its context (an illegal
address) fails that cell only and the next cell starts a fresh worker. With --time-budget the cells left when
it runs out are marked skipped. Kernels are compiled first by worker processes in parallel (shared
TRITON_CACHE_DIR), since compiling is most of the cost on a fresh machine. The report is rewritten after
every check and every row. --smoke runs the whole script once on the CPU under
TRITON_INTERPRET=1 at a tiny shape, without worker processes (each time is one call, not a measurement):
it catches errors in the script and in the kernels' launch code before a GPU run.

    python benchmarks/kernels_bench.py --out results/kernels.md [--workers 12] [--fla] [--fla-bypass]
        [--backends triton,chunk_parallel,chunk_split] [--variants L=0,L=3] [--shapes 0,1 | issue20 | 256x50x2x32,...]
        [--chunk-sizes 16,32] [--time-budget SECONDS] [--smoke]
"""

import argparse
import concurrent.futures
import contextlib
import datetime
import importlib
import importlib.metadata
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(256, 200, 4, 32), (256, 200, 2, 64), (64, 1024, 4, 64), (16, 4096, 8, 64), (8, 8192, 8, 128)]
ISSUE20_SHAPES = [(256, 50, 2, 32), (256, 200, 2, 32), (256, 200, 4, 32), (64, 1024, 4, 64), (8, 8192, 8, 128)]
SMALL_CHECK_SHAPES = [(2, 70, 3, 32), (1, 150, 2, 64)]  # lengths off every chunk multiple
SMOKE_SHAPE = (1, 70, 2, 16)  # --smoke: two chunks of 64, the second ending inside
VARIANTS = {"L=0": (True, 0), "L=1": (True, 1), "L=3": (True, 3), "SSD": (False, 0)}  # name: (with beta, L)
BACKEND_ENTRIES = {"triton": ("triton_chunk", "triton_delta_scan"),
                   "chunk_parallel": ("chunk_parallel", "chunk_parallel_delta_scan"),
                   "chunk_split": ("chunk_split", "chunk_split_delta_scan")}
GRAD_NAMES = ("q", "k", "v", "g", "beta", "extra_k", "extra_v", "initial_state")
BF16_TARGET = 1e-2  # the issue's bound on bf16 relative errors
DEVICE = "cuda"  # "cpu" with --smoke


def load_kernels():
    """prism_rec.kernels when installed, else the kernels/ folder of this checkout."""
    try:
        return importlib.import_module("prism_rec.kernels")
    except ImportError:
        sys.path.insert(0, str(REPO))
        return importlib.import_module("kernels")


def parse_shapes(text):
    """'' -> SHAPES, 'issue20' -> ISSUE20_SHAPES, else a comma list of indices into SHAPES or BxTxHxD."""
    if not text:
        return SHAPES
    if text == "issue20":
        return ISSUE20_SHAPES
    return [tuple(int(n) for n in item.split("x")) if "x" in item else SHAPES[int(item)] for item in text.split(",")]


def make_inputs(shape, variant, dtype, seed=0, with_initial_state=False):
    """Inputs on the GPU: unit-norm keys, decays in (0, 1), beta in (0, 1); fp32 g, beta and initial state."""
    B, T, H, D = shape
    with_beta, L = VARIANTS[variant]
    gen = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, device=DEVICE, generator=gen)

    return {
        "q": randn(B, T, H, D).to(dtype),
        "k": F.normalize(randn(B, T, H, D), dim=-1).to(dtype),
        "v": randn(B, T, H, D).to(dtype),
        "g": F.logsigmoid(randn(B, T, H) + 3.0),
        "beta": torch.sigmoid(randn(B, T, H)) if with_beta else None,
        "extra_k": (0.5 * randn(B, T, H, L, D)).to(dtype) if L else None,
        "extra_v": (0.5 * randn(B, T, H, L, D)).to(dtype) if L else None,
        "initial_state": randn(B, H, D, D) if with_initial_state else None,
    }


def with_grad(inputs):
    return {n: None if x is None else x.detach().clone().requires_grad_() for n, x in inputs.items()}


def scan_call(scan, backend, overrides=None):
    """inputs -> (o, final state) through delta_scan's backend, or its Triton entry point with block-size
    overrides (a dict, as chunk_overrides makes)."""
    if overrides is None:
        return lambda x: scan.delta_scan(**x, output_final_state=True, backend=backend)
    module, entry = BACKEND_ENTRIES[backend]
    function = getattr(importlib.import_module(f"{scan.__name__}.{module}"), entry)
    return lambda x: function(**x, scale=x["q"].shape[-1] ** -0.5, **overrides)


def chunk_overrides(backend, chunk_size):
    """The block-size overrides of a forced chunk size (None: the backend's automatic sizes)."""
    if chunk_size is None:
        return None
    return {"chunk": chunk_size} if backend in ("chunk_parallel", "chunk_split") else {"chunk_size": chunk_size}


def forward_backward(call, inputs, d_o):
    """o, final state and gradients of sum(o * d_o) + sum(state)."""
    inputs = with_grad(inputs)
    o, state = call(inputs)
    (o.float() * d_o).sum().add(state.sum()).backward()
    grads = {"d_" + n: inputs[n].grad for n in GRAD_NAMES if inputs[n] is not None}
    return {"o": o.detach(), "final_state": state.detach(), **grads}


def worst_relative_error(result, reference):
    """max over tensors of ||x - x_ref|| / ||x_ref|| (norm-wise); returns (error, tensor name)."""
    errors = {n: ((result[n].float() - reference[n].float()).norm() / reference[n].float().norm()).item()
              for n in reference}
    name = max(errors, key=lambda n: errors[n] if errors[n] == errors[n] else float("inf"))
    return errors[name], name


def check_errors(scan, shape, variant, backends, dtypes, reference_backend, with_initial_state=False):
    """{backend: {dtype: (error, tensor name) or an error message}} against one fp32 reference."""
    inputs32 = make_inputs(shape, variant, torch.float32, seed=1, with_initial_state=with_initial_state)
    d_o = torch.randn(inputs32["v"].shape, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(2))
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = forward_backward(scan_call(scan, reference_backend), inputs32, d_o)
    errors = {}
    for backend in backends:
        errors[backend] = {}
        for dtype in dtypes:
            inputs = {n: None if x is None else (x.to(dtype) if n in ("q", "k", "v", "extra_k", "extra_v") else x)
                      for n, x in inputs32.items()}
            errors[backend][dtype] = guarded(lambda backend=backend, inputs=inputs,
                                             reference=reference: worst_relative_error(
                forward_backward(scan_call(scan, backend), inputs, d_o), reference))
    del reference
    torch.cuda.empty_cache()
    return errors


def guarded_check(scan, shape, variant, backend, dtypes, reference_backend, with_initial_state):
    """check_errors of one backend (a cell of its own), or one message when its reference fails."""
    return guarded(lambda: check_errors(scan, shape, variant, [backend], dtypes, reference_backend,
                                        with_initial_state)[backend])


def guarded(measure):
    """measure() or, when it raises, a one-line message (a failing cell is reported, not fatal)."""
    try:
        return measure()
    except Exception as error:
        with contextlib.suppress(Exception):  # raises again in a context a CUDA error has poisoned
            torch.cuda.empty_cache()
        return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:120]}"


def fla_function(variant):
    if variant == "L=0":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        return lambda q, k, v, g, beta: chunk_gated_delta_rule(q, k, v, g, beta)
    from fla.ops.simple_gla import chunk_simple_gla
    return lambda q, k, v, g, beta: chunk_simple_gla(q, k, v, g)


def timed_calls(scan, shape, variant, who, overrides=None):
    """(forward, forward+backward, leaves) for a backend of ours or "fla" on bf16 inputs."""
    inputs = make_inputs(shape, variant, torch.bfloat16)
    grad_inputs = with_grad(inputs)
    d_o = torch.randn_like(inputs["v"])
    if who == "fla":
        fla_call = fla_function(variant)

        def run(x):
            return fla_call(x["q"], x["k"], x["v"], x["g"], x["beta"])[0]
    else:
        call = scan_call(scan, who, overrides)

        def run(x):
            return call(x)[0]

    def forward():
        with torch.no_grad():
            run(inputs)

    def forward_backward_once():
        run(grad_inputs).backward(d_o)

    return forward, forward_backward_once, [x for x in grad_inputs.values() if x is not None]


def bench(fn, grad_to_none=None):
    """Median ms of do_bench on the GPU; with --smoke the wall ms of one call."""
    if DEVICE == "cpu":
        started = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - started)
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=50, grad_to_none=grad_to_none, return_mode="median")


def time_cell(scan, shape, variant, who, chunk_size=None):
    """(forward ms, forward+backward ms); either may be a message instead."""
    calls = guarded(lambda: timed_calls(scan, shape, variant, who, chunk_overrides(who, chunk_size)))
    if isinstance(calls, str):
        return calls, calls
    forward, fwd_bwd, leaves = calls
    return guarded(lambda: bench(forward)), guarded(lambda: bench(fwd_bwd, leaves))


def check_dtypes(shape):
    """fp32 inputs are checked at the recommendation shapes only (separate kernels, compile time)."""
    return (torch.bfloat16, torch.float32) if shape[1] <= 256 else (torch.bfloat16,)


def warm_worker(task):
    """Compile (and autotune) one case in a worker process; returns an error line or None. A "check" task
    runs what check_errors runs of our backends (outputs and the final state's gradient too), without the
    reference."""
    kind, who, shape, variant, detail, part = task
    scan = load_kernels()
    try:
        if kind == "check":
            for backend in who:
                for dtype in detail:
                    inputs = make_inputs(shape, variant, dtype, seed=1, with_initial_state=part == "initial")
                    forward_backward(scan_call(scan, backend), inputs, torch.randn(inputs["v"].shape, device="cuda"))
        else:
            forward, fwd_bwd, _ = timed_calls(scan, shape, variant, who, chunk_overrides(who, detail))
            forward() if part == "forward" else fwd_bwd()
        torch.cuda.synchronize()
        return None
    except Exception as error:  # report and go on: one refusal (fla's #640 guard) must not stop the rest
        return f"{task}: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"


def bypass_fla_hopper_guard():
    """fla refuses its gated backward on Hopper with Triton < 3.7.1 (fla issue 640); lift it for timing.
    Without fla nothing is done: its cells report the import error."""
    try:
        import fla.ops.common.chunk_o as chunk_o
    except ImportError:
        return
    chunk_o.TRITON_ABOVE_3_7_1 = True


def warm_up(tasks, workers, fla_bypass, seconds):
    """Compile the cases in worker processes; error lines (a worker that hangs or dies ends the phase at
    `seconds`: what it left uncompiled compiles on first use)."""
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(workers, initializer=bypass_fla_hopper_guard if fla_bypass else None)
    try:
        return [e for e in pool.map_async(warm_worker, tasks, chunksize=1).get(timeout=seconds) if e]
    except multiprocessing.TimeoutError:
        return [f"warm-up stopped after {seconds:.0f} s (a worker hung or died)"]
    finally:
        pool.terminate()


def run_cell(function, args):
    """function(scan, *args) in a cell worker; returns (its result, whether the CUDA context is poisoned)."""
    result = function(load_kernels(), *args)
    try:
        torch.cuda.synchronize()
        return result, False
    except Exception:  # a CUDA error (an illegal address) stays in the context: later calls would all fail
        return result, True


class CellRunner:
    """Runs every check and timing cell in one spawned worker process with its own CUDA context: a CUDA error
    that poisons the context, or a worker that dies, fails that cell (its message goes into the report) and
    the next cell gets a fresh worker. With --smoke (CPU) the cells run in this process."""

    def __init__(self, fla_bypass):
        self.fla_bypass, self.executor = fla_bypass, None

    def __call__(self, function, *args):
        if DEVICE == "cpu":
            return function(load_kernels(), *args)
        if self.executor is None:
            self.executor = concurrent.futures.ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"),
                initializer=bypass_fla_hopper_guard if self.fla_bypass else None)
        try:
            result, poisoned = self.executor.submit(run_cell, function, args).result()
        except concurrent.futures.process.BrokenProcessPool as error:
            result, poisoned = f"cell worker died ({type(error).__name__})", True
        if poisoned:
            print(f"  cell {function.__name__}{args} left its worker unusable (a CUDA error, or it died): a fresh "
                  "worker for the next cell", flush=True)
            self.close()
        return result

    def close(self):
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None


def use_smoke_settings():
    """--smoke: CPU tensors through Triton's interpreter (set before any kernel module loads), and the tiny
    shape for the small-shape check as well."""
    global DEVICE, SMALL_CHECK_SHAPES
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = "cpu"
    SMALL_CHECK_SHAPES = [SMOKE_SHAPE]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "results" / "kernels.md"))
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--fla", action="store_true", help="also time fla-core (needs it importable)")
    parser.add_argument("--fla-bypass", action="store_true", help="time fla's backward with its Hopper guard lifted")
    parser.add_argument("--backends", default="triton",
                        help="comma list of delta_scan backends to check and time: triton, chunk_parallel, chunk_split")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list of L=0, L=1, L=3, SSD")
    parser.add_argument("--chunk-sizes", default="",
                        help="comma list: also time these chunk sizes (every backend and selected shape, L=0 and L=3)")
    parser.add_argument("--shapes", default="",
                        help="indices into the shape list, issue20, or BxTxHxD items, comma separated")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds: cells not started by then are marked skipped")
    parser.add_argument("--smoke", action="store_true",
                        help=f"CPU, TRITON_INTERPRET=1, shape {SMOKE_SHAPE} (unless --shapes), no workers, one call "
                        "per time")
    args = parser.parse_args()
    started = time.time()
    if args.smoke:
        use_smoke_settings()
    shapes = parse_shapes(args.shapes) if args.shapes or not args.smoke else [SMOKE_SHAPE]
    backends = args.backends.split(",")
    variants = args.variants.split(",")
    chunk_sizes = [int(c) for c in args.chunk_sizes.split(",") if c]
    sweep_variants = [v for v in ("L=0", "L=3") if v in variants]
    if args.fla_bypass:
        bypass_fla_hopper_guard()

    parts = ("forward", "train")
    # longest first: fla's autotuning, then our longest shapes
    tasks = [("time", "fla", s, v, None, p)
             for s in shapes for v in variants if v in ("L=0", "SSD") for p in parts] if args.fla else []
    tasks += [("time", b, s, v, None, p) for s in reversed(shapes) for v in variants for b in backends for p in parts]
    tasks += [("check", backends, s, v, (torch.bfloat16, torch.float32), "initial")
              for s in SMALL_CHECK_SHAPES for v in variants]
    tasks += [("check", backends, s, v, check_dtypes(s), "") for s in shapes for v in variants]
    tasks += [("time", b, s, v, c, p)
              for s in shapes for v in sweep_variants for b in backends for c in chunk_sizes for p in parts]
    warm_seconds = 0.6 * args.time_budget if args.time_budget else 3600.0
    warm_errors = [] if args.smoke else warm_up(tasks, args.workers, args.fla_bypass, warm_seconds)
    print(f"compiled {len(tasks)} cases in {time.time() - started:.0f} s; errors: {len(warm_errors)}", flush=True)
    for line in warm_errors:
        print("  ", line, flush=True)

    cell = CellRunner(args.fla_bypass)
    report = Report(Path(args.out), args, backends, started)
    for shape in SMALL_CHECK_SHAPES:
        for variant in variants:
            report.checks.append((shape, variant, {b: cell(guarded_check, shape, variant, b,
                                                           (torch.bfloat16, torch.float32), "naive", True)
                                                   for b in backends}))
            report.write()
    for shape in shapes:
        for variant in variants:
            if report.out_of_time():
                report.rows.append((shape, variant, None, {}))
                continue
            reference_backend = "naive" if shape[1] <= 256 else "torch"
            cells = {b: {"errors": cell(guarded_check, shape, variant, b, check_dtypes(shape), reference_backend,
                                        False),
                         "times": cell(time_cell, shape, variant, b)}
                     for b in backends}
            if args.fla and variant in ("L=0", "SSD"):
                cells["fla"] = {"times": cell(time_cell, shape, variant, "fla")}
            report.rows.append((shape, variant, reference_backend, cells))
            for backend in backends:
                for chunk_size in chunk_sizes if variant in sweep_variants else []:
                    report.sweep.append((shape, variant, backend, chunk_size,
                                         cell(time_cell, shape, variant, backend, chunk_size)))
            report.write()
            print(report.format_row(report.rows[-1]), flush=True)
    cell.close()
    report.write(final=True)


def ms(x):
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else f"failed ({x})")


def format_errors(errors):
    """bf16 / fp32 errors of one backend, each with its tensor name; FAIL above the bf16 bound."""
    if isinstance(errors, str):
        return f"failed ({errors})"

    def one(dtype):
        if dtype not in errors:
            return "-"
        if isinstance(errors[dtype], str):
            return f"failed ({errors[dtype]})"
        error, name = errors[dtype]
        bound = BF16_TARGET if dtype == torch.bfloat16 else 1e-4
        return f"{error:.1e} ({name}){'' if error <= bound else ' FAIL'}"

    return " / ".join(one(d) for d in (torch.bfloat16, torch.float32))


class Report:
    """The markdown report, rewritten after every row."""

    def __init__(self, path, args, backends, started):
        self.path, self.args, self.backends, self.started = path, args, backends, started
        self.checks, self.rows, self.sweep = [], [], []

    def out_of_time(self):
        return self.args.time_budget is not None and time.time() - self.started > self.args.time_budget

    def format_row(self, row):
        shape, variant, reference_backend, cells = row
        if reference_backend is None:
            return f"| {shape} | {variant} |" + " skipped (time budget) |" * (3 * len(self.backends) + 1)
        timings = [cells[w]["times"] if w in cells else (None, None) for w in (*self.backends, "fla")]
        fla_fwd_bwd = timings[-1][1]
        ratios = [f"{fla_fwd_bwd / t[1]:.2f}x" if isinstance(fla_fwd_bwd, float) and isinstance(t[1], float) else "-"
                  for t in timings[:-1]]
        errors = [f"{format_errors(cells[b]['errors'])} vs {reference_backend}" for b in self.backends]
        return "| " + " | ".join([str(shape), variant, *(f"{ms(f)} / {ms(fb)}" for f, fb in timings), *ratios,
                                  *errors]) + " |"

    def summary(self):
        """Forward+backward ms at L=0 and L=3 per backend, fla at L=0, and the issue's two ratios."""
        fwd_bwd = {(r[0], r[1], w): c["times"][1] for r in self.rows for w, c in r[3].items()}
        lines = ["| (B, T, H, D) | " + " | ".join(f"{b} L=0 / L=3 (L=3 / L=0)" for b in self.backends)
                 + " | fla L=0 | fla / ours L=0 |",
                 "|---|" + "---|" * (len(self.backends) + 2)]
        for shape in dict.fromkeys(r[0] for r in self.rows):
            cells, ratios = [], []
            fla = fwd_bwd.get((shape, "L=0", "fla"))
            for b in self.backends:
                l0, l3 = fwd_bwd.get((shape, "L=0", b)), fwd_bwd.get((shape, "L=3", b))
                both = isinstance(l0, float) and isinstance(l3, float)
                cells.append(f"{ms(l0)} / {ms(l3)}" + (f" ({l3 / l0:.2f})" if both else ""))
                ratios.append(f"{b} {fla / l0:.2f}x" if isinstance(fla, float) and isinstance(l0, float) else f"{b} -")
            lines.append(f"| {shape} | " + " | ".join(cells) + f" | {ms(fla)} | {', '.join(ratios)} |")
        return lines

    def write(self, final=False):
        import triton

        try:
            fla_version = importlib.metadata.version("fla-core")
        except importlib.metadata.PackageNotFoundError:
            fla_version = "not installed"
        args = self.args
        gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "none (--smoke: CPU, TRITON_INTERPRET=1)"
        lines = [
            "# delta_scan (Triton) on the GPU",
            "",
            f"- GPU: {gpu}; torch {torch.__version__}; Triton {triton.__version__}; "
            f"fla-core {fla_version}; Python {platform.python_version()}",
            f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; script wall time "
            f"{time.time() - self.started:.0f} s{'' if final else ' (running)'}",
            f"- command: `python benchmarks/kernels_bench.py {' '.join(sys.argv[1:])}`",
            f"- backends: {', '.join(self.backends)} (delta_scan's backend argument); bf16 q, k, v (and extra "
            "keys/values), fp32 g and",
            "  beta; times are triton.testing.do_bench medians in ms; forward without grad, forward+backward with "
            "grads of",
            "  every input; fla = chunk_gated_delta_rule for L=0, chunk_simple_gla for SSD (beta None, L=0); "
            "ratio = fla / ours.",
            "- error: max over o, final state and every input gradient of ||x - x_ref|| / ||x_ref||, bf16 / fp32",
            "  inputs (fp32 at T <= 256 only), against the fp32 reference named (naive per-token loop, or the torch",
            f"  chunk path with tf32 off); FAIL above {BF16_TARGET:g} (bf16) or 1e-4 (fp32).",
        ]
        if args.fla_bypass:
            lines.append(f"- the fla column (fla-core {fla_version}) was timed with fla's Triton-version guard "
                         "bypassed: fla refuses its gated backward (chunk_bwd_dqkwg) on Hopper with Triton < 3.7.1, "
                         f"here Triton {triton.__version__} (fla issue 640); fla's results were timed only, not "
                         "checked.")
        if DEVICE == "cpu":
            lines.append("- --smoke: every time is the wall time of one call under the interpreter, not a "
                         "measurement.")
        lines += ["", "Small-shape check against the naive loop (initial state given; T off the chunk multiples):", "",
                  "| (B, T, H, D) | variant | " + " | ".join(f"{b} bf16 / fp32" for b in self.backends) + " |",
                  "|---|---|" + "---|" * len(self.backends)]
        lines += [f"| {s} | {v} | " + " | ".join(format_errors(e[b]) for b in self.backends) + " |" for s, v,
                  e in self.checks]
        if self.rows:
            lines += ["",
                      "| (B, T, H, D) | variant | " + " | ".join(f"{w} fwd / fwd+bwd" for w in (*self.backends, "fla"))
                      + " | " + " | ".join(f"fla / {b}" for b in self.backends)
                      + " | " + " | ".join(f"{b} max rel. error bf16 / fp32" for b in self.backends) + " |",
                      "|---|---|" + "---|" * (3 * len(self.backends) + 1)]
            lines += [self.format_row(r) for r in self.rows]
            lines += ["", "Forward+backward (ms):", ""] + self.summary()
        if self.sweep:
            lines += ["", "Chunk-size sweep (bf16):", "",
                      "| (B, T, H, D) | variant | backend | chunk | fwd | fwd+bwd |", "|---|---|---|---|---|---|"]
            lines += [f"| {s} | {v} | {b} | {c} | {ms(f)} | {ms(fb)} |" for s, v, b, c, (f, fb) in self.sweep]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("\n".join(lines) + "\n")
        if final:
            print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
