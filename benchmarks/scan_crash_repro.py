"""Which launch of the fused Triton scan (kernels/triton_chunk.py) faults at the authors' protocol's shapes.

The faithful backbones (gated_deltanet, prism) died on the H200 with "an illegal memory access" under the
authors' protocol: head width K = V = 128 (backbone 256 wide, 2 heads), T = 21 tokens (one partial chunk of
32), fp32, batches of 256 with a last training batch of 168 and a last validation batch of 86. This runs
``triton_delta_scan`` at those shapes, one case per subprocess (CUDA_LAUNCH_BLOCKING=1, so the error names the
launch that faulted and a fault cannot poison the other cases; not under a CUDA MPS server, which reports a
client's fatal fault to every client on the GPU), and prints one PASS / FAIL line per case:

    python benchmarks/scan_crash_repro.py                       # every case, on CUDA
    python benchmarks/scan_crash_repro.py --repeats 5           # each case in 5 fresh processes
    python benchmarks/scan_crash_repro.py --wrap "compute-sanitizer --tool memcheck"
    python benchmarks/scan_crash_repro.py --modes nograd --num-stages 1   # a failing case without pipelining
    python benchmarks/scan_crash_repro.py --tokens 21,33                  # one chunk (loop-free code) and two
    python benchmarks/scan_crash_repro.py --device cpu --batches 2 --last-batches 1,1 --workers 2   # smoke test
                                                                 # (Triton's interpreter, minutes)

Cases (batch B, length T, mode, value block, extra writes L): ``nograd`` is the validation pass's forward (no
chunk states stored); ``grad`` a training step's forward and backward; ``epoch`` one process running what a run
does in turn (grad at B, grad at the last training batch, nograd at B, nograd at the last validation batch:
--last-batches, 168 and 86 by default). Value block ``auto`` is what the scan picks (``_value_block``: 128 at
B = 256 and 168, 64 at B = 86), ``64`` forces 64 in both passes, ``fallback`` keeps the forward's block and
refuses backward blocks above 64 with OutOfResources, as the GPU does when a backward needs more shared memory
than it has (``fitting_value_block``). L = 0 is gated_deltanet, L = 3 prism. Each case also checks o, the final
state and (grad) the input gradients against the per-token reference (kernels/naive.py), so a silent
corruption fails too. Exit status 1 when any case fails.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
import triton
from prism_rec.kernels import triton_chunk
from prism_rec.kernels.naive import naive_delta_scan
from triton.runtime.errors import OutOfResources

MODES = ("nograd", "grad", "epoch")
VALUE_BLOCKS = ("auto", "64", "fallback")
LAST_BATCHES = "168,86"  # ml-100k's last training and last validation batch, at batches of 256
HEAD_WIDTH, HEADS = 128, 2
TOKENS = "21"  # the authors' protocol's 1 + 20 neighbours: one partial chunk of 32
TOLERANCE = 1e-4  # relative, fp32 against the naive loop


def scan_inputs(B: int, T: int, L: int, device: str, grad: bool, seed: int = 0) -> dict:
    """fp32 inputs like the backbone's: unit-norm q and k, log-decays < 0, beta in (0, 1); rank-L writes if L."""
    gen = torch.Generator().manual_seed(seed)
    H, K = HEADS, HEAD_WIDTH

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    inputs = {"q": F.normalize(randn(B, T, H, K), dim=-1), "k": F.normalize(randn(B, T, H, K), dim=-1),
              "v": randn(B, T, H, K), "g": F.logsigmoid(randn(B, T, H) + 2.0), "beta": torch.sigmoid(randn(B, T, H)),
              "extra_k": F.normalize(randn(B, T, H, L, K), dim=-1) if L else None,
              "extra_v": 0.5 * randn(B, T, H, L, K) if L else None}
    return {name: None if x is None else x.to(device).requires_grad_(grad) for name, x in inputs.items()}


KERNELS = ("_chunk_inverse_kernel", "_forward_kernel", "_backward_kernel")


def with_launch_options(kernel, overrides: dict):
    """``kernel`` launched with Triton's launch options ``overrides`` (num_stages, num_warps) in place of its own."""

    class Overriding:
        def __getitem__(self, grid):
            def launch(*args, **options):
                return kernel[grid](*args, **{**options, **overrides})
            return launch

    return Overriding()


def refusing_wide_backward(limit: int = 64):
    """triton_chunk's backward kernel, refused (OutOfResources) above value block ``limit``."""
    kernel = triton_chunk._backward_kernel

    class Refusing:
        def __getitem__(self, grid):
            def launch(*args, **options):
                if options["BV"] > limit:
                    raise OutOfResources(262144, 232448, "shared memory")
                return kernel[grid](*args, **options)
            return launch

    return Refusing()


