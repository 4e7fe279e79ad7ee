"""Initialisation policies (prism_rec/models/init.py) and weight-decay groups (prism_rec/training/optim.py).

Every registered backbone (so backbones added later are covered) must declare an ``init_policy`` and start
from its reference's statistics: Linear/Conv weight stds, zero biases, unit norms, rescaled residual
projections, the item table's std and zero padding row. Statistics are checked within 6 standard errors of
the sample std (normal: relative SE 1/sqrt(2n); uniform: sqrt(0.2/n)), so a seeded draw passes while the
PyTorch default (std 1/sqrt(3 fan_in), 3.6x fla's 0.02 at d = 64) fails.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.init import POLICIES, apply_init, is_norm, policy_of
from prism_rec.models.recommender import SequentialRecommender
from prism_rec.registry import build_backbone, list_backbones
from prism_rec.training.optim import parameter_groups

D = 64
N_ITEMS = 2000
NAMES = list_backbones()


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    return build_backbone(name, d_model=D)


def declared(name: str, module: nn.Module) -> str:
    policy = getattr(type(module), "init_policy", None)
    if policy is None:
        pytest.fail(f"backbone {name!r} ({type(module).__qualname__}) declares no init_policy: set the class "
                    f"attribute init_policy to one of {sorted(POLICIES)} and call "
                    "prism_rec.models.init.apply_init(self) "
                    f"at the end of its __init__ (see prism_rec/models/init.py)")
    assert policy in POLICIES, f"{name}: init_policy {policy!r} is not one of {sorted(POLICIES)}"
    return policy


def assert_std(tensor: torch.Tensor, expected: float, what: str, uniform: bool = False) -> None:
    values = tensor.detach().double().flatten()
    n = values.numel()
    relative_se = math.sqrt(0.2 / n) if uniform else 1 / math.sqrt(2 * n)
    std = values.std().item()
    assert abs(std / expected - 1) < 6 * relative_se, f"{what}: std {std:.5f}, expected {expected:.5f} (n={n})"
    assert abs(values.mean().item()) < 6 * expected / math.sqrt(n), f"{what}: mean {values.mean().item():.5f}"


def assert_default_uniform(weight: torch.Tensor, fan_in: int, what: str) -> None:
    """PyTorch's default for Linear/Conv weights and biases: U(+-1/sqrt(fan_in))."""
    bound = fan_in**-0.5
    assert weight.abs().max() <= bound, f"{what}: beyond the default bound {bound}"
    assert_std(weight, bound / math.sqrt(3), what, uniform=True)


def fan_in(module: nn.Module) -> int:
    return module.weight[0].numel()  # Linear: in_features; Conv1d: in_channels / groups * kernel


def owned(module: nn.Module) -> set[int]:
    return {id(p) for p in module.parameters(recurse=False)}


def check_layers(name: str, backbone: nn.Module, policy: str) -> set[int]:
    """Linear/Conv1d/Embedding/norm statistics by policy; returns the ids of the parameters checked."""
    checked = set()
    for module_name, module in backbone.named_modules():
        what = f"{name}:{module_name}"
        if is_norm(module):
            if getattr(module, "weight", None) is not None:
                assert torch.equal(module.weight, torch.ones_like(module.weight)), f"{what}: norm weight not 1"
            if getattr(module, "bias", None) is not None:
                assert not module.bias.any(), f"{what}: norm bias not 0"
            checked |= owned(module)
        elif isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
            checked |= owned(module)
            rescale = getattr(module.weight, "_residual_rescale", None)
            if rescale is not None:
                bound = fan_in(module) ** -0.5 / math.sqrt(rescale)
                assert module.weight.abs().max() <= bound, what
                assert_std(module.weight, bound / math.sqrt(3), what + " (rescaled)", uniform=True)
            elif policy == "fla" or (policy in ("recbole", "ttt") and not isinstance(module, nn.Conv1d)):
                assert_std(module.weight, 0.02, what)
            elif policy in ("titans", "torch") or isinstance(module, nn.Conv1d):
                assert_default_uniform(module.weight, fan_in(module), what)
            bias = getattr(module, "bias", None)
            if bias is not None:
                if policy in ("fla", "recbole", "ttt"):
                    assert not bias.any(), f"{what}: bias not 0"
                elif policy in ("titans", "torch"):
                    assert bias.abs().max() <= fan_in(module) ** -0.5 and bias.abs().min() > 0, f"{what}: bias"
    return checked


