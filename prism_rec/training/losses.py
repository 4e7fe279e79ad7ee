"""Full-softmax next-item loss over the whole item table, without materialising the logits on CUDA.

``full_softmax_loss_sum(hidden [N, d], table [I, d], targets [N])`` = sum over rows of
logsumexp(hidden @ table.T) - hidden . table[target], with ``targets`` 0-based item columns.

Two paths, chosen by device (``path="auto"``) or explicitly:

- ``"chunked"`` (CPU, and the reference): the logits of 4096 rows at a time, each chunk's logsumexp under
  activation checkpointing, so the backward recomputes one chunk's [4096, I] logits at a time. This is
  the loss ``prism_rec.training.trainer`` used before the fused path.
- ``"fused"`` (CUDA with Triton; CPU tensors only under ``TRITON_INTERPRET=1``): our own Triton kernels.
  The forward walks the item table in tiles with an online logsumexp (one fp32 value per row is kept);
  the backward recomputes the tiles twice, once per row block for d(hidden) and once per item block for
  d(table), so neither gradient needs atomics: the result is deterministic. All sums are fp32 (the tile
  products accumulate in fp32, the gradients accumulate in fp32 registers and are written once, in the
  input's dtype). Under CUDA autocast the products take the autocast dtype (bf16), as ``hidden @ table.T``
  does in the chunked path; otherwise they take the inputs' dtype (fp32 products are full fp32 unless
  ``torch.backends.cuda.matmul.allow_tf32`` is set). When a row block or item block alone would leave
  the GPU idle, the walk is split in parts whose partial results are combined in PyTorch (also
  deterministic). Any d up to 256 works (tiles are padded to a power of two); any N and I. Each kernel's
  tile sizes, warps and pipeline stages are ``FUSED_CONFIGS``' for the tile width; benchmarks/loss_bench.py
  times the candidates. The choice is a fixed table, not Triton's autotuner: tuning at run time would wait
  for the GPU at every new number of rows (the step's changes per batch) and could pick another tile
  order, so other rounding, from one process to the next.

``valid_rows`` (a device scalar) limits the loss to the first rows without a shape that depends on it:
the rows from ``valid_rows`` on add exactly 0 to the loss and to both gradients. The fused kernels read
it from the device and skip the row tiles past it, so their work follows the rows that count while the
launch stays fixed (the whole-step CUDA graph of prism_rec/training/step.py orders its trained rows
first and passes their count); the chunked path computes every row and zeroes the others.

Neither path reads a value back from the GPU (no ``.item()``, ``nonzero`` or boolean-mask indexing; sizes
come from shapes), so a training step that calls it need not wait for the device (prism_rec/training/step.py).

Both libraries we considered install with our pins (pure-Python wheels) but do not fit: Liger-Kernel
0.8.5's fused linear cross-entropy still materialises the logits chunk by chunk, with chunks sized for
wide hidden states (at d = 64 it takes 16-64 rows per chunk, a Python loop of hundreds to thousands of
launches) and a host sync (.item()) per call; cut-cross-entropy 25.1.1 is fused, but its backward needs
bf16/fp16 hidden states (no fp32 runs), adds both gradients up in the hidden dtype (bf16) through
lock-guarded read-modify-writes (rounding at every tile, order not deterministic), and drops small
gradient tiles unless ``filter_eps=None``.
"""

from __future__ import annotations

import importlib.util
import os
from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

PATHS = ("auto", "fused", "chunked")
LOGIT_CHUNK_ROWS = 4096
MAX_FUSED_D = 256


class LaunchConfig(NamedTuple):
    """How one fused kernel is launched: a tile of ``block_rows`` x ``block_items`` (d is one tile), with
    ``warps`` warps and ``stages`` software-pipeline stages (both ignored by Triton's interpreter), its walk
    split in parts until about ``programs_per_sm`` programs per streaming multiprocessor are launched."""
    block_rows: int
    block_items: int
    warps: int
    stages: int
    programs_per_sm: int = 2

    @property
    def name(self) -> str:
        return f"n{self.block_rows}_i{self.block_items}_w{self.warps}_s{self.stages}_p{self.programs_per_sm}"


# the launch of every fused kernel before benchmarks/loss_bench.py (Triton's default of 3 stages)
FIXED_CONFIG = LaunchConfig(block_rows=64, block_items=128, warps=4, stages=3, programs_per_sm=2)
FUSED_KERNELS = ("forward", "backward_hidden", "backward_table")
TILE_WIDTHS = (16, 32, 64, 128, 256)
# per tile width (``tile_width(d)``), the launch each fused kernel takes unless fused_logsumexp is given others
FUSED_CONFIGS = {width: dict.fromkeys(FUSED_KERNELS, FIXED_CONFIG) for width in TILE_WIDTHS}
# the fastest candidates per kernel on the H200 at d 64 and d 256 (results/loss.md, its suggested entries)
FUSED_CONFIGS[64] = {"forward": LaunchConfig(64, 128, 4, 3, 4), "backward_hidden": LaunchConfig(64, 64, 4, 4, 4),
                     "backward_table": LaunchConfig(128, 64, 4, 3, 4)}