def max_error(actual, expected) -> float:
    """Largest relative error (norm of the difference over the reference's norm, at least 1) of paired tensors."""
    return max(((a.float() - e.float()).norm() / e.float().norm().clamp_min(1.0)).item()
               for a, e in zip(actual, expected))


def synchronize(device: str) -> None:
    """Wait for the launches so far (CUDA), so that a fault is raised here."""
    if device == "cuda":
        torch.cuda.synchronize()


def run_scan(B: int, T: int, grad: bool, value_block: str, L: int, device: str) -> float:
    """One scan (with its backward when ``grad``) against the naive loop; returns the largest relative error."""
    inputs = scan_inputs(B, T, L, device, grad, seed=B)
    scan = functools.partial(triton_chunk.triton_delta_scan, value_block=64 if value_block == "64" else None)
    arguments = (inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], inputs["extra_k"],
                 inputs["extra_v"], HEAD_WIDTH ** -0.5, None)
    with torch.set_grad_enabled(grad):
        o, state = scan(*arguments)
        synchronize(device)
        reference = naive_delta_scan(*arguments)
    if not grad:
        return max_error((o, state), reference)
    gen = torch.Generator().manual_seed(1)
    d_o, d_state = (torch.randn(x.shape, generator=gen).to(device) for x in (o, state))
    leaves = [x for x in inputs.values() if x is not None]
    grads = torch.autograd.grad((o * d_o).sum() + (state * d_state).sum(), leaves)
    synchronize(device)
    expected = torch.autograd.grad((reference[0] * d_o).sum() + (reference[1] * d_state).sum(), leaves)
    return max(max_error((o, state), reference), max_error(grads, expected))


def run_case(B: int, T: int, mode: str, value_block: str, L: int, device: str, last_batches: tuple[int, int],
             overrides: dict) -> str:
    """The case's PASS line, or raises; ``epoch`` runs a run's sequence of batches in this process, with
    ``last_batches`` the last training and the last validation batch; ``overrides``: launch options of every
    kernel of the scan."""
    if overrides:
        for name in KERNELS:
            setattr(triton_chunk, name, with_launch_options(getattr(triton_chunk, name), overrides))
    if value_block == "fallback":
        triton_chunk._backward_kernel = refusing_wide_backward()
    steps = {"nograd": [(B, False)], "grad": [(B, True)],
             "epoch": [(B, True), (last_batches[0], True), (B, False), (last_batches[1], False)]}[mode]
    errors = []
    for batch, grad in steps:
        errors.append(run_scan(batch, T, grad, value_block, L, device))
        if not errors[-1] <= TOLERANCE:
            raise AssertionError(f"{'grad' if grad else 'nograd'} at B={batch}: relative error {errors[-1]:.2e} "
                                 f"above {TOLERANCE}")
    blocks = sorted(set(triton_chunk._FITTING_VALUE_BLOCKS.values()))
    return f"max relative error {max(errors):.1e}, value blocks used {blocks}"


def case_name(B: int, T: int, mode: str, value_block: str, L: int) -> str:
    return f"B={B} T={T} {mode} value_block={value_block} L={L}"


def launch_overrides(arguments) -> dict:
    """The launch options given on the command line (--num-stages, --num-warps)."""
    return {name: value for name, value in (("num_stages", arguments.num_stages), ("num_warps", arguments.num_warps))
            if value is not None}


def child(arguments) -> int:
    B, T, mode, value_block, L, last_training, last_validation = arguments.case.split(",")
    try:
        line = run_case(int(B), int(T), mode, value_block, int(L), arguments.device,
                        (int(last_training), int(last_validation)), launch_overrides(arguments))
    except Exception as error:  # the CUDA error (or a wrong result) is the case's report
        print(f"FAIL {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}",
              flush=True)
        return 1
    print(f"PASS {line}", flush=True)
    return 0


