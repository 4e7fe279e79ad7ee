"""Transformer++: RoPE against its definition (Su et al. 2021) and attention against a per-query loop."""

import math

import torch
from prism_rec.baselines.transformer_pp import (
    RotaryAttention,
    TransformerPP,
    apply_rotary,
    rotary_angles,
)

from prism_rec.models.nn import PreNormStack, SwiGLU, positions_from_first_item


def rotate_by_definition(vector, position, base=10000.0):
    """RoPE of one head vector [D] at integer position m: pair (2i, 2i+1) rotated by m * base^(-2i / D)."""
    D = vector.shape[0]
    out = torch.empty_like(vector)
    for i in range(D // 2):
        angle = position * base ** (-2 * i / D)
        a, b = vector[2 * i].item(), vector[2 * i + 1].item()
        out[2 * i] = a * math.cos(angle) - b * math.sin(angle)
        out[2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


def test_rope_is_the_rotation_of_pairs_by_position_times_theta():
    torch.manual_seed(0)
    x = torch.randn(1, 6, 2, 8)  # [B, T, H, D]
    positions = torch.tensor([[0, 1, 2, 5, 17, 130]])
    rotated = apply_rotary(x, rotary_angles(positions, 8))
    for t, m in enumerate(positions[0].tolist()):
        for h in range(2):
            torch.testing.assert_close(rotated[0, t, h], rotate_by_definition(x[0, t, h], m), rtol=1e-5, atol=1e-5)


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(1)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        q_m = apply_rotary(q, rotary_angles(torch.tensor([[m]]), 16))
        k_n = apply_rotary(k, rotary_angles(torch.tensor([[n]]), 16))
        return (q_m * k_n).sum()

    for m, n in [(3, 1), (7, 7), (10, 2)]:
        for shift in (1, 9, 40):
            torch.testing.assert_close(score(m, n), score(m + shift, n + shift), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(score(3, 1), score(4, 1))


def test_positions_count_from_the_first_real_item():
    mask = torch.tensor([[False, False, True, True, True], [True, True, True, True, True]])
    assert positions_from_first_item(mask)[:, 2:].tolist() == [[0, 1, 2], [2, 3, 4]]


def reference_attention(attention, x, mask):
    """Per query i: softmax over real keys j <= i of (R_i q_i) . (R_j k_j) / sqrt(D), positions from the first
    real item."""
    Bsz, T, d = x.shape
    H, D = attention.n_heads, attention.head_dim
    q, k, v = (x @ attention.qkv.weight.t()).reshape(Bsz, T, 3, H, D).unbind(2)
    out = torch.zeros(Bsz, T, H, D)
    for b in range(Bsz):
        first = int(mask[b].long().argmax())
        for i in range(first, T):
            keys = range(first, i + 1)
            for h in range(H):
                q_i = rotate_by_definition(q[b, i, h], i - first)
                scores = torch.stack([q_i @ rotate_by_definition(k[b, j, h], j - first) for j in keys]) / math.sqrt(D)
                out[b, i, h] = torch.softmax(scores, 0) @ v[b, first : i + 1, h]
    return out.reshape(Bsz, T, d) @ attention.out.weight.t()


def test_attention_matches_per_query_softmax_with_rotary_positions():
    torch.manual_seed(2)
    attention = RotaryAttention(d_model=8, n_heads=2)
    x = torch.randn(2, 7, 8)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, :3] = False
    with torch.no_grad():
        out, expected = attention(x, mask), reference_attention(attention, x, mask)
    torch.testing.assert_close(out[mask], expected[mask], rtol=1e-5, atol=1e-5)


def test_llama_block_layout():
    model = TransformerPP(d_model=64, n_layers=2)
    assert isinstance(model.stack, PreNormStack) and isinstance(model.stack.ffns[0], SwiGLU)
    assert not getattr(model, "wants_positions", False)
    assert all(module.bias is None for module in model.modules() if isinstance(module, torch.nn.Linear))
