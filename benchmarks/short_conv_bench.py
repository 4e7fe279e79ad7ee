"""The short convolution's two backends (prism_rec/models/nn.py ShortConv: torch = depthwise nn.Conv1d then SiLU,
triton = kernels/short_conv.py) at the backbones' shapes: forward+backward time and their agreement.

    python benchmarks/short_conv_bench.py --out results/short_conv.md [--shapes 256x200x256,...] [--smoke]

Each cell runs the module as the backbones call it under bf16 autocast on CUDA (x bf16, the parameters fp32):
y = ShortConv(x), then y.backward(dy); times are triton.testing.do_bench medians in ms. The agreement is the
largest relative gap of y, dx and dweight between the backends (each tensor's max |difference| / max |value|).
--smoke runs one tiny cell on the CPU under TRITON_INTERPRET=1 (one call each, not a measurement).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from bench_options import parse_dims

# (B, T, C): mamba2's x-B-C conv (d_inner 128 + 2 x 64 state) and the delta-rule layers' q, k (64) and v (128)
# convs at d_model 64, on the step benchmark's shapes
SHAPES = [(256, 50, 256), (256, 200, 256), (256, 200, 64), (256, 200, 128), (12, 4096, 256), (3, 16384, 256)]


def measure(shape, bias: bool, device: str, smoke: bool) -> dict:
    import torch
    import triton

    from prism_rec.models.nn import ShortConv

    B, T, C = shape
    torch.manual_seed(0)
    conv = ShortConv(C, 4, activation=True, bias=bias).to(device)
    torch.nn.init.normal_(conv.conv.weight, std=0.5)
    x = torch.randn(B, T, C, device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    dy = torch.randn_like(x)
    results, outputs = {}, {}
    for backend in ("torch", "triton"):
        conv.conv_backend = backend
        inp = x.clone().requires_grad_()

        def step(inp=inp):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                y = conv(inp)
            y.backward(dy)
            return y

        if smoke:
            started = time.perf_counter()
            step()
            results[backend] = (time.perf_counter() - started) * 1000
        else:
            results[backend] = triton.testing.do_bench(step, warmup=10, rep=50, grad_to_none=[inp, conv.conv.weight],
                                                       return_mode="median")
        inp.grad, conv.conv.weight.grad = None, None
        y = step()
        outputs[backend] = [y.detach().float(), inp.grad.float(), conv.conv.weight.grad.float()]
        conv.conv.weight.grad = None
    gap = max(float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))
              for a, b in zip(outputs["triton"], outputs["torch"]))
    return {"torch": results["torch"], "triton": results["triton"], "gap": gap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=lambda text: parse_dims(text, "BxTxC"), default=SHAPES)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.shapes = [(2, 70, 80)]
    import torch

    from prism_rec.files import write_atomically
    from prism_rec.markdown import pipe_table
    from prism_rec.tracking.store import machine_description

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("short_conv_bench: no CUDA device (use --smoke on a CPU)")
    rows = []
    for shape in args.shapes:
        for bias in (True, False):
            found = measure(shape, bias, device, args.smoke)
            rows.append(["x".join(map(str, shape)), "yes" if bias else "no", f"{found['torch']:.3f}",
                         f"{found['triton']:.3f}", f"{found['torch'] / found['triton']:.2f}x", f"{found['gap']:.1e}"])
            print(rows[-1], flush=True)
    import triton

    command = " ".join(["python", "benchmarks/short_conv_bench.py", *sys.argv[1:]])
    text = "\n".join([
        f"# Short convolution, forward+backward: {machine_description(torch.device(device))}", "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; triton "
        f"{triton.__version__}; command `{command}`. Causal depthwise kernel 4 then SiLU, as ShortConv runs it under "
        "bf16 autocast (x bf16, parameters fp32); ms = triton.testing.do_bench median of forward+backward"
        + (" (smoke run on the CPU under TRITON_INTERPRET=1: one call, not a measurement)" if args.smoke else "")
        + "; gap = the largest relative difference of y, dx, dweight between the backends.", "",
        pipe_table(["B x T x C", "bias", "torch ms (nn.Conv1d + SiLU)", "triton ms (kernels/short_conv.py)",
                    "torch / triton", "gap"], rows, align="llrrrr"), ""])
    write_atomically(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