def spawn(case: tuple, arguments) -> tuple[str, str, float]:
    """(PASS/FAIL, the child's report, seconds) of one case in a fresh process."""
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    if arguments.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    command = [*shlex.split(arguments.wrap), sys.executable, os.path.abspath(__file__), "--device", arguments.device,
               "--case", ",".join(map(str, (*case, *arguments.last_batches))),
               *itertools.chain.from_iterable(("--" + name.replace("_", "-"), str(value))
                                              for name, value in launch_overrides(arguments).items())]
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=arguments.timeout)
    except subprocess.TimeoutExpired:
        return "FAIL", f"timed out after {arguments.timeout} s", time.monotonic() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    if lines and done.returncode in (0, 1):
        verdict, _, report = lines[-1].partition(" ")
    else:  # the process died before reporting (a signal, an abort in the driver)
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        verdict, report = "FAIL", f"process exited with {done.returncode}: {tail}"
    sanitizer = [line.strip() for line in (done.stdout + done.stderr).splitlines()
                 if line.startswith("=========") and ("Invalid" in line or " at " in line)]
    if verdict == "FAIL" and sanitizer:  # compute-sanitizer's first findings: the access and the kernel
        report += " | " + " / ".join(sanitizer[:4])
    return verdict, report, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: Triton's interpreter (TRITON_INTERPRET=1), for a smoke test at tiny batches")
    parser.add_argument("--batches", default="256,168,86", help="comma list of batch sizes B")
    parser.add_argument("--tokens", default=TOKENS, help="comma list of sequence lengths T (21: one partial chunk, "
                        "the kernels compiled for one chunk; 33 or 64: two chunks, a loop over them)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma list of {MODES}")
    parser.add_argument("--value-blocks", default=",".join(VALUE_BLOCKS), help=f"comma list of {VALUE_BLOCKS}")
    parser.add_argument("--last-batches", default=LAST_BATCHES,
                        help="epoch mode: the last training and the last validation batch sizes")
    parser.add_argument("--extra-writes", default="0,3", help="comma list of L (0 = gated_deltanet, 3 = prism)")
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per case (faults may be intermittent)")
    parser.add_argument("--workers", type=int, default=8, help="cases run at once (each its own process)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per case, compilation included")
    parser.add_argument("--num-stages", type=int, help="launch every kernel of the scan with this many pipeline "
                        "stages (1: no software pipelining of the chunk loop's loads; default: Triton's)")
    parser.add_argument("--num-warps", type=int, help="launch every kernel of the scan with this many warps")
    parser.add_argument("--wrap", default="", help="command the case processes run under, e.g. compute-sanitizer")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # B,T,mode,value_block,L,last batches: one case, here
    arguments = parser.parse_args()
    if arguments.case:
        return child(arguments)
    modes, blocks = arguments.modes.split(","), arguments.value_blocks.split(",")
    for name, values, known in (("--modes", modes, MODES), ("--value-blocks", blocks, VALUE_BLOCKS)):
        if not set(values) <= set(known):
            parser.error(f"option {name}: expected a comma list of {', '.join(known)}, got {','.join(values)}")
    try:
        batches = [int(b) for b in arguments.batches.split(",")]
        tokens = [int(T) for T in arguments.tokens.split(",")]
        extra = [int(L) for L in arguments.extra_writes.split(",")]
        arguments.last_batches = [int(b) for b in arguments.last_batches.split(",")]
    except ValueError:
        parser.error("options --batches, --tokens, --extra-writes and --last-batches take comma lists of integers")
    if len(arguments.last_batches) != 2 or min(arguments.last_batches) < 1:
        parser.error(f"option --last-batches: expected two batch sizes >= 1, got {arguments.last_batches}")
    if min(batches) < 1 or min(tokens) < 1 or min(extra) < 0 or arguments.repeats < 1 or arguments.workers < 1:
        parser.error("options --batches, --tokens, --repeats and --workers must be >= 1, --extra-writes >= 0")
    if (arguments.num_stages or 1) < 1 or arguments.num_warps not in (None, 1, 2, 4, 8, 16):
        parser.error("option --num-stages must be >= 1 and --num-warps one of 1, 2, 4, 8, 16")
    cases = list(itertools.product(batches, tokens, modes, blocks, extra)) * arguments.repeats
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    options = launch_overrides(arguments) or "the kernels' own"
    print(f"torch {torch.__version__}, triton {triton.__version__}, {len(cases)} cases, launch options {options}"
          + (f"; through the MPS server at {mps}: a fault in one client is reported to every client, so run"
             " this alone to pin a case" if mps else ""), flush=True)
    start = time.monotonic()
    failed = 0
    with ThreadPoolExecutor(arguments.workers) as pool:
        for case, (verdict, report, seconds) in zip(cases, pool.map(lambda c: spawn(c, arguments), cases)):
            failed += verdict != "PASS"
            print(f"{verdict} {case_name(*case)} ({seconds:.0f} s): {report}", flush=True)
    print(f"{len(cases) - failed} passed, {failed} failed, {time.monotonic() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
