"""Per-token reference scan in fp32: the executable specification of delta_scan."""

import torch


def naive_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state):
    """Walk the sequence one token at a time; returns (o [B, T, H, V] fp32, S_T [B, H, K, V] fp32)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, g = q.float(), k.float(), v.float(), g.float()
    state = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.float()
    outputs = []
    for t in range(T):
        k_t, v_t = k[:, t], v[:, t]  # [B, H, K], [B, H, V]
        alpha_t = g[:, t].exp()[..., None, None]  # [B, H, 1, 1]
        if beta is None:
            state = alpha_t * state + k_t[..., :, None] * v_t[..., None, :]
        else:
            beta_t = beta[:, t].float()[..., None, None]
            erased = state - beta_t * k_t[..., :, None] * torch.einsum("bhk,bhkv->bhv", k_t, state)[..., None, :]
            state = alpha_t * erased + beta_t * k_t[..., :, None] * v_t[..., None, :]
        if extra_k is not None:
            state = state + torch.einsum("bhlk,bhlv->bhkv", extra_k[:, t].float(), extra_v[:, t].float())
        outputs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    return torch.stack(outputs, dim=1), state


def naive_short_conv(x, weight, bias, silu):
    """Causal depthwise convolution of x [B, T, C] with weight [C, K] (and bias [C]), one tap at a time in fp32,
    then SiLU when ``silu``: y[:, t] = act(bias + sum_j weight[:, j] x[:, t - K + 1 + j]), x = 0 before t = 0."""
    T, K = x.shape[1], weight.shape[1]
    x = x.float()
    y = torch.zeros_like(x) if bias is None else bias.float().expand_as(x).clone()
    for j in range(K):
        shift = K - 1 - j  # tap j reads the input shift positions back
        if shift < T:
            y[:, shift:] += weight[:, j].float() * x[:, :T - shift]
    return y * torch.sigmoid(y) if silu else y