FUSED_CONFIGS[256] = {"forward": LaunchConfig(128, 64, 8, 3, 4), "backward_hidden": LaunchConfig(128, 64, 8, 3, 4),
                      "backward_table": LaunchConfig(64, 128, 8, 3, 4)}
_LOG2E = 1.4426950408889634


def tile_width(d: int) -> int:
    """The fused kernels' tile width for rows ``d`` wide: d rounded up to a power of two, at least 16."""
    return max(16, 1 << (d - 1).bit_length())


def fused_available(device: torch.device) -> bool:
    """Whether the fused path can run on ``device``: CUDA with Triton installed, or Triton's interpreter."""
    if importlib.util.find_spec("triton") is None:
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def resolve_path(path: str, device: torch.device, width: int | None = None) -> str:
    """``path`` ("auto", "fused" or "chunked") made concrete for tensors on ``device`` whose rows are
    ``width`` wide (when known): "auto" takes the fused path on CUDA up to ``MAX_FUSED_D``, else chunked."""
    if path not in PATHS:
        raise ValueError(f"loss path must be one of {PATHS}, got {path!r}")
    fits = width is None or width <= MAX_FUSED_D
    if path == "auto":
        return "fused" if device.type == "cuda" and fused_available(device) and fits else "chunked"
    if path == "fused" and not fused_available(device):
        raise ValueError("the fused loss path needs Triton and CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors)")
    if path == "fused" and not fits:
        raise ValueError(f"the fused loss path takes d <= {MAX_FUSED_D}, got {width}; use the chunked or auto path")
    return path


def full_softmax_loss_sum(hidden: torch.Tensor, table: torch.Tensor, targets: torch.Tensor,
                          path: str = "auto", valid_rows: torch.Tensor | None = None) -> torch.Tensor:
    """Sum over rows of the full-softmax cross-entropy of ``hidden [N, d]`` against ``table [I, d]``.

    ``targets [N]`` are 0-based rows of ``table``. Returns an fp32 scalar; differentiable in ``hidden``
    and ``table``. ``path``: "auto" (fused on CUDA up to d = ``MAX_FUSED_D``, chunked otherwise), "fused" or
    "chunked". ``valid_rows`` (a one-element integer tensor on hidden's device): only the rows before it
    count, the others add exactly 0 to the loss and the gradients (a step of static shape puts the
    positions it trains first).
    """
    if hidden.dim() != 2 or table.dim() != 2 or hidden.shape[1] != table.shape[1]:
        raise ValueError(f"hidden [N, d] and table [I, d] must share d, got {tuple(hidden.shape)} and "
                         f"{tuple(table.shape)}")
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must have shape [N] = {tuple(hidden.shape[:1])}, got {tuple(targets.shape)}")
    check_valid_rows(valid_rows, hidden)
    positive = (hidden * table[targets]).sum(-1).float()  # [N]
    if resolve_path(path, hidden.device, hidden.shape[1]) == "fused":
        lse = fused_logsumexp(hidden, table, valid_rows=valid_rows)
    else:
        lse = chunked_logsumexp(hidden, table)
    losses = lse - positive  # [N]
    if valid_rows is not None:
        losses = torch.where(counted_rows(valid_rows, hidden.shape[0]), losses, 0.0)
    return losses.sum()


def check_valid_rows(valid_rows: torch.Tensor | None, hidden: torch.Tensor) -> None:
    """A clear error unless ``valid_rows`` is None or one integer on ``hidden``'s device (its value is not
    read: that would wait for the device)."""
    if valid_rows is None:
        return
    if valid_rows.numel() != 1 or valid_rows.dtype.is_floating_point or valid_rows.dtype.is_complex \
            or valid_rows.dtype == torch.bool:
        raise ValueError(f"valid_rows must be one integer, got a {valid_rows.dtype} tensor of shape "
                         f"{tuple(valid_rows.shape)}")
    if valid_rows.device != hidden.device:
        raise ValueError(f"valid_rows is on {valid_rows.device} but hidden is on {hidden.device}")


def counted_rows(valid_rows: torch.Tensor, n: int) -> torch.Tensor:
    """Whether each of ``n`` rows comes before ``valid_rows``: [n] bool, on its device."""
    return torch.arange(n, device=valid_rows.device) < valid_rows.reshape(())


