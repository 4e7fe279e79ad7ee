"""GRU4Rec (Hidasi et al., ICLR 2016) as RecBole builds it: RUCAIBox/RecBole
recbole/model/sequential_recommender/gru4rec.py (recbole 1.2.1), defaults from
recbole/properties/model/GRU4Rec.yaml.

RecBole's model: item embedding (width d) -> dropout -> ``nn.GRU(d, hidden_size, num_layers, bias=False)``
-> dense ``Linear(hidden_size, d)`` -> the output at the last item, scored against the item table. Each GRU
layer, from h_0 = 0 (W_*, U_* bias-free; gates in PyTorch's order r, z, n):

    r_t = sigmoid(W_r x_t + U_r h_{t-1}),  z_t = sigmoid(W_z x_t + U_z h_{t-1})
    n_t = tanh(W_n x_t + r_t * (U_n h_{t-1})),  h_t = (1 - z_t) * n_t + z_t * h_{t-1}

Initialisation (``init_policy = "recbole-gru4rec"``, ``prism_rec.models.init``), as RecBole's
``GRU4Rec._init_weights``: the item table xavier-normal; the first GRU layer's ``weight_ih_l0`` and
``weight_hh_l0`` xavier-uniform; deeper GRU layers and the dense projection keep PyTorch's defaults.

Where this backbone differs from RecBole's model, and why:
- It is the token mixer between the suite's shared item table and shared head
  (``prism_rec.models.recommender``), like every backbone. The item table, the dropout on it and the tied
  scores are the recommender's: RecBole's embedding dropout is the recommender's ``embedding_dropout`` at
  the suite's ``dropout`` (the same for every backbone), not GRU4Rec.yaml's ``dropout_prob`` 0.3. RecBole's
  GRU has no dropout between layers and neither has this one: ``dropout`` is accepted for the common
  interface, and so is ``n_heads`` (a GRU has no heads).
- The recommender's final LayerNorm follows the dense projection, as it follows every backbone; RecBole
  scores the dense output directly.
- Every position is an output: the suite trains the next item at every position of a window, RecBole
  reads the last position of each prefix and makes every prefix a training sequence (its data
  augmentation), which asks for the same targets.
- Sequences are left-padded here, right-padded in RecBole. Padded inputs are zeroed, and a bias-free GRU
  keeps a zero state on a zero input (r = z = 1/2, n = 0, h = 0), so the state at a sequence's first item
  is RecBole's h_0 = 0 and left padding changes nothing. Outputs at padded positions are zeroed (the
  dense bias would put its value there).
- ``n_layers`` is the GRU's ``num_layers``; its default is GRU4Rec.yaml's 1, but like every backbone's it
  is replaced by the shared ``n_layers`` a training run passes (``TrainConfig.n_layers``).
- The item table's padding row is zeroed (RecBole's xavier-normal draws row 0 too; it is never read).
"""

from __future__ import annotations

import torch
from torch import nn

from prism_rec.models.init import apply_init
from prism_rec.registry import register_backbone


@register_backbone("gru4rec", description="GRU4Rec: a GRU over the item sequence (Hidasi et al. 2016, as RecBole)")
class GRU4Rec(nn.Module):
    """Bias-free GRU over the item embeddings, then a dense projection back to d (see the module docstring)."""

    init_policy = "recbole-gru4rec"

    def __init__(self, d_model: int = 64, n_layers: int = 1, n_heads: int = 2, dropout: float = 0.1,
                 hidden_size: int = 128):
        super().__init__()
        self.gru = nn.GRU(d_model, hidden_size, num_layers=n_layers, bias=False, batch_first=True)
        self.dense = nn.Linear(hidden_size, d_model)
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        hidden, _ = self.gru(x * keep)  # [B, T, hidden_size]
        return self.dense(hidden) * keep