def check_raw(name: str, backbone: nn.Module, policy: str, checked: set[int]) -> None:
    """Parameters held outside Linear/Conv/norm modules, by their reference's rule."""
    for full_name, parameter in backbone.named_parameters():
        if id(parameter) in checked:
            continue
        leaf, what = full_name.rsplit(".", 1)[-1], f"{name}:{full_name}"
        if policy == "fla" and leaf in ("A_log", "dt_bias", "D"):
            assert getattr(parameter, "_no_weight_decay", False), f"{what}: not flagged _no_weight_decay"
        if policy != "fla" and leaf in ("A_log", "dt_bias", "D"):
            continue  # the SSD parameters' ranges are fla's; other references are checked by their own tests
        elif leaf == "A_log":
            low = 1.0 if name == "mamba2" else 0.0  # fla: Mamba-2 U[1, 16], Gated DeltaNet U[0, 16]
            assert low <= parameter.exp().min() and parameter.exp().max() <= 16, what
        elif leaf == "dt_bias":
            dt = F.softplus(parameter)
            assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 0.1 * (1 + 1e-5), what
        elif leaf == "D" or leaf == "ln_weight":
            assert torch.equal(parameter, torch.ones_like(parameter)), f"{what}: not 1"
        elif leaf.endswith("bias") and leaf != "dt_bias" and "relative_bias" not in full_name:
            assert not parameter.any(), f"{what}: not 0"
        elif policy == "ttt" and leaf in ("weight", "weight1", "weight2"):
            assert_std(parameter, 0.02, what)  # inner model, N(0, 0.02)
        elif policy == "titans" and leaf in ("weight1", "weight2"):
            fans = parameter.shape[-1] + parameter.shape[-2]
            assert parameter.abs().max() <= math.sqrt(6 / fans), what
            assert_std(parameter, math.sqrt(2 / fans), what + " (xavier-uniform)", uniform=True)
        elif policy == "titans" and leaf.startswith("persistent"):
            assert not parameter.any(), f"{what}: persistent memory not 0"


@pytest.mark.parametrize("name", NAMES)
def test_backbone_starts_from_its_reference(name):
    backbone = build(name)
    policy = declared(name, backbone)
    if policy == "none":
        assert not list(backbone.parameters()), f"{name}: policy 'none' is for backbones without parameters"
        return
    checked = check_layers(name, backbone, policy)
    check_raw(name, backbone, policy, checked)


def test_fla_rescales_only_mamba2_residual_projections():
    for name in NAMES:
        backbone = build(name)
        rescaled = [m for m in backbone.modules() if hasattr(getattr(m, "weight", None), "_residual_rescale")]
        if name == "mamba2":
            assert rescaled == [mixer.out_proj for mixer in backbone.stack.mixers]
            assert all(m.weight._residual_rescale == 2 for m in rescaled)  # 1 residual per layer x 2 layers
        else:  # fla's GDN/Transformer defaults do not rescale; the other references never do
            assert not rescaled, name
    torch.manual_seed(0)
    with_mlp = build_backbone("mamba2", d_model=D, n_layers=3, mlp=True)
    rescaled = [m for m in with_mlp.modules() if hasattr(getattr(m, "weight", None), "_residual_rescale")]
    assert len(rescaled) == 6 and all(m.weight._residual_rescale == 3 for m in rescaled)


def test_hstu_layers_as_generative_recommenders():
    layer = build("hstu").layers[0]
    assert_std(layer.uvqk.weight, 0.02, "uvqk")
    out = layer.output
    fans = out.in_features + out.out_features
    assert out.weight.abs().max() <= math.sqrt(6 / fans)
    assert_std(out.weight, math.sqrt(2 / fans), "f2 (xavier-uniform)", uniform=True)
    assert_default_uniform(out.bias, out.in_features, "f2 bias (PyTorch default, not zeroed)")
    assert_std(layer.relative_bias.weight, 0.02, "rab")


