"""The fused loss kernels (prism_rec/training/loss_kernels.py) under launch configs other than the default,
through Triton's interpreter in a subprocess (Triton reads TRITON_INTERPRET when the kernels are defined):
the logsumexp and both gradients against torch.logsumexp over hidden @ table.T in fp32, at shapes off the
block multiples, with an item count on them, a part holding only the partial last tile, and no rows."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from prism_rec.training.losses import (
    FUSED_CONFIGS,
    FUSED_KERNELS,
    MAX_FUSED_D,
    LaunchConfig,
    fused_logsumexp,
    tile_width,
)

CHECK = r"""
import json
import torch
from prism_rec.training.losses import (FUSED_CONFIGS, FUSED_KERNELS, MAX_FUSED_D, LaunchConfig, fused_logsumexp,
                                       tile_width)

def case(n, items, d, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g).requires_grad_(),
            (torch.randn(items, d, generator=g) * 0.5).requires_grad_(), torch.randn(n, generator=g))

def run(fn, h, t, w):
    h.grad = t.grad = None
    lse = fn(h, t)
    (lse * w).sum().backward()  # a weight per row: grad_lse is not all ones
    return lse.detach(), h.grad.clone(), t.grad.clone()

def gap(a, b):
    return [float((x - y).abs().max() / y.abs().max().clamp_min(1e-6)) for x, y in zip(a, b)]

small, wide, mixed = LaunchConfig(16, 32, 4, 2), LaunchConfig(32, 64, 8, 3), {
    "forward": LaunchConfig(16, 32, 4, 2), "backward_hidden": LaunchConfig(32, 16, 4, 3),
    "backward_table": LaunchConfig(16, 64, 8, 4)}
cases = {  # name: (n, items, d, configs, splits)
    "tails_odd_d": (37, 100, 24, dict.fromkeys(("forward", "backward_hidden", "backward_table"), small), None),
    "tails_split": (37, 100, 24, dict.fromkeys(("forward", "backward_hidden", "backward_table"), small), 2),
    "items_on_blocks": (50, 96, 32, dict.fromkeys(("forward", "backward_hidden", "backward_table"), small), None),
    "tail_only_part": (40, 70, 16, dict.fromkeys(("forward", "backward_hidden", "backward_table"), small), 3),
    "wide_blocks": (70, 130, 64, dict.fromkeys(("forward", "backward_hidden", "backward_table"), wide), 2),
    "mixed": (45, 81, 40, mixed, 2),
}
direct = lambda h, t: torch.logsumexp(h @ t.t(), dim=-1)
out = {}
for seed, (name, (n, items, d, configs, splits)) in enumerate(cases.items()):
    h, t, w = case(n, items, d, seed)
    got = run(lambda h, t: fused_logsumexp(h, t, splits=splits, configs=configs), h, t, w)
    out[name] = gap(got, run(direct, h, t, w))
h, t, w = case(0, 50, 16, 0)
empty = run(lambda h, t: fused_logsumexp(h, t, configs=mixed), h, t, w)
out["empty"] = [list(empty[0].shape), list(empty[1].shape), float(empty[2].abs().sum()), list(empty[2].shape)]
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_launch_configs_match_torch_logsumexp():
    environment = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=environment,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    empty = out.pop("empty")
    assert empty == [[0], [0, 16], 0.0, [50, 16]]
    assert len(out) == 6
    for name, (lse_gap, hidden_gap, table_gap) in out.items():
        assert lse_gap < 1e-6 and hidden_gap < 1e-5 and table_gap < 1e-5, (name, out[name])


def test_configs_must_name_fused_kernels():
    hidden, table = torch.zeros(4, 8), torch.zeros(10, 8)
    with pytest.raises(ValueError, match=r"configs names kernels \['backward'\], not among"):
        fused_logsumexp(hidden, table, configs={"backward": LaunchConfig(64, 128, 4, 3)})


def test_every_fused_width_has_configs():
    """Every d the fused path takes maps to a tile width at least d wide with a launch for each kernel."""
    for d in range(1, MAX_FUSED_D + 1):
        width = tile_width(d)
        assert width >= max(d, 16) and width < 2 * max(d, 16) and set(FUSED_CONFIGS[width]) == set(FUSED_KERNELS)