def _logsumexp_rows(hidden: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp((hidden @ table.t()).float(), dim=-1)


def chunked_logsumexp(hidden: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """logsumexp(hidden @ table.T) per row [N] (fp32), ``LOGIT_CHUNK_ROWS`` rows of logits at a time,
    each chunk checkpointed while gradients are recorded."""
    parts = [
        checkpoint(_logsumexp_rows, chunk, table, use_reentrant=False) if torch.is_grad_enabled() else
        _logsumexp_rows(chunk, table)
        for chunk in hidden.split(LOGIT_CHUNK_ROWS)
    ]
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)


def product_dtype(hidden: torch.Tensor, table: torch.Tensor) -> torch.dtype:
    """The dtype of the tile products: the autocast dtype when autocast is on for the device (what
    ``hidden @ table.T`` would use), else the promoted input dtype."""
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(hidden.dtype, table.dtype)


def fused_logsumexp(hidden: torch.Tensor, table: torch.Tensor, splits: int | None = None,
                    configs: dict[str, LaunchConfig] | None = None,
                    valid_rows: torch.Tensor | None = None) -> torch.Tensor:
    """logsumexp(hidden @ table.T) per row [N] (fp32) through the Triton kernels; ``splits`` fixes the
    number of parts each walk is split into (default: enough programs to fill the GPU); ``configs`` maps
    some of ``FUSED_KERNELS`` to the launch they take instead of their ``FUSED_CONFIGS`` entry for d.
    ``valid_rows`` (one integer on the device): the rows from it on read 0, take no gradient and cost
    (almost) no work."""
    if hidden.shape[1] > MAX_FUSED_D:
        raise ValueError(f"the fused loss path takes d <= {MAX_FUSED_D}, got {hidden.shape[1]}")
    if hidden.device != table.device:
        raise ValueError(f"hidden is on {hidden.device} but table is on {table.device}")
    unknown = set(configs or ()) - set(FUSED_KERNELS)
    if unknown:
        raise ValueError(f"configs names kernels {sorted(unknown)}, not among {FUSED_KERNELS}")
    check_valid_rows(valid_rows, hidden)
    return _FusedLogSumExp.apply(hidden, table, product_dtype(hidden, table), splits,
                                 FUSED_CONFIGS[tile_width(hidden.shape[1])] | (configs or {}), valid_rows)


class _FusedLogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, table, compute_dtype, splits, configs, valid_rows):
        hidden_c, table_c = product_operands(hidden, table, compute_dtype)
        lse = launch_forward(hidden_c, table_c, compute_dtype, splits, configs["forward"], valid_rows)
        if valid_rows is not None:  # the rows past the limit hold -inf, NaN or log(I) (loss_kernels.py)
            lse = torch.where(counted_rows(valid_rows, lse.shape[0]), lse, 0.0)
        ctx.save_for_backward(hidden_c, table_c, lse)
        ctx.compute_dtype, ctx.splits, ctx.configs, ctx.valid_rows = compute_dtype, splits, configs, valid_rows
        ctx.hidden_dtype, ctx.table_dtype = hidden.dtype, table.dtype
        return lse

    @staticmethod
    def backward(ctx, grad_lse):
        hidden, table, lse = ctx.saved_tensors
        grad_lse = grad_lse.float().contiguous()
        d_hidden = d_table = None
        if ctx.needs_input_grad[0]:
            d_hidden = launch_backward(hidden, table, lse, grad_lse, ctx.compute_dtype, ctx.splits,
                                       ctx.configs["backward_hidden"], of_table=False, valid_rows=ctx.valid_rows)
            d_hidden = d_hidden.to(ctx.hidden_dtype)
        if ctx.needs_input_grad[1]:
            d_table = launch_backward(hidden, table, lse, grad_lse, ctx.compute_dtype, ctx.splits,
                                      ctx.configs["backward_table"], of_table=True, valid_rows=ctx.valid_rows)
            d_table = d_table.to(ctx.table_dtype)
        return d_hidden, d_table, None, None, None, None