@pytest.mark.parametrize("name", NAMES)
def test_recommender_embeddings_follow_the_backbone_policy(name):
    torch.manual_seed(0)
    model = SequentialRecommender(N_ITEMS, name, d_model=D, max_len=50)
    policy = policy_of(model.backbone)
    table = model.item_embedding.weight
    assert not table[0].any(), f"{name}: padding row not 0"
    assert_std(table[1:], policy.item_std(N_ITEMS + 1, D), f"{name}: item table ({policy.name})",
               uniform=policy.name == "titans")
    if policy.name == "hstu":
        assert table.abs().max() <= 2 * 0.02, "truncated at 2 std"
    if model.position_embedding is not None:
        assert policy.name == "recbole" and name == "sasrec"
        assert_std(model.position_embedding.weight, 0.02, f"{name}: positions")
    assert torch.equal(model.final_norm.weight, torch.ones(D)) and not model.final_norm.bias.any()


def test_missing_policy_is_a_clear_error():
    class Undeclared(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

    with pytest.raises(TypeError, match="declares no init_policy"):
        apply_init(Undeclared())


def test_prism_at_L0_draws_exactly_gated_deltanets_weights():
    gdn, prism = build("gated_deltanet").state_dict(), build("prism-L0").state_dict()
    assert gdn.keys() == prism.keys()
    assert all(torch.equal(gdn[key], prism[key]) for key in gdn)


def decay_of(groups):
    return {id(p): group["weight_decay"] for group in groups for p in group["params"]}


@pytest.mark.parametrize("name", NAMES)
def test_parameter_groups_cover_every_parameter_once(name):
    torch.manual_seed(0)
    model = SequentialRecommender(N_ITEMS, name, d_model=D, max_len=50)
    groups = parameter_groups(model, 0.1)
    listed = [id(p) for group in groups for p in group["params"]]
    assert sorted(listed) == sorted(id(p) for p in model.parameters()), "every parameter exactly once"
    assert [group["weight_decay"] for group in groups] == [0.0, 0.1]
    decay = decay_of(groups)
    norms = {id(p) for m in model.modules() if is_norm(m) for p in m.parameters()}
    for full_name, parameter in model.named_parameters():
        exempt = (getattr(parameter, "_no_weight_decay", False) or id(parameter) in norms
                  or full_name.endswith("bias") or parameter.ndim < 2)
        assert decay[id(parameter)] == (0.0 if exempt else 0.1), full_name
    assert decay[id(model.item_embedding.weight)] == 0.1  # embeddings are decayed, as nanoGPT does


def test_parameter_groups_exempt_the_references_no_decay_parameters():
    torch.manual_seed(0)
    model = SequentialRecommender(N_ITEMS, "mamba2", d_model=D)
    decay = decay_of(parameter_groups(model, 0.05))
    mixer = model.backbone.stack.mixers[0]
    for parameter in (mixer.A_log, mixer.dt_bias, mixer.D, mixer.conv.conv.bias, mixer.norm.weight,
                      model.backbone.stack.norms[0].weight, model.final_norm.weight, model.final_norm.bias):
        assert decay[id(parameter)] == 0.0
    for parameter in (mixer.in_proj.weight, mixer.out_proj.weight, mixer.conv.conv.weight, model.item_embedding.weight):
        assert decay[id(parameter)] == 0.05
    ttt = SequentialRecommender(N_ITEMS, "ttt-linear", d_model=D).backbone.stack.mixers[0]
    decay = decay_of(parameter_groups(ttt, 0.05))
    assert decay[id(ttt.ln_weight)] == decay[id(ttt.ln_bias)] == decay[id(ttt.bias)] == 0.0
    assert decay[id(ttt.weight)] == decay[id(ttt.q_proj.weight)] == 0.05


def test_parameter_groups_drive_adamw_and_skip_frozen_or_empty():
    torch.manual_seed(0)
    model = SequentialRecommender(50, "gated_deltanet", d_model=16)
    model.final_norm.weight.requires_grad_(False)
    groups = parameter_groups(model, 0.1)
    assert id(model.final_norm.weight) not in decay_of(groups)
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    items = torch.randint(1, 51, (2, 6))
    model.score_all(model.encode(items)[:, -1]).logsumexp(-1).sum().backward()
    optimizer.step()
    assert parameter_groups(nn.Identity(), 0.1) == []
    only_norm = nn.LayerNorm(4)
    assert [g["weight_decay"] for g in parameter_groups(only_norm, 0.1)] == [0.0]
