"""Registers and spills of delta_scan's Triton kernels for Hopper (sm_90a), compiled here: no GPU needed.

    python benchmarks/kernel_resources.py [--head-dims 32,64] [--chunk-sizes 16,32] [--out FILE]
    python benchmarks/kernel_resources.py --backend chunk_split [--head-dims 32,64,128] [--dtypes bf16,fp32]
        [--out FILE]

Compiles the forward and backward kernels (bf16 inputs, beta given) for each head dimension, chunk size
and L = 0 / L > 0 with the block sizes and warp counts delta_scan would pick, and runs Triton's bundled
ptxas -v on the PTX; with --backend chunk_split, every kernel of kernels/chunk_split.py with the launch
sizes it picks at B = H = 8 (its chunk length, L = 0 and L = 3, bf16 or fp32 inputs), and the shared memory
Triton allocates for it (a launch needing more than the H200's 232448 bytes fails). Spills go to local
memory on every chunk step, so a configuration that spills kilobytes is a lead for the GPU benchmark
(benchmarks/kernels_bench.py --chunk-sizes), not a timing.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from prism_rec.kernels import chunk_split
from prism_rec.kernels.triton_chunk import _backward_kernel, _forward_kernel, _num_warps
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from prism_rec.files import write_atomically

HOPPER = GPUTarget("cuda", 90, 32)
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
BF16_POINTERS = {"q_ptr", "k_ptr", "v_ptr", "ek_ptr", "ev_ptr", "o_ptr", "do_ptr", "dfinal_ptr", "dq_ptr", "dk_ptr",
                 "dv_ptr", "dek_ptr", "dev_ptr"}
# chunk_split's tensors in the inputs' dtype (the rest are fp32)
CHUNK_SPLIT_BF16_POINTERS = {"q_ptr", "k_ptr", "v_ptr", "ek_ptr", "ev_ptr", "w_ptr", "states_ptr", "o_ptr", "do_ptr",
                             "d_states_ptr"}


def compile_hopper(kernel, constants: dict, num_warps: int, bf16_pointers=BF16_POINTERS, num_stages: int = 3,
                   low_precision: str = "*bf16"):
    """``kernel`` compiled for Hopper with ``constants`` as its constexpr arguments (those it takes); the
    pointers named in bf16_pointers point to low_precision elements, the rest to fp32."""
    signature = {}
    parameters = inspect.signature(kernel.fn).parameters
    constants = {name: value for name, value in constants.items() if name in parameters}
    for name in parameters:
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = low_precision if name in bf16_pointers else "*fp32"
        else:
            signature[name] = "fp32" if name == "scale" else "i32"
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    return triton.compile(source, target=HOPPER, options=options)


def compile_ptx(kernel, constants: dict, num_warps: int) -> str:
    """PTX of ``kernel`` for Hopper (bf16 inputs)."""
    return compile_hopper(kernel, constants, num_warps).asm["ptx"]


def chunk_split_rows(head_dim: int, L: int, dtype: str, B: int = 8, H: int = 8) -> list[str]:
    """Table rows (kernel, warps, stages, registers / stack / spill bytes, shared bytes) of chunk_split's
    kernels at key = value width head_dim with L extra writes and dtype ("bf16" or "fp32") inputs, compiled
    with the launch sizes it picks for B x H programs."""
    BT, BK, KB, VB, VS = chunk_split._config(B, H, head_dim, head_dim, chunk_split.CHUNK, None, None, None)
    extra = dict(HAS_EXTRA=L > 0)
    fp32 = dtype == "fp32"
    shared = dict(H=H, K=head_dim, V=head_dim, L=L, DT=tl.float32 if fp32 else tl.bfloat16,
                  PRECISION="ieee" if fp32 else "tf32", BT=BT, HAS_BETA=True)
    parallel = dict(BK=KB, BV=VB)
    sequential = dict(BK=BK, BV=VS)
    kernels = [("_wy_forward_kernel", {**extra, **parallel}), ("_state_forward_kernel", {**extra, **sequential,
                                                                                        "HAS_INITIAL": False}),
               ("_output_kernel", {**extra, **parallel}), ("_local_value_grad_kernel", parallel),
               ("_state_backward_kernel", {**sequential, "HAS_DFINAL": False}),
               ("_key_grads_kernel", {**extra, **parallel}), ("_wy_backward_kernel", {**extra, **parallel})]
    if L:
        kernels.append(("_extra_value_grads_kernel", parallel))
    rows = []
    for name, constants in kernels:
        is_sequential = name in ("_state_forward_kernel", "_state_backward_kernel")
        warps = chunk_split.SEQUENTIAL_WARPS if is_sequential else chunk_split.PARALLEL_WARPS
        stages = chunk_split.SEQUENTIAL_STAGES if is_sequential else chunk_split.PARALLEL_STAGES[4 if fp32 else 2]
        compiled = compile_hopper(getattr(chunk_split, name), {**shared, **constants}, warps,
                                  CHUNK_SPLIT_BF16_POINTERS, stages, "*fp32" if fp32 else "*bf16")
        usage = resource_usage(compiled.asm["ptx"])
        cell = " / ".join(str(usage[k]) for k in ("registers", "stack", "spill_stores"))
        rows.append(f"| {head_dim} | {L} | {dtype} | `{name}` | {constants['BK']} x {constants['BV']} | {warps} | "
                    f"{stages} | {cell} | {compiled.metadata.shared} |")
        print(rows[-1], flush=True)
    return rows


def resource_usage(ptx: str) -> dict[str, int]:
    """ptxas -v's registers, stack frame and spill stores (bytes) of the PTX's kernel."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as handle:
        handle.write(ptx)
    try:
        report = subprocess.run([str(PTXAS), "-v", "--gpu-name", "sm_90a", handle.name, "-o", os.devnull],
                                capture_output=True, text=True, check=True).stderr
    finally:
        os.remove(handle.name)

    def number(pattern: str) -> int:
        found = re.search(pattern, report)
        return int(found.group(1)) if found else 0

    return {"registers": number(r"Used (\d+) registers"), "stack": number(r"(\d+) bytes stack frame"),
            "spill_stores": number(r"(\d+) bytes spill stores")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head-dims", default="32,64")
    parser.add_argument("--chunk-sizes", default="16,32")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--backend", choices=("triton", "chunk_split"), default="triton")
    parser.add_argument("--dtypes", default="bf16", help="chunk_split: comma list of input dtypes, bf16 and fp32")
    args = parser.parse_args()
    if args.backend == "chunk_split":
        lines = ["| head dim | L | inputs | kernel | block (key x value) | warps | stages | regs / stack / spill B "
                 "| shared B |",
                 "|---:|---:|---|---|---|---:|---:|---|---:|"]
        for dtype in args.dtypes.split(","):
            for head_dim in map(int, args.head_dims.split(",")):
                for L in (0, 3):
                    lines += chunk_split_rows(head_dim, L, dtype)
        text = (f"Triton {triton.__version__}, ptxas of its wheel, sm_90a, inputs with beta, chunks of "
                f"{chunk_split.CHUNK}; command `python benchmarks/kernel_resources.py --backend chunk_split "
                f"--head-dims {args.head_dims} --dtypes {args.dtypes}`\n\n" + "\n".join(lines) + "\n")
        if args.out:
            write_atomically(args.out, text)
        return
    lines = ["| head dim | chunk | extra writes | warps | forward regs / stack / spill B | backward regs "
             "/ stack / spill B |",
             "|---:|---:|---|---:|---|---|"]
    for head_dim in map(int, args.head_dims.split(",")):
        warps = _num_warps(head_dim, head_dim)
        for chunk in map(int, args.chunk_sizes.split(",")):
            for extra in (False, True):
                shared = dict(HAS_BETA=True, HAS_EXTRA=extra, PRECISION="tf32", BT=chunk, BK=head_dim, BV=head_dim)
                forward = resource_usage(compile_ptx(_forward_kernel, {**shared, "HAS_INITIAL": False,
                                                                       "STORE_CHUNK_STATES": True}, warps))
                backward = resource_usage(compile_ptx(_backward_kernel, {**shared, "HAS_DFINAL": False}, warps))
                cells = [" / ".join(str(usage[k]) for k in ("registers", "stack", "spill_stores"))
                         for usage in (forward, backward)]
                lines.append(f"| {head_dim} | {chunk} | {'L > 0' if extra else 'L = 0'} | {warps} | "
                             f"{cells[0]} | {cells[1]} |")
                print(lines[-1], flush=True)
    text = (f"Triton {triton.__version__}, ptxas of its wheel, sm_90a, bf16 inputs with beta; command "
            f"`python benchmarks/kernel_resources.py --head-dims {args.head_dims} --chunk-sizes {args.chunk_sizes}`\n\n"
            + "\n".join(lines) + "\n")
    if args.out:
        write_atomically(args.out, text)


if __name__ == "__main__":
    main()
