"""Titans' neural memory against a naive per-chunk loop written from the paper's equations.

Inside each chunk the reference takes every token's gradient of ||M(k) - v||^2 at the chunk's starting
memory with torch.autograd.grad, then runs S_t = eta_t S_{t-1} - theta_t u_t and
M_t = (1 - alpha_t) M_{t-1} + S_t token by token and retrieves y_t = M_t(q_t).
"""

import torch
import torch.nn.functional as F
from prism_rec.baselines.titans import NeuralMemoryLayer, SlidingWindowAttention, Titans

from prism_rec.models.nn import l2norm


def memory(weights, x):
    weight1, weight2 = weights
    return x + F.gelu(x @ weight1, approximate="tanh") @ weight2


def naive_memory_layer(layer: NeuralMemoryLayer, x, mask):
    B, T, d = x.shape
    H, Dh, C = layer.n_heads, layer.head_dim, layer.chunk_size
    keep = mask[..., None].to(x.dtype)
    q = l2norm(layer.q_conv(layer.q_proj(x) * keep).view(B, T, H, Dh))
    k = l2norm(layer.k_conv(layer.k_proj(x) * keep).view(B, T, H, Dh))
    v = layer.v_conv(layer.v_proj(x) * keep).view(B, T, H, Dh)
    alpha_logit, eta_logit, theta_logit = layer.gate_proj(x).chunk(3, dim=-1)
    alpha = torch.sigmoid(alpha_logit) * keep  # padding: alpha = 0, eta = 1, theta = 0
    eta = torch.where(mask[..., None], torch.sigmoid(eta_logit), torch.ones_like(eta_logit))
    theta = layer.base_lr * torch.sigmoid(theta_logit) * keep
    y = torch.zeros(B, T, H, Dh, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            weights = [layer.weight1[h], layer.weight2[h]]
            surprise = [torch.zeros_like(w) for w in weights]
            for start in range(0, T, C):
                chunk_start = weights
                for t in range(start, min(start + C, T)):
                    loss = (memory(chunk_start, k[b, t, h]) - v[b, t, h]).pow(2).sum()
                    grads = torch.autograd.grad(loss, chunk_start, create_graph=True)
                    surprise = [eta[b, t, h] * s - theta[b, t, h] * g for s, g in zip(surprise, grads)]
                    weights = [(1 - alpha[b, t, h]) * w + s for w, s in zip(weights, surprise)]
                    y[b, t, h] = memory(weights, q[b, t, h])
    gate = layer.out_gate(x).view(B, T, H, Dh)
    return layer.o_proj(layer.out_norm(y, gate).reshape(B, T, d))


def test_memory_layer_matches_naive_chunk_loop():
    torch.manual_seed(0)
    layer = NeuralMemoryLayer(d_model=8, n_heads=2, chunk_size=4, base_lr=0.5).double()
    with torch.no_grad():  # strong gates and memory so forgetting, momentum and both layers all matter
        layer.gate_proj.bias.copy_(torch.tensor([-1.0, 0.5, 0.0]).repeat_interleave(2))
        layer.weight2.normal_(std=0.5)
    B, T = 2, 11  # three chunks, the last one partial
    x = torch.randn(B, T, 8, dtype=torch.double)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, :3] = False
    x = x * mask[..., None]
    probe = torch.randn(B, T, 8, dtype=torch.double)

    fast = layer(x, mask)
    fast_grads = torch.autograd.grad((fast * probe)[mask].sum(), list(layer.parameters()))
    slow = naive_memory_layer(layer, x, mask)
    slow_grads = torch.autograd.grad((slow * probe)[mask].sum(), list(layer.parameters()))

    torch.testing.assert_close(fast[mask], slow[mask], rtol=1e-9, atol=1e-9)
    for (name, _), fast_grad, slow_grad in zip(layer.named_parameters(), fast_grads, slow_grads):
        torch.testing.assert_close(fast_grad, slow_grad, rtol=1e-8, atol=1e-9, msg=lambda m, name=name: f"{name}: {m}")


def test_sliding_window_attention_sees_window_and_persistent_memory():
    torch.manual_seed(0)
    attention = SlidingWindowAttention(d_model=8, n_heads=2, window=3, persistent_tokens=2).double()
    B, T, H, Dh = 1, 7, 2, 4
    x = torch.randn(B, T, 8, dtype=torch.double)
    mask = torch.ones(B, T, dtype=torch.bool)
    q, k, v = attention.qkv(x).view(B, T, 3, H, Dh).unbind(2)
    expected = torch.zeros(B, T, H, Dh, dtype=torch.double)
    for t in range(T):
        keys = torch.cat([attention.persistent_keys.transpose(0, 1), k[0, max(0, t - 2): t + 1]])  # [P + w, H, Dh]
        values = torch.cat([attention.persistent_values.transpose(0, 1), v[0, max(0, t - 2): t + 1]])
        weights = torch.softmax(torch.einsum("hd,shd->hs", q[0, t], keys) / Dh**0.5, dim=-1)
        expected[0, t] = torch.einsum("hs,shd->hd", weights, values)
    torch.testing.assert_close(attention(x, mask), attention.o_proj(expected.reshape(B, T, 8)))


def test_chunks_start_at_the_first_real_item():
    torch.manual_seed(0)
    model = Titans(d_model=8, dropout=0.0, chunk_size=4).double().eval()
    items = torch.randn(1, 10, 8, dtype=torch.double)
    alone = model(items, torch.ones(1, 10, dtype=torch.bool))
    for pad in (3, 4, 6):
        x = torch.cat([torch.zeros(1, pad, 8, dtype=torch.double), items], dim=1)
        mask = torch.arange(pad + 10)[None] >= pad
        torch.testing.assert_close(model(x, mask)[:, pad:], alone)
