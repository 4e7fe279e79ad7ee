"""What the step benchmark checks on the device before it times anything: the fused loss against the
chunked one, the compiled encoders against eager, and the training step free of host synchronisation."""

from __future__ import annotations

import torch
from step_timing import bench_step, failure, random_windows, reset_memory, warm_up

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training.compile import gaps_to_eager, resolve_compile
from prism_rec.training.losses import full_softmax_loss_sum
from prism_rec.training.trainer import set_seed

# largest relative gap of the compiled encoder's output or gradients to eager (fp32, TF32 off) that passes:
# results/step_compile.md measured 2e-5 and below; an error in a compiled graph shows as order 1
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


def check_compiled(backbones: list[str], modes: list[str], device: torch.device) -> tuple[list[str], dict]:
    """The compiled encoder of each backbone in each of ``modes`` ("auto" resolved per backbone; eager
    skipped) against eager on this device (fp32, TF32 off, dropout 0, 6 left-padded windows of 50 items
    padded to 8 rows): report lines, a failure included, and per (backbone, mode) whether the check ran and
    stayed within ``COMPILED_GAP_LIMIT``."""
    lines, passed = [], {}
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for backbone in backbones:
            for mode in dict.fromkeys(resolve_compile(m, device, backbone=backbone) for m in modes):
                if mode == "off":
                    continue
                try:
                    set_seed(0)
                    model = SequentialRecommender(2000, backbone, d_model=64, max_len=50, dropout=0.0).to(device)
                    items = torch.randint(1, 2001, (6, 50), generator=torch.Generator().manual_seed(0))
                    items[torch.arange(50)[None, :] < 8 * torch.arange(6)[:, None]] = 0  # row r: 8 r padded
                    gaps = gaps_to_eager(model, mode, items.to(device))
                    within = all(gaps[part] <= COMPILED_GAP_LIMIT for part in ("output", "gradients"))  # NaN: False
                    text = (f"relative gap of the output {gaps['output']:.1e}, of the gradients "
                            f"{gaps['gradients']:.1e} (worst: {gaps['worst']})"
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