def _split_count(blocks: int, tiles: int, device: torch.device, splits: int | None,
                 programs_per_sm: int) -> tuple[int, int]:
    """(number of parts, tiles per part) of a walk over ``tiles`` tiles done by ``blocks`` programs each."""
    if splits is None:
        if device.type != "cuda":
            splits = 1
        else:
            target = programs_per_sm * torch.cuda.get_device_properties(device).multi_processor_count
            splits = max(1, min(-(-target // max(blocks, 1)), tiles // 4))
    splits = max(1, min(splits, tiles))
    per_split = -(-tiles // splits)
    return -(-tiles // per_split), per_split


def _launch_settings(hidden: torch.Tensor, compute_dtype: torch.dtype, config: LaunchConfig,
                     valid_rows: torch.Tensor | None) -> dict:
    import triton.language as tl  # imported at the first fused call (see loss_kernels.py)

    dtypes = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
    if compute_dtype not in dtypes:
        raise ValueError(f"the fused loss path computes in fp32, bf16 or fp16, not {compute_dtype}")
    ieee = compute_dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32
    return {"DOT_DTYPE": dtypes[compute_dtype], "PRECISION": "ieee" if ieee else "tf32",
            "BLOCK_D": tile_width(hidden.shape[1]),
            "UPCAST": hidden.device.type != "cuda", "BLOCK_N": config.block_rows,
            "BLOCK_I": config.block_items, "num_warps": config.warps, "num_stages": config.stages,
            "LIMITED": valid_rows is not None}


def product_operands(hidden, table, compute_dtype):
    """The inputs, contiguous, rounded once to the product dtype where it is narrower (under autocast:
    fp32 -> bf16): the kernels then read half the bytes per tile, and Triton's interpreter, whose
    fp32 -> bf16 cast truncates, sees the values rounded to nearest as on CUDA."""
    return tuple((x.to(compute_dtype) if x.element_size() > compute_dtype.itemsize else x).contiguous()
                 for x in (hidden, table))


def _limit_operand(valid_rows: torch.Tensor | None, hidden: torch.Tensor) -> torch.Tensor:
    """What the kernels' limit_ptr points at: ``valid_rows``, or (unread when not LIMITED) ``hidden``."""
    return hidden if valid_rows is None else valid_rows


def launch_forward(hidden, table, compute_dtype, splits, config: LaunchConfig, valid_rows=None):
    """logsumexp per row [N] (fp32) of the operands (contiguous, in the product dtype) by the forward
    kernel launched as ``config`` (with ``valid_rows``, the rows from it on hold no logsumexp)."""
    n, d = hidden.shape
    items = table.shape[0]
    if n == 0:
        return hidden.new_zeros(0, dtype=torch.float32)
    row_blocks, item_tiles = -(-n // config.block_rows), -(-items // config.block_items)
    parts, per_part = _split_count(row_blocks, item_tiles, hidden.device, splits, config.programs_per_sm)
    maxima = torch.empty(parts, n, dtype=torch.float32, device=hidden.device)
    sums = torch.empty_like(maxima)
    from .loss_kernels import _lse_forward

    _lse_forward[(row_blocks, parts)](
        hidden, table, maxima, sums, _limit_operand(valid_rows, hidden), n, items, d, item_tiles,
        items // config.block_items, per_part, **_launch_settings(hidden, compute_dtype, config, valid_rows))
    if parts == 1:
        return (maxima[0] + torch.log2(sums[0])) / _LOG2E
    top = maxima.max(0).values
    return (top + torch.log2((sums * torch.exp2(maxima - top)).sum(0))) / _LOG2E


def launch_backward(hidden, table, lse, grad_lse, compute_dtype, splits, config: LaunchConfig, of_table: bool,
                    valid_rows=None):
    """d(hidden) [N, d] (one program per row block walking the item tiles) or, ``of_table``, d(table)
    [I, d] (one program per item block walking the row tiles); fp32; the kernel launched as ``config``;
    the rows from ``valid_rows`` on (when given) add nothing."""
    n, d = hidden.shape
    items = table.shape[0]
    rows_out = items if of_table else n
    if n == 0:
        return torch.zeros(rows_out, d, dtype=torch.float32, device=hidden.device)
    blocks = -(-rows_out // (config.block_items if of_table else config.block_rows))
    tiles = -(-n // config.block_rows) if of_table else -(-items // config.block_items)
    parts, per_part = _split_count(blocks, tiles, hidden.device, splits, config.programs_per_sm)
    partial = torch.empty(parts, rows_out, d, dtype=torch.float32, device=hidden.device)
    from .loss_kernels import _lse_backward_hidden, _lse_backward_table

    settings = _launch_settings(hidden, compute_dtype, config, valid_rows)
    limit = _limit_operand(valid_rows, hidden)
    if of_table:
        _lse_backward_table[(blocks, parts)](hidden, table, lse * _LOG2E, grad_lse, partial, limit, n, items, d,
                                             tiles, per_part, **settings)
    else:
        _lse_backward_hidden[(blocks, parts)](hidden, table, lse * _LOG2E, grad_lse, partial, limit, n, items, d,
                                              tiles, items // config.block_items, per_part, **settings)
    return partial[0] if parts == 1 else partial.sum(0)


__all__ = ["PATHS", "LOGIT_CHUNK_ROWS", "FIXED_CONFIG", "FUSED_CONFIGS", "FUSED_KERNELS", "TILE_WIDTHS",
           "LaunchConfig", "tile_width", "full_softmax_loss_sum", "chunked_logsumexp", "fused_logsumexp",
           "fused_available", "resolve_path"]
