"""The presets that reproduce the authors' recommendation models (gpr-prism/prism@435f392, rec/).

Each preset is checked against a naive re-statement of the authors' equations as its module docstring
documents them (written here from those equations, on a sequence without padding, where the authors'
mask-free code and the presets must agree), plus the properties the docstrings claim: the rank-L write is
inert when the chunk is the whole sequence, RoPE offsets cancel in the GDN fallback, and the authors'
mask-free PRISM is not left-padding invariant while the preset is.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from prism_rec.baselines.authors_prism import channel_decay_attention

from prism_rec.registry import backbone_entry, build_backbone, list_backbones

D = 32
T = 21  # the authors' sequence length: num_neighbors 20 + the node itself
TOL = dict(rtol=1e-4, atol=1e-5)


def build(name, **options):
    torch.manual_seed(0)
    return build_backbone(name, d_model=D, dropout=0.0, **options).eval()


def inputs(B=2, length=T, seed=1):
    torch.manual_seed(seed)
    return torch.randn(B, length, D), torch.ones(B, length, dtype=torch.bool)


def causal_depthwise(conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The authors' left-padded depthwise convolution of x [B, T, C] (prism.py 279-283)."""
    y = F.conv1d(F.pad(x.transpose(1, 2), (conv.kernel_size[0] - 1, 0)), conv.weight, conv.bias, groups=conv.groups)
    return y.transpose(1, 2)


