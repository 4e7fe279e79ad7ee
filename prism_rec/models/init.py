"""Initialisation policies: every backbone starts from the initialisation of its reference implementation.

Why: with PyTorch's default initialisation (and the item table from N(0, d^-0.5)) delta-rule and SSM
backbones sat on the item-popularity plateau for many epochs; initialised as fla does (N(0, 0.02)
everywhere) Gated DeltaNet leaves it within a few (results/electronics_patience.md, ../shared/PAPER.md
section 8).

How to use it (a new backbone needs two lines):

    from prism_rec.models.init import apply_init

    @register_backbone("my-model")
    class MyModel(nn.Module):
        init_policy = "fla"                       # one of POLICIES (or "none" for a parameterless backbone)

        def __init__(self, d_model=64, ...):
            super().__init__()
            ...                                   # build every submodule first
            apply_init(self)                      # last line, like Hugging Face's ``post_init``

``apply_init(backbone, rescaled=(), n_residuals=0)`` runs the policy over the whole backbone (so call it
once, at the end of the most-derived ``__init__``; a subclass that only adds modules through its parent's
constructor, like PRISM through ``layer_class``, needs no call of its own). ``rescaled`` lists the Linear
layers that write into the residual stream and that the reference rescales GPT-2 style (only fla's Mamba-2
does by default): they are drawn from PyTorch's default (kaiming-uniform, U(+-1/sqrt(fan_in))) and divided
by sqrt(n_residuals). ``SequentialRecommender`` reads ``policy_of(backbone)`` and initialises the shared
item table and the learned positions with ``init_embeddings``; the padding row 0 is always zeroed (the
references differ there; the row is never read: padded inputs are masked and scoring skips it). The final
LayerNorm starts at weight 1, bias 0 under every policy (what every reference's norms start at).

What each policy draws (``POLICIES[name]``, the reference file in ``source``). Parameters the policies do
not touch (Mamba-2/GDN's A_log, dt_bias, D; TTT's inner weights; Titans' memory weights; HSTU's layers)
are drawn in the layers' own constructors exactly as the reference layers draw them; their docstrings say
how. Norm weights (any module whose class name ends in "Norm") start at 1 and norm biases at 0 everywhere.

- ``fla`` (fla-org/flash-linear-attention, ``_init_weights`` of fla/models/gated_deltanet/
  modeling_gated_deltanet.py, fla/models/mamba2/modeling_mamba2.py, fla/models/transformer/
  modeling_transformer.py): every nn.Linear and nn.Conv1d weight ~ N(0, 0.02), every bias 0, nn.Embedding ~
  N(0, 0.02) (item table and positions too). Residual rescaling: fla's ``_init_weights`` takes a
  ``prenorm_residual_strategy`` (GDN) / ``rescale_prenorm_residual`` (Transformer) argument that
  ``post_init`` leaves at its default None / False, so GDN and Transformer++ are not rescaled; Mamba-2's
  config defaults ``rescale_prenorm_residual=True`` with one residual per layer, so its ``out_proj`` (and a
  ``down_proj``) is redrawn kaiming-uniform and divided by sqrt(n_layers).
- ``recbole`` (RUCAIBox/RecBole, recbole/model/sequential_recommender/sasrec.py ``_init_weights``): every
  nn.Linear and nn.Embedding weight ~ N(0, 0.02), Linear biases 0, LayerNorm 1/0; nn.Conv1d is left at
  PyTorch's default (RecBole's SASRec has none).
- ``recbole-gru4rec`` (RUCAIBox/RecBole, recbole/model/sequential_recommender/gru4rec.py ``_init_weights``):
  nn.Embedding (the item table; positions, unused by GRU4Rec, too) xavier-normal, std sqrt(2 / (rows + d));
  the first GRU layer's input and recurrent weights (``weight_ih_l0``, ``weight_hh_l0``, each the stacked
  [3 hidden, fan_in] matrix of the r, z, n gates) xavier-uniform; deeper GRU layers and every nn.Linear
  keep PyTorch's default (RecBole's rule touches neither).
- ``hstu`` (facebookresearch/generative-recommenders, generative_recommenders/research/modeling/
  sequential/hstu.py, embedding_modules.py, initialization.py): the layers initialise themselves (U,V,Q,K
  projection ~ N(0, 0.02), output projection xavier-uniform with PyTorch's default bias U(+-1/sqrt(fan_in)),
  relative attention bias ~ N(0, 0.02)); the item table ~ N(0, 0.02) truncated at +-2 std (std 0.0176);
  learned positions xavier-normal (the reference's input preprocessor draws them truncated-normal
  with std d^-0.5, then the model's ``reset_params`` redraws every parameter outside the HSTU stack and
  the item table xavier-normal).
- ``ttt`` (test-time-training/ttt-lm-pytorch, ttt.py ``TTTPreTrainedModel._init_weights`` and
  ``TTTBase``): every nn.Linear weight ~ N(0, 0.02), Linear biases 0, nn.Embedding ~ N(0, 0.02);
  nn.Conv1d left at PyTorch's default; inner-model weights ~ N(0, 0.02) with zero biases, the TTT
  LayerNorm 1/0 and the per-position step-size bias 0 are drawn by the layer.
- ``titans`` (lucidrains/titans-pytorch, titans_pytorch/neural_memory.py, memory_models.py,
  mac_transformer.py; the authors published no code): no global rule, so every nn.Linear and nn.Conv1d
  keeps PyTorch's default (kaiming-uniform weight, bias U(+-1/sqrt(fan_in))), including the gate
  projections; the memory MLP weights are xavier-uniform and the persistent memory 0 (drawn by the layers).
  Its token embedding is nn.Embedding's default N(0, 1) and its untied output head a bias-free Linear;
  our item table is tied and also scores, so it takes the head's init, U(+-1/sqrt(d)) (N(0, 1) would start
  every logit with std sqrt(d)); positions, unused by Titans, N(0, 1) as nn.Embedding.
- ``torch``: the layers' PyTorch defaults and nothing else (norms 1/0), for code that applies no
  initialisation of its own (the authors' presets ``*-authors``: gpr-prism/prism's rec/ models are used
  bare); the item table, which their link-prediction models do not have, U(+-1/sqrt(d)) as ``titans``.
- ``none``: a backbone without parameters (``pop``); nothing is drawn, the item table and positions
  take nn.Embedding's default N(0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

INITIALIZER_RANGE = 0.02  # fla, RecBole, TTT and HSTU's ``initializer_range`` / std


def is_norm(module: nn.Module) -> bool:
    """LayerNorm, RMSNorm, GatedRMSNorm, GroupNorm, ...: any module whose class name ends in "Norm"."""
    return type(module).__name__.endswith("Norm")


def reset_norms(module: nn.Module) -> None:
    """Every norm's weight to 1 and bias to 0 (what all the references start their norms at)."""
    with torch.no_grad():
        for sub in module.modules():
            if is_norm(sub):
                if getattr(sub, "weight", None) is not None:
                    sub.weight.fill_(1.0)
                if getattr(sub, "bias", None) is not None:
                    sub.bias.zero_()


