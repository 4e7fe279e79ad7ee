"""What the backbones that train an inner model while they read (TTT, Titans) share: mini-batches aligned to
each sequence's first real item, and the derivative of tanh-GELU for their closed-form gradients."""

from __future__ import annotations

import math

import torch


def align_to_chunks(x: torch.Tensor, mask: torch.Tensor, chunk_size: int):
    """Shift each left-padded row left so its first real item starts a chunk.

    x [B, T, D], mask [B, T] -> x [B, T', D], mask [B, T'], shift [B] with T' = T rounded up to a
    multiple of ``chunk_size``; original position t is aligned position t - shift. Positions moved in at
    the right end are padding (after the last real item, so causal layers never read them).
    """
    B, T, D = x.shape
    shift = (T - mask.sum(1)) % chunk_size  # [B]
    aligned_length = math.ceil(T / chunk_size) * chunk_size
    source = torch.arange(aligned_length, device=x.device)[None, :] + shift[:, None]  # [B, T']
    inside = source < T
    source = source.clamp(max=T - 1)
    aligned_x = x.gather(1, source[..., None].expand(B, aligned_length, D)) * inside[..., None]
    return aligned_x, mask.gather(1, source) & inside, shift


def restore_alignment(y: torch.Tensor, shift: torch.Tensor, length: int) -> torch.Tensor:
    """Undo ``align_to_chunks``: y [B, T', D] -> [B, length, D], zeros where nothing maps back."""
    B, _, D = y.shape
    source = torch.arange(length, device=y.device)[None, :] - shift[:, None]  # [B, T]
    inside = source >= 0
    return y.gather(1, source.clamp(min=0)[..., None].expand(B, length, D)) * inside[..., None]


def gelu_tanh_grad(x: torch.Tensor) -> torch.Tensor:
    """Derivative of GELU with the tanh approximation."""
    c = math.sqrt(2.0 / math.pi)
    inner = torch.tanh(c * (x + 0.044715 * x.pow(3)))
    return 0.5 * (1.0 + inner) + 0.5 * x * (1.0 - inner.pow(2)) * c * (1.0 + 3 * 0.044715 * x.pow(2))