def authors_rope(z: torch.Tensor, width: int, offset: int = 0) -> torch.Tensor:
    """The authors' sin/cos tables (frequencies over ``width``, tiled to z's last dim), positions offset..offset+T-1."""
    positions = torch.arange(offset, offset + z.shape[1], dtype=torch.float32)[:, None]
    theta = torch.exp(-2 * math.log(10000) * torch.arange(width // 2, dtype=torch.float32) / width)
    angle = (positions * torch.stack([theta, theta], -1).reshape(width)).tile(1, z.shape[-1] // width)
    rotated = torch.stack([-z[..., 1::2], z[..., 0::2]], -1).reshape(z.shape)
    return z * angle.cos() + rotated * angle.sin()


def test_registry_lists_the_presets():
    names = list_backbones()
    for name in ("gdn-authors", "prism-authors", "mamba2-authors"):
        assert name in names
        assert "authors" in backbone_entry(name).description


# -- the per-channel decayed scan ------------------------------------------------------------------------

def test_channel_decay_attention_matches_a_per_token_loop():
    torch.manual_seed(0)
    B, L, H, K, V, length = 2, 2, 3, 4, 5, 37  # not a multiple of the chunk
    q, k = torch.randn(B, length, H, K), torch.randn(B, length, H, K)
    v, log_decay = torch.randn(B, length, H, V), -torch.rand(B, length, H, K) * 2
    extra_k, extra_v = torch.randn(B, length, H, L, K), torch.randn(B, length, H, L, V)
    state, expected = torch.zeros(B, H, K, V), []
    for t in range(length):
        state = log_decay[:, t].exp()[..., None] * state + k[:, t, :, :, None] * v[:, t, :, None, :]
        state = state + torch.einsum("bhlk,bhlv->bhkv", extra_k[:, t], extra_v[:, t])
        expected.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    out = channel_decay_attention(q, k, v, log_decay, extra_k, extra_v, chunk_size=8)
    torch.testing.assert_close(out, torch.stack(expected, 1), **TOL)


# -- prism-authors -----------------------------------------------------------------------------------------

def authors_linear_attention(q, k, v, gamma, inj_k=None, inj_v=None, inj_scale=1.0, chunk=None, eps=1e-6):
    """prism.py 337-406: chunked per-channel gated linear attention (chunk: the whole sequence, as they run
    it); the injection enters only the state carried between chunks (loop over range(num_chunks - 1))."""
    B, length, H, K = q.shape
    chunk = chunk or length
    n = length // chunk
    q, k, v, gamma = (z.reshape(B, n, chunk, H, -1) for z in (q, k, v, gamma))
    start = gamma.cumprod(2)
    end = gamma.flip(2).cumprod(2).flip(2)
    base = torch.einsum("bnsha,bnshl->bnhal", k * end, v)
    injected = torch.zeros_like(base)
    for k_l, v_l in zip(inj_k or [], inj_v or []):
        injected = injected + torch.einsum("bnsha,bnshl->bnhal", k_l.reshape(k.shape) * end, v_l.reshape(v.shape))
    states = [torch.zeros_like(base[:, 0])]
    for i in range(n - 1):
        states.append(states[-1] * gamma.prod(2)[:, i, ..., None] + base[:, i] + inj_scale * injected[:, i])
    inter = torch.einsum("bnsha,bnhal->bnshl", q * start, torch.stack(states, 1))
    scores = torch.einsum("bnsha,bnmha->bnhsm", q * start, k / (start + eps)) * torch.ones(chunk, chunk).tril()
    return (inter + torch.einsum("bnhsm,bnmhl->bnshl", scores, v)).reshape(B, length, H, -1)


def authors_prism_block(block, x):
    """prism.py 408-467 with the preset's weights, no mask and RoPE positions 0..T-1, as the authors run it."""
    B, length, d = x.shape
    H = block.n_heads
    heads = (B, length, H, -1)
    n = block.input_norm(x)
    u, v, q, k = block.uvqk(n).split(d, -1)
    gamma = (torch.sigmoid(block.forget_gate(n)) ** (1 / 16)).clamp(1e-4, 1.0)
    token = gamma.view(heads).mean(2)
    scale, head_scale = torch.sigmoid(block.gate_to_scale(token)), torch.sigmoid(block.gate_to_heads(token))
    inject = torch.sigmoid(block.gate_to_inject(token))
    q, k = authors_rope(q, d // H), authors_rope(k, d // H)
    anchor = block.anchor_norm(causal_depthwise(block.anchor_conv.conv, n)) * (1 + scale)
    gain = torch.sigmoid(block.gain_mlp(anchor)) * (1 + scale)
    residual, update = block.residual_norm(block.residual_proj(anchor)), 0
    for l in range(block.L):
        head_gate = torch.sigmoid(block.step_gate[l](anchor)) * (1 + head_scale)
        delta = block.step_delta[l](head_gate.mean(2, keepdim=True) * (gain * residual) * (1 + scale) * (1 + inject))
        update, residual = update + delta, residual - delta
    o = authors_linear_attention(q.view(heads), k.view(heads), v.view(heads), gamma.view(heads))
    attended = (F.silu(block.output_gate(n)).view(heads) * o).reshape(B, length, d)
    y = block.output_mlp(u * block.output_norm(attended))
    return x + y + block.solver_out(update) * torch.sigmoid(block.solver_out_logit) * (1 + inject)


def test_the_authors_rank_L_write_never_reaches_the_output_when_the_chunk_is_the_sequence():
    """Their code (chunk = num_neighbors + 1 = T) computes injection k_l, v_l that change nothing; with a
    shorter chunk the same code would let them in (between chunks only)."""
    torch.manual_seed(0)
    H, K = 2, 4
    q, k, v = torch.randn(2, T, H, K), torch.randn(2, T, H, K), torch.randn(2, T, H, K)
    gamma = torch.rand(2, T, H, K) * 0.2 + 0.8
    inj_k, inj_v = [torch.randn(2, T, H, K) for _ in range(3)], [torch.randn(2, T, H, K) for _ in range(3)]
    none = authors_linear_attention(q, k, v, gamma)
    torch.testing.assert_close(authors_linear_attention(q, k, v, gamma, inj_k, inj_v), none, rtol=0, atol=0)
    short = authors_linear_attention(q, k, v, gamma, chunk=7)
    assert not torch.allclose(authors_linear_attention(q, k, v, gamma, inj_k, inj_v, chunk=7), short)
    # our exact scan is their chunk = T attention up to their 1e-6 in the denominator: a relative
    # 1e-6 / cumprod(gamma) >= 1e-6 / 0.8 ** 21 ~ 1e-4 here
    torch.testing.assert_close(channel_decay_attention(q, k, v, gamma.log()), none, rtol=1e-3, atol=1e-4)


def test_prism_authors_builds_no_dead_injection_weights_and_the_state_option_writes_through_the_state():
    names = {name for name, _ in build("prism-authors").named_parameters()}
    assert not any("step_k" in name or "step_v" in name or "injection_logit" in name for name in names)
    model = build("prism-authors", injection="state")
    x, mask = inputs()
    with torch.no_grad():
        before = model(x, mask)
        model.blocks[0].step_v[0].weight.add_(0.5)
        after = model(x, mask)
    assert not torch.allclose(before[:, 0], after[:, 0])  # a token's write is read at the same token


def test_the_authors_mask_free_prism_depends_on_left_padding_and_the_preset_does_not():
    model = build("prism-authors")
    x, mask = inputs(length=T - 5)
    padded = torch.cat([torch.zeros(2, 5, D), x], 1)
    padded_mask = torch.cat([torch.zeros(2, 5, dtype=torch.bool), mask], 1)
    with torch.no_grad():
        theirs_plain = authors_prism_block(model.blocks[0], x)
        theirs_padded = authors_prism_block(model.blocks[0], padded)
        ours_plain, ours_padded = model.blocks[0](x, mask), model.blocks[0](padded, padded_mask)
    assert not torch.allclose(theirs_plain, theirs_padded[:, 5:], atol=1e-3)
    torch.testing.assert_close(ours_padded[:, 5:], ours_plain, **TOL)


# -- gdn-authors -------------------------------------------------------------------------------------------

def authors_gdn_layer(layer, x, offset=0):
    """myfla/gated_deltanet.py forward with force_fallback=True: RoPE over the full key width, then causal
    softmax attention per head, gated RMSNorm, the u-gate and o_proj. ``offset`` shifts every position,
    as the authors' flattened (unpadded) batch does for all but its first sequence."""
    B, length, _ = x.shape
    H, K = layer.n_heads, layer.head_k_dim
    q, k, v = (F.silu(causal_depthwise(conv.conv, proj(x)))
               for conv, proj in ((layer.q_conv, layer.q_proj), (layer.k_conv, layer.k_proj),
                                  (layer.v_conv, layer.v_proj)))
    q, k = authors_rope(q, H * K, offset), authors_rope(k, H * K, offset)
    q, k, v = (z.view(B, length, H, K).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(K)).masked_fill(torch.ones(length, length).triu(1).bool(), -math.inf)
    o = (scores.softmax(-1) @ v).transpose(1, 2)  # [B, T, H, K]
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + layer.o_norm.eps) * layer.o_norm.weight
    o = (o * F.silu(layer.g_proj(x).view(B, length, H, K))).flatten(2)
    return layer.o_proj(layer.u_proj(x) * o)


@pytest.mark.parametrize("offset", [0, 13])
def test_gdn_authors_is_causal_softmax_attention_with_their_doubling_stack(offset):
    model = build("gdn-authors")
    x, mask = inputs()
    first, second = model.layers
    with torch.no_grad():
        expected = authors_gdn_layer(second, 2 * authors_gdn_layer(first, x, offset), offset)
        torch.testing.assert_close(model(x, mask), expected, **TOL)


def test_gdn_authors_has_no_decay_or_erase_parameters_and_their_head_width_rule():
    model = build("gdn-authors")
    names = {name for name, _ in model.named_parameters()}
    assert not any(part in name for name in names for part in ("A_log", "dt_bias", "a_proj", "b_proj"))
    assert model.layers[0].head_k_dim == max(32, D // 2 // 2)
    assert build_backbone("gdn-authors", d_model=200).layers[0].head_k_dim == 50  # the authors' 4 x 50, 2 heads


# -- mamba2-authors ----------------------------------------------------------------------------------------

def authors_mamba2_block(block, x):
    """MAMBA2.py 333-393: 0.7 x undecayed causal linear attention + 0.3 x the per-token SISO SSM loop."""
    B, length, d = x.shape
    H, N = block.n_heads, block.d_state
    n = block.input_norm(x)
    u, v, q, k = block.uvqk(n).split(d, -1)
    q, k, v = (z.view(B, length, H, -1) for z in (q, k, v))
    scores = torch.einsum("bshd,bmhd->bhsm", q, k) * torch.ones(length, length).tril()
    attended = torch.einsum("bhsm,bmhd->bshd", scores, v).reshape(B, length, d)
    xi, dt = block.x_proj(n), F.softplus(block.dt_proj(n)).view(B, length, H, N)
    Bm = block.B_proj(n).view(B, length, H, N) + block.B_bias
    Cm = block.C_proj(n).view(B, length, H, N) + block.C_bias
    A, h, ys = -block.A_log.exp(), torch.zeros(B, H, N), []
    for t in range(length):
        h = torch.exp(dt[:, t] * A) * h + dt[:, t] * Bm[:, t] * xi[:, t, :, None]
        ys.append((Cm[:, t] * h).sum(-1))
    combined = 0.7 * attended + 0.3 * block.ssm_out(torch.stack(ys, 1))
    gated = F.silu(block.gate_proj(block.gate_in(n))) * combined
    return x + block.output_mlp(u * block.output_norm(gated))


@pytest.mark.parametrize("name, reference",
                         [("prism-authors", authors_prism_block), ("mamba2-authors", authors_mamba2_block)])
def test_block_stack_is_the_authors_equations_on_an_unpadded_sequence(name, reference):
    model = build(name)
    x, mask = inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(x, mask), reference(model.blocks[1], reference(model.blocks[0], x)), **TOL)