def normal_linear_layers(module: nn.Module, types: tuple, std: float = INITIALIZER_RANGE) -> None:
    """Weights of every submodule of ``types`` ~ N(0, std), their biases 0."""
    for sub in module.modules():
        if isinstance(sub, types):
            nn.init.normal_(sub.weight, mean=0.0, std=std)
            if getattr(sub, "bias", None) is not None:
                nn.init.zeros_(sub.bias)


def rescale_residual(projections: Iterable[nn.Linear], n_residuals: int) -> None:
    """GPT-2 scheme as fla applies it: weight from PyTorch's default kaiming-uniform, divided by sqrt(n)."""
    for projection in projections:
        nn.init.kaiming_uniform_(projection.weight, a=math.sqrt(5))
        with torch.no_grad():
            projection.weight /= math.sqrt(n_residuals)
        projection.weight._residual_rescale = n_residuals  # read by tests/models/test_init.py


def normal_rule(types: tuple) -> Callable[..., None]:
    """A policy's backbone step: ``types`` ~ N(0, 0.02) with zero biases, norms at 1, then the rescaling."""

    def initialise(module: nn.Module, rescaled=(), n_residuals: int = 0) -> None:
        normal_linear_layers(module, types)
        reset_norms(module)
        rescale_residual(rescaled, n_residuals)

    return initialise


fla_backbone = normal_rule((nn.Linear, nn.Conv1d, nn.Embedding))
recbole_backbone = ttt_backbone = normal_rule((nn.Linear, nn.Embedding))  # both leave nn.Conv1d at PyTorch's default


def gru4rec_backbone(module: nn.Module, rescaled=(), n_residuals: int = 0) -> None:
    """RecBole's GRU4Rec: the first layer's weights of every nn.GRU xavier-uniform, the rest as drawn."""
    for sub in module.modules():
        if isinstance(sub, nn.GRU):
            nn.init.xavier_uniform_(sub.weight_ih_l0)
            nn.init.xavier_uniform_(sub.weight_hh_l0)
    reset_norms(module)
    rescale_residual(rescaled, n_residuals)


def own_layers_backbone(module: nn.Module, rescaled=(), n_residuals: int = 0) -> None:
    """HSTU, Titans: the reference has no global rule; each layer draws its own weights in its constructor."""
    reset_norms(module)
    rescale_residual(rescaled, n_residuals)


def truncated_normal_(weight: torch.Tensor, std: float, bound: float = 2.0) -> torch.Tensor:
    """N(0, std) truncated at +-bound std (generative-recommenders' ``truncated_normal``: 2 std)."""
    return nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-bound * std, b=bound * std)


def normal_embedding(std: float) -> Callable[[nn.Embedding], None]:
    return lambda embedding: nn.init.normal_(embedding.weight, mean=0.0, std=std)


def default_embedding(embedding: nn.Embedding) -> None:
    nn.init.normal_(embedding.weight)  # nn.Embedding's own default, N(0, 1)


def xavier_normal_embedding(embedding: nn.Embedding) -> None:
    nn.init.xavier_normal_(embedding.weight)


