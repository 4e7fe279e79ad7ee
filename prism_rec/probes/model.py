"""The probe model: token embedding -> [learned positions] -> registered backbone -> norm -> vocabulary head."""

from __future__ import annotations

import ast

import torch
from torch import nn

from ..registry import backbone_entry, build_backbone


def parse_model_spec(spec: str) -> tuple[str, dict]:
    """'prism:L=2:gain=off' -> ('prism', {'L': 2, 'gain': 'off'}); values are Python literals or strings."""
    name, *assignments = spec.strip().split(":")
    options = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator or not key:
            raise ValueError(f"option --models: expected name:key=value in {spec!r}, got {assignment!r}")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    try:
        backbone_entry(name)
    except KeyError as error:
        raise ValueError(f"option --models: {error.args[0]}") from None
    return name, options


class ProbeModel(nn.Module):
    """Final-token classifier over the task vocabulary on top of any registered backbone.

    Learned absolute positions are added only for backbones that set ``wants_positions`` (SASRec); the
    others carry position through recurrence, convolution or rotary embeddings. Sequences are never padded.
    """

    def __init__(self, model_spec: str, vocab_size: int, seq_len: int, d_model: int, n_layers: int, n_heads: int):
        super().__init__()
        name, options = parse_model_spec(model_spec)
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.backbone = build_backbone(name, d_model=d_model, n_layers=n_layers, n_heads=n_heads, dropout=0.0,
                                       **options)
        wants_positions = bool(getattr(self.backbone, "wants_positions", False))
        self.positions = nn.Embedding(seq_len, d_model) if wants_positions else None
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Tokens [B, T] -> logits [N, vocab] at the N (row, time) pairs where ``positions`` [B, T] is True."""
        h = self.embedding(tokens)  # [B, T, d]
        if self.positions is not None:
            h = h + self.positions.weight[: tokens.shape[1]]
        mask = torch.ones_like(tokens, dtype=torch.bool)
        h = self.backbone(h, mask)  # [B, T, d]
        return self.head(self.norm(h[positions]))  # [N, vocab]
