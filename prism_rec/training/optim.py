"""Weight-decay groups for AdamW: what the reference implementations exempt from decay.

``parameter_groups(model, weight_decay)`` returns (at most) two AdamW parameter groups, every trainable
parameter in exactly one, in ``model.named_parameters()`` order:

- ``{"params": [...], "weight_decay": 0.0}`` for the exempt ones:
  * parameters flagged ``_no_weight_decay`` (the convention of fla and the official Mamba: A_log, dt_bias,
    D; here also TTT's per-head LayerNorm scale),
  * every parameter of a norm (any module whose class name ends in "Norm": LayerNorm, RMSNorm,
    GatedRMSNorm, ...),
  * every bias (a parameter whose name ends in "bias": Linear/Conv biases, dt_bias, TTT's inner bias and
    position-scale bias),
  * every other parameter with fewer than 2 dimensions (per-head scalars such as D, HSTU's relative
    attention bias), the rule nanoGPT's ``configure_optimizers`` uses for biases and norms;
- ``{"params": [...], "weight_decay": weight_decay}`` for the rest (matrices, conv
  kernels, embeddings, the TTT/Titans inner-model initial weights, persistent memory).

Embeddings: nanoGPT (karpathy/nanoGPT model.py ``configure_optimizers``) decays every parameter with 2 or
more dimensions, the token embedding included (its older minGPT excluded nn.Embedding); RecBole
(recbole/trainer/trainer.py ``_build_optimizer``) passes all of ``model.parameters()`` to one optimizer
with one ``weight_decay``, so it decays embeddings, biases and norms alike; fla only flags the
``_no_weight_decay`` parameters and leaves grouping to the training framework (fla's comment on dt_bias
points at a grouping that also skips names ending in "bias"). We decay the item table and the positions,
as nanoGPT does its tied token embedding. Frozen parameters (``requires_grad`` False) are left out; a group
with no parameter is dropped (a model without trainable parameters gets []).

Use: ``torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr)``.
"""

from __future__ import annotations

from torch import nn

from ..models.init import is_norm


def exempt_from_decay(name: str, parameter: nn.Parameter, in_norm: bool) -> bool:
    """Whether the parameter ``name`` goes to the weight-decay-0 group (see the module docstring)."""
    return (getattr(parameter, "_no_weight_decay", False) or in_norm or name.endswith("bias")
            or parameter.ndim < 2)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: exempt parameters with weight_decay 0.0, the others with ``weight_decay``."""
    norm_parameters = {id(p) for module in model.modules() if is_norm(module) for p in module.parameters()}
    exempt, decayed = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            exempted = exempt_from_decay(name, parameter, id(parameter) in norm_parameters)
            (exempt if exempted else decayed).append(parameter)
    return [dict(params=params, weight_decay=decay)
            for params, decay in ((exempt, 0.0), (decayed, float(weight_decay))) if params]