def linear_head_embedding(embedding: nn.Embedding) -> None:
    """What nn.Linear(d, n) draws for its weight: U(+-1/sqrt(d))."""
    bound = embedding.weight.shape[1] ** -0.5
    nn.init.uniform_(embedding.weight, -bound, bound)


# std of a normal truncated at +-2 std, as a fraction of the untruncated std
TRUNCATED_2STD = math.sqrt(1 - 4 * math.exp(-2) / math.sqrt(2 * math.pi) / math.erf(2 / math.sqrt(2)))


@dataclass(frozen=True)
class InitPolicy:
    """One reference's initialisation. ``item_std(rows, d)`` is the std an item table of ``rows`` x ``d`` is
    drawn with (for tests)."""

    name: str
    source: str
    backbone: Callable[..., None]
    item_embedding: Callable[[nn.Embedding], None]
    position_embedding: Callable[[nn.Embedding], None]
    item_std: Callable[[int, int], float]


POLICIES: dict[str, InitPolicy] = {
    "fla": InitPolicy(
        "fla",
        "fla-org/flash-linear-attention fla/models/{gated_deltanet,mamba2,transformer}/modeling_*.py _init_weights",
        fla_backbone, normal_embedding(INITIALIZER_RANGE), normal_embedding(INITIALIZER_RANGE),
        lambda rows, d: INITIALIZER_RANGE),
    "recbole": InitPolicy(
        "recbole", "RUCAIBox/RecBole recbole/model/sequential_recommender/sasrec.py _init_weights",
        recbole_backbone, normal_embedding(INITIALIZER_RANGE), normal_embedding(INITIALIZER_RANGE),
        lambda rows, d: INITIALIZER_RANGE),
    "recbole-gru4rec": InitPolicy(
        "recbole-gru4rec", "RUCAIBox/RecBole recbole/model/sequential_recommender/gru4rec.py _init_weights",
        gru4rec_backbone, xavier_normal_embedding, xavier_normal_embedding, lambda rows, d: math.sqrt(2 / (rows + d))),
    "hstu": InitPolicy(
        "hstu", "facebookresearch/generative-recommenders generative_recommenders/research/modeling/sequential/"
        "{hstu,embedding_modules}.py",
        own_layers_backbone, lambda embedding: truncated_normal_(embedding.weight, INITIALIZER_RANGE),
        xavier_normal_embedding, lambda rows, d: INITIALIZER_RANGE * TRUNCATED_2STD),
    "ttt": InitPolicy(
        "ttt", "test-time-training/ttt-lm-pytorch ttt.py TTTPreTrainedModel._init_weights",
        ttt_backbone, normal_embedding(INITIALIZER_RANGE), normal_embedding(INITIALIZER_RANGE),
        lambda rows, d: INITIALIZER_RANGE),
    "titans": InitPolicy(
        "titans", "lucidrains/titans-pytorch titans_pytorch/{neural_memory,memory_models,mac_transformer}.py",
        own_layers_backbone, linear_head_embedding, default_embedding, lambda rows, d: (3 * d) ** -0.5),
    "torch": InitPolicy(
        "torch", "PyTorch's defaults (the authors' code of gpr-prism/prism applies no initialisation of its own)",
        own_layers_backbone, linear_head_embedding, default_embedding, lambda rows, d: (3 * d) ** -0.5),
    "none": InitPolicy(
        "none", "no parameters", own_layers_backbone, default_embedding, default_embedding, lambda rows, d: 1.0),
}


def policy_of(backbone: nn.Module) -> InitPolicy:
    """The policy a backbone declares with its class attribute ``init_policy``; a clear error without one."""
    name = getattr(type(backbone), "init_policy", None)
    if name is None:
        raise TypeError(f"backbone {type(backbone).__module__}.{type(backbone).__qualname__} declares no init_policy; "
                        f"set the class attribute init_policy to one of {sorted(POLICIES)} "
                        "(see prism_rec/models/init.py)")
    if name not in POLICIES:
        raise ValueError(f"{type(backbone).__qualname__}.init_policy = {name!r} is not one of {sorted(POLICIES)}")
    return POLICIES[name]


def apply_init(backbone: nn.Module, rescaled: Iterable[nn.Linear] = (), n_residuals: int = 0) -> None:
    """Initialise ``backbone`` by its declared policy; call it as the last line of the backbone's __init__."""
    rescaled = list(rescaled)
    if rescaled and n_residuals < 1:
        raise ValueError("rescaled projections need n_residuals >= 1")
    policy_of(backbone).backbone(backbone, rescaled=rescaled, n_residuals=n_residuals)


def init_embeddings(policy: InitPolicy, item_embedding: nn.Embedding,
                    position_embedding: nn.Embedding | None = None) -> None:
    """The shared item table (padding row 0 zeroed) and the learned positions, as ``policy``'s reference."""
    policy.item_embedding(item_embedding)
    with torch.no_grad():
        item_embedding.weight[0].zero_()
    if position_embedding is not None:
        policy.position_embedding(position_embedding)
