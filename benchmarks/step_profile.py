"""Where a training step's time goes: torch.profiler over real batches of a dataset, per backbone.

    python benchmarks/step_profile.py --dataset books-dealrec --models prism,sasrec [--steps 20] [--compile MODE]
                                      [--out FILE]

For each backbone it trains ``--warmup`` steps, then profiles ``--steps`` steps of the headline settings
(d_model 64, 2 layers, batch 256, the dataset's window) and reports the wall time per step, the device
time per step (CUDA kernels; on CPU the operators' self time), the number of kernel launches per step and
the operators that take the most device time. Wall time far above device time means the step is bound by
launches and Python, not by the GPU. The step is the one ``fit`` trains with (prism_rec/training/step.py), in the
mode of ``--compile`` (prism_rec/training/compile.py: off, inductor, cudagraphs, graphs, auto = the backbone's
verified mode; the table names the mode each backbone ran in). The markdown table goes to stdout and, with
``--out``, to a file.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch
from step_timing import profile_steps

from prism_rec.data.batching import training_windows
from prism_rec.data.sources import load_dataset
from prism_rec.experiments.headline.protocol import training_config
from prism_rec.files import write_atomically
from prism_rec.markdown import pipe_table
from prism_rec.models.nn import ShortConv
from prism_rec.tracking.store import machine_description
from prism_rec.training.devices import resolve_device
from prism_rec.training.step import TrainingStep
from prism_rec.training.trainer import build_model, set_seed

TOP_OPERATORS = 6


def profile_backbone(dataset, backbone: str, device: torch.device, warmup: int, steps: int,
                     compile_mode: str = "off", short_conv: str = "auto") -> dict:
    """The profile of ``backbone``'s training step (prism_rec/training/step.py) over real batches of ``dataset``
    in the order of a seed-0 epoch, at the headline settings, every ShortConv on backend ``short_conv``."""
    config = training_config(dataset.name, backbone, 0, str(device), {}, lr=1e-3)  # a step costs the same at any rate
    config.compile = compile_mode
    set_seed(0)
    model = build_model(dataset, backbone, config)
    for module in model.modules():
        if isinstance(module, ShortConv):
            module.conv_backend = short_conv
    step = TrainingStep(model.to(device), config, device, backbone)
    windows = torch.from_numpy(training_windows(dataset, config.max_len))  # [W, T + 1]
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(0))
    batches = [windows[index] for index in order.split(config.batch_size)]
    found = profile_steps(step, batches, warmup, steps, TOP_OPERATORS)
    return {"backbone": backbone, "compile": step.compile, "short_conv": short_conv, "wall_ms": found["wall_ms"],
            "device_ms": found["device_ms"], "launches": found["launches"],
            "top": ", ".join(f"{name} {ms:.2f}" for name, ms in found["top"]),
            "tokens": int((batches[0][:, :-1] > 0).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--models", default="sasrec,gated_deltanet,prism")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", default="off", help="step mode (prism_rec/training/compile.py)")
    parser.add_argument("--short-conv", default="auto",
                        help="ShortConv backends (prism_rec/models/nn.py), comma-separated; each backbone runs each")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    short_convs = args.short_conv.split(",")
    unknown = [name for name in short_convs if name not in ShortConv.BACKENDS]
    if unknown:
        parser.error(f"--short-conv: unknown backend(s) {unknown}; choose from {ShortConv.BACKENDS}")
    device = resolve_device(args.device)
    dataset = load_dataset(args.dataset)
    unit = "CUDA kernel" if device.type == "cuda" else "operator self CPU"
    rows = [profile_backbone(dataset, name, device, args.warmup, args.steps, args.compile, short_conv)
            for name in args.models.split(",") for short_conv in short_convs]
    lines = [
        f"# Training-step profile: {args.dataset} on {machine_description(device)}",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; command "
        f"`python benchmarks/step_profile.py --dataset {args.dataset} --models {args.models} --device {args.device} "
        f"--warmup {args.warmup} --steps {args.steps} --compile {args.compile} --short-conv {args.short_conv}`. "
        "Headline settings (d_model 64, 2 layers, batch 256, bf16 "
        f"autocast on CUDA); one step = forward, backward, AdamW. Device time = {unit} time per step.",
        "",
        pipe_table(["backbone", "compile", "short conv", "wall ms/step", "device ms/step",
                    f"{'kernel launches' if device.type == 'cuda' else 'operator calls'}/step",
                    "tokens in the first batch", "top operators (device ms/step)"],
                   [[r["backbone"], r["compile"], r["short_conv"], f"{r['wall_ms']:.1f}", f"{r['device_ms']:.1f}",
                     f"{r['launches']:.0f}", f"{r['tokens']:,}", str(r["top"])] for r in rows], align="lllrrrrl"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_atomically(args.out, text)


if __name__ == "__main__":
    main()
