"""The probe model: token embedding -> [learned positions] -> backbone -> norm -> vocabulary head.

Backbones come from the main registry (``prism_rec.registry``) or from ``PROBE_BACKBONES``, the presets
built for the probes alone: ``transformer-authors-probe``, the Transformer of the authors' probe script
(baselines/authors_probe_transformer.py). It keeps the backbone contract (tests/experiments/test_probes_v2.py runs
tests/models/test_backbone_contract.py and the init check on it) but stays out of the main registry, so that
``prism-rec headline run --models all`` does not train it on the recommendation grid.
"""

from __future__ import annotations

import ast

import torch
from torch import nn

from ...baselines.authors_probe_transformer import AuthorsProbeTransformer
from ...registry import backbone_entry, build_backbone

PROBE_BACKBONES = {"transformer-authors-probe": AuthorsProbeTransformer}


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
    if name in PROBE_BACKBONES:
        return name, options
    try:
        backbone_entry(name)
    except KeyError as error:
        raise ValueError(f"option --models: {error.args[0]} (or the probe preset(s) "
                         f"{', '.join(PROBE_BACKBONES)})") from None
    return name, options


def build_probe_backbone(name: str, d_model: int, **options) -> nn.Module:
    """A backbone of ``PROBE_BACKBONES`` or of the main registry."""
    if name in PROBE_BACKBONES:
        return PROBE_BACKBONES[name](d_model=d_model, **options)
    return build_backbone(name, d_model=d_model, **options)


class ProbeModel(nn.Module):
    """Final-token classifier over the task vocabulary on top of a backbone, as the authors' script's
    ``UniversalModel`` wraps its mixers: token embedding, backbone, LayerNorm, bias-free vocabulary head.

    The backbone starts from its reference initialisation (``prism_rec/models/init.py``, applied by its own
    constructor); the token embedding and the head keep PyTorch's defaults (N(0, 1) and U(+-1/sqrt(d))), as
    in the authors' script, for every backbone. Learned absolute positions (nn.Embedding's default) are
    added only for backbones that set ``wants_positions`` (SASRec); the others carry position through
    recurrence, convolution or rotary embeddings. Sequences are never padded, and every task's target is its
    final token, so only the final position is read.
    """

    def __init__(self, model_spec: str, vocab_size: int, seq_len: int, d_model: int, n_layers: int, n_heads: int):
        super().__init__()
        name, options = parse_model_spec(model_spec)
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.backbone = build_probe_backbone(name, d_model, n_layers=n_layers, n_heads=n_heads, dropout=0.0,
                                             **options)
        wants_positions = bool(getattr(self.backbone, "wants_positions", False))
        self.positions = nn.Embedding(seq_len, d_model) if wants_positions else None
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tokens [B, T] -> logits [B, vocab] at the final position."""
        h = self.embedding(tokens)  # [B, T, d]
        if self.positions is not None:
            h = h + self.positions.weight[: tokens.shape[1]]
        mask = torch.ones_like(tokens, dtype=torch.bool)
        h = self.backbone(h, mask)  # [B, T, d]
        return self.head(self.norm(h[:, -1]))  # [B, vocab]

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the final-token logits: tokens [B, T], targets [B] -> scalar (the training loss)."""
        return nn.functional.cross_entropy(self(tokens), targets)
