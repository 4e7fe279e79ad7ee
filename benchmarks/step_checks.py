"""What the step benchmark checks on the device before it times anything: the fused loss against the
chunked one, the compiled encoders against eager, and the training step free of host synchronisation."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from step_timing import bench_step, failure, random_windows, reset_memory, warm_up

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training.compile import WHOLE_STEP_MODES, gaps_to_eager, resolve_compile
from prism_rec.training.config import TrainConfig
from prism_rec.training.losses import full_softmax_loss_sum
from prism_rec.training.step import TrainingStep, step_gaps
from prism_rec.training.trainer import build_model, set_seed

# largest relative gap of the compiled encoder's output or gradients (a captured whole step: its loss,
# gradients and parameters) to eager (fp32, TF32 off) that passes: results/step_compile.md measured 2e-5 and
# below; an error in a compiled graph shows as order 1
COMPILED_GAP_LIMIT = 1e-3


def check_fused(device: torch.device) -> list[str]:
    """Fused against chunked loss and gradients on this device (fp32 inputs under bf16 autocast, and fp32
    inputs without autocast, TF32 off); raises AssertionError when they differ. Returns report lines."""
    lines = []
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for n, items, d, autocast in ((4096, 20000, 64, True), (1000, 3001, 48, True), (1000, 3001, 48, False)):
            generator = torch.Generator(device=device).manual_seed(0)
            hidden = torch.randn(n, d, device=device, generator=generator)
            table = torch.randn(items, d, device=device, generator=generator) * 0.3
            targets = torch.randint(0, items, (n,), device=device, generator=generator)
            results = {}
            for path in ("fused", "chunked"):
                h, t = hidden.clone().requires_grad_(), table.clone().requires_grad_()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    loss = full_softmax_loss_sum(h, t, targets, path=path)
                loss.backward()
                results[path] = (loss.detach().float(), h.grad, t.grad)
            gaps = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
                    for a, b in zip(results["fused"], results["chunked"])]
            limit = (1e-3, 0.03) if autocast else (1e-5, 1e-4)
            label = f"N {n}, I {items}, d {d}, {'bf16 autocast' if autocast else 'fp32'}"
            lines.append(f"- {label}: relative gap of loss {gaps[0]:.1e}, d(hidden) {gaps[1]:.1e}, "
                         f"d(table) {gaps[2]:.1e}")
            assert gaps[0] < limit[0] and max(gaps[1:]) < limit[1], \
                f"fused loss differs from chunked at {label}: {gaps}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return lines


def left_padded(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``rows`` windows of ``length`` items over 2000 items, row r with its first 8 r positions padding."""
    items = torch.randint(1, 2001, (rows, length), generator=generator)
    items[torch.arange(length)[None, :] < 8 * torch.arange(rows)[:, None]] = 0
    return items


def encoder_gaps(backbone: str, mode: str, device: torch.device) -> dict:
    """The compiled encoder against eager: 6 left-padded windows of 50 items, compiled for 8 rows."""
    set_seed(0)
    model = SequentialRecommender(2000, backbone, d_model=64, max_len=50, dropout=0.0).to(device)
    return gaps_to_eager(model, mode, left_padded(6, 50, torch.Generator().manual_seed(0)).to(device))


def whole_step_gaps(backbone: str, mode: str, device: torch.device) -> dict:
    """The whole step captured under ``mode`` against the eager step (step.py's ``step_gaps``): batches of 8
    left-padded windows of 50 items, 6 steps (warm-up, capture, replays), the last batch of 5 windows."""
    steps = []
    for step_mode in ("off", mode):
        config = TrainConfig(d_model=64, max_len=50, batch_size=8, dropout=0.0, precision="fp32", device=str(device),
                             progress=False, compile=step_mode)
        set_seed(0)
        model = build_model(SimpleNamespace(n_items=2000), backbone, config).to(device)
        steps.append(TrainingStep(model, config, device, backbone))
    generator = torch.Generator().manual_seed(0)
    batches = [left_padded(rows, 51, generator) for rows in (8, 8, 8, 8, 8, 5)]
    return step_gaps(*steps, batches)


def check_compiled(backbones: list[str], modes: list[str], device: torch.device) -> tuple[list[str], dict]:
    """The compiled encoder (a whole-step mode: the whole step) of each backbone in each of ``modes`` ("auto"
    resolved per backbone; eager skipped) against eager on this device (fp32, TF32 off, dropout 0;
    ``encoder_gaps``, ``whole_step_gaps``): report lines, a failure included, and per (backbone, mode)
    whether the check ran and stayed within ``COMPILED_GAP_LIMIT``."""
    lines, passed = [], {}
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for backbone in backbones:
            for mode in dict.fromkeys(resolve_compile(m, device, backbone=backbone) for m in modes):
                if mode == "off":
                    continue
                try:
                    whole = mode in WHOLE_STEP_MODES
                    gaps = (whole_step_gaps if whole else encoder_gaps)(backbone, mode, device)
                    parts = ("loss", "gradients", "parameters") if whole else ("output", "gradients")
                    within = all(gaps[part] <= COMPILED_GAP_LIMIT for part in parts)  # NaN: False
                    text = ("relative gap of the " + ", of the ".join(f"{part} {gaps[part]:.1e}" for part in parts)
                            + f" (worst: {gaps['worst']}"
                            + (f"; parameter: {gaps['worst_parameter']})" if whole else ")")
                            + ("" if within else f": over {COMPILED_GAP_LIMIT:g}, FAILED"))
                except Exception as error:
                    text, within = failure(error), False
                passed[(backbone, mode)] = within
                lines.append(f"- {backbone}, compile {mode}: {text}")
                print(lines[-1], flush=True)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
        reset_memory(device)
    return lines, passed


def check_host_syncs(backbones: list[str], args, device: torch.device) -> list[str]:
    """Per backbone, one eager training step (after two warm-up steps) under
    ``torch.cuda.set_sync_debug_mode("error")``: whether anything in it waits for the GPU. CUDA only."""
    lines = []
    for backbone in backbones:
        try:
            step = bench_step(2000, backbone, 8, 50, args, device, "auto", "off")
            batches = random_windows(2000, 8, 50, 3)
            warm_up(step, batches[:2])
            torch.cuda.set_sync_debug_mode("error")
            try:
                step.on_batch(batches[2])
            finally:
                torch.cuda.set_sync_debug_mode("default")
            text = "no host synchronisation in the step"
        except Exception as error:
            text = f"synchronises: {failure(error)}"
        finally:
            reset_memory(device)
        lines.append(f"- {backbone}: {text}")
        print(lines[-1], flush=True)
    return lines
