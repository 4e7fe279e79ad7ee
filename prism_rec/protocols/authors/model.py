"""The authors' link-prediction model around one of this suite's registered backbones.

Follows rec/models/SASRec.py:44-157 (the same encoder in rec/models/prism.py:100-149 and GDeltanet.py:
60-190), rec/models/modules.py:7-68 and rec/train_link_prediction.py:223-229 (gpr-prism/prism 435f392):

- source: the tokens [the user itself at the query time, its neighbours (data.EdgeTask.neighbours)], 1 + k
  of them; each token concatenates four projections of width ``channel`` (Linear with bias): the node's
  feature, the edge's feature, a cosine time encoding of (query time - token time) and a learned ID
  embedding (nn.Embedding, N(0, 1), then a Linear); the backbone runs 4 x channel wide over them and the
  last position is projected to the source width (``output_layer_src``);
- destination: concat(the node projection of the item's feature, the ID projection of its embedding) ->
  Linear to the destination width; no sequence (SASRec.py:120-135);
- scorer: MergeLayer, concat(src, dst) -> Linear(., channel) -> ReLU -> Linear(channel, 1);
- widths: ``per-backbone`` is the authors' choice: 768 (the feature width) for SASRec and PRISM, its
  ablations included (SASRec.py:59-60, prism.py:100-101, prism_ablate_*.py:102-103; ``WIDE_HEAD_MODELS``),
  the channel width 64 for GDN and the others (GDeltanet.py:104-105,
  HSTU.py:69-70, MAMBA2.py:81-82, TTT.py:64-65, TITANS.py:75-76); an integer gives every model that width;
- time encoding: cos(t w + b), w_i = 10^(-9 i / (d - 1)), b = 0, both trained (modules.py:7-39), d = 100.

The gaps are exact here (float64 times, the difference cast to float32); theirs subtract float32 neighbour times
(utils.py:179, SASRec.py:153), which on unix-second clocks (ml-100k, movies-fedcsr) are off by up to about a
minute, noise in the highest-frequency channels only; position times are exact in both.

Differences: the backbone is the suite's registered one (``prism_rec.registry``) at width 4 x channel with
its own initialisation: ``sasrec`` is the original SASRec block (query LayerNorm, ReLU feed-forward,
``baselines/sasrec.py``), not the authors' pre-norm GELU TransformerEncoder (SASRec.py:170-214), and the
``-authors`` presets stand for their GDN, PRISM and Mamba-2 mixers (results/paper_vs_code.md); the
backbone is fed a mask of all real tokens: the padding slots are node-0 tokens as SASRec.py and prism.py process them
(GDeltanet.py:156-158 masks them instead); backbones that ask for learned positions get none (the authors'
SASRec has none: the time encoding is its only order signal). ``null`` has no token mixing: the output at
a position is its own token plus the user token (``NullMixer``; the registered ``null`` of baselines/null.py
is the next-item protocol's, whose sequences have no user token to add).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch
from torch import nn

from ...errors import OptionError
from ...experiments import tuning
from ...kernels.delta_scan import BACKENDS as SCAN_BACKENDS
from ...kernels.delta_scan import TRITON_BACKENDS, auto_backend
from ...registry import SCAN_OPTION, build_backbone, list_backbones, runs_scan

CHANNEL = 64          # --channel_embedding_dim in rec/README.md's commands
TIME_DIM = 100        # --time_feat_dim default, load_configs.py:36
# The backbones with 768-wide heads, and with them their presets (tuning.tuning_base: the prism-* ablations and
# variants): SASRec.py:59-60, prism.py:100-101, and the ablation files prism_ablate_{l1, no_nonlinear,
# no_shortconv, no_gain}.py:102-103 (prism-L1, prism-nogelu, prism-noconv, prism-nogain); prism-L0 and
# prism-eq18, settings of the same PRISM model with no file of their own, take prism.py's width too.
WIDE_HEAD_MODELS = ("sasrec", "prism", "prism-authors")
NULL = "null"
POP = "pop"


def model_names() -> list[str]:
    """The models this protocol trains: every registered backbone (``pop`` among them, the floor) and ``null``."""
    return sorted({*list_backbones(), NULL, POP})


def check_model(name: str, option: str = "--model") -> str:
    if name not in model_names():
        raise OptionError(f"option {option}: unknown model {name!r}; known: {', '.join(model_names())}")
    return name


def head_width(model: str, head: str, feature_dim: int, channel: int = CHANNEL, option: str = "--head-width") -> int:
    """The source and destination width: the authors' per-backbone choice, or the integer ``head``."""
    if head == "per-backbone":
        return feature_dim if tuning.tuning_base(model) in WIDE_HEAD_MODELS else channel
    try:
        width = int(head)
    except ValueError:
        width = 0
    if width < 1:
        raise OptionError(f"option {option}: expected per-backbone or a positive integer, got {head!r}")
    return width


def check_scan_backend(backend: str, model: str | None = None, device: torch.device | None = None,
                       option: str = "--scan-backend") -> str:
    """``backend`` if it is one of the delta scan's backends (kernels/delta_scan.py), ``model`` (when given)
    runs the scan (registry.runs_scan) or ``backend`` is "auto", and a Triton backend has Triton and, on
    ``device`` (when given), CUDA (or Triton's interpreter); OptionError naming ``option`` otherwise."""
    if backend not in SCAN_BACKENDS:
        raise OptionError(f"option {option}: expected one of {', '.join(SCAN_BACKENDS)}, got {backend!r}")
    if model is not None and backend != "auto" and not runs_scan(model):
        scanned = ", ".join(name for name in list_backbones() if runs_scan(name))
        raise OptionError(f"option {option}: {model} runs no delta scan (those that do: {scanned})")
    if backend in TRITON_BACKENDS:
        if importlib.util.find_spec("triton") is None:
            raise OptionError(f"option {option}: {backend} needs Triton, which is not installed")
        if device is not None and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise OptionError(f"option {option}: {backend} needs a CUDA device (or TRITON_INTERPRET=1), "
                              f"got --device {device}")
    return backend


def scan_backend_used(model: str, backend: str, device: torch.device, tokens: int) -> str | None:
    """The scan backend ``model`` trains with for ``backend`` on ``device`` over ``tokens`` positions
    ("auto" resolved as delta_scan resolves it); None for a model without the scan."""
    if not runs_scan(model):
        return None
    return auto_backend(device.type == "cuda", tokens) if backend == "auto" else backend


class TimeEncoder(nn.Module):
    """cos(t w + b) [..., d] of time gaps t [...] (modules.py:7-39)."""

    def __init__(self, dim: int = TIME_DIM):
        super().__init__()
        self.w = nn.Linear(1, dim)
        with torch.no_grad():
            self.w.weight.copy_(torch.from_numpy(1 / 10 ** np.linspace(0, 9, dim, dtype=np.float32)).reshape(dim, 1))
            self.w.bias.zero_()

    def forward(self, gaps: torch.Tensor) -> torch.Tensor:
        return torch.cos(self.w(gaps.unsqueeze(-1)))


class MergeLayer(nn.Module):
    """concat(src [*, W], dst [*, W]) -> Linear(2W, hidden) -> ReLU -> Linear(hidden, 1) (modules.py:42-68)."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(2 * width, hidden)
        self.fc2 = nn.Linear(hidden, 1)
        self.width = width

    def forward(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(torch.cat([src, dst], dim=-1)))).squeeze(-1)

    def against_all(self, src: torch.Tensor, dst_all: torch.Tensor, block: int = 4096) -> torch.Tensor:
        """Scores [B, N] of every source [B, W] against every destination [N, W]: fc1 splits into
        W_s src + W_d dst, W_d dst is computed once, relu(a + d) w2 in blocks of items."""
        w_src, w_dst = self.fc1.weight[:, :self.width], self.fc1.weight[:, self.width:]
        a = src @ w_src.T + self.fc1.bias                    # [B, H]
        d = dst_all @ w_dst.T                                # [N, H]
        w2 = self.fc2.weight[0]                              # [H]
        blocks = [torch.relu(a[:, None, :] + d[None, start:start + block]) @ w2
                  for start in range(0, d.shape[0], block)]  # [B, n] each
        return torch.cat(blocks, dim=1) + self.fc2.bias


class NullMixer(nn.Module):
    """No token mixing: position t gets its token plus the first (user) token [B, T, d]."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x + x[:, :1]


class LinkModel(nn.Module):
    """Source encoder, destination encoder and MergeLayer of the authors' code (module docstring).
    ``scan_backend``: the delta scan's backend (kernels/delta_scan.py) in backbones that run it (registry.runs_scan);
    the backends compute the same recurrence, so it picks kernels, not a setting of the run."""

    def __init__(self, model: str, node_features: torch.Tensor, edge_features: torch.Tensor, width: int,
                 channel: int = CHANNEL, time_dim: int = TIME_DIM, n_layers: int = 2, n_heads: int = 2,
                 dropout: float = 0.1, scan_backend: str = "auto"):
        super().__init__()
        self.register_buffer("node_features", node_features, persistent=False)   # [N, F]
        self.register_buffer("edge_features", edge_features, persistent=False)   # [E + 1, F]
        feature_dim = node_features.shape[1]
        self.time_encoder = TimeEncoder(time_dim)
        self.id_embedding = nn.Embedding(node_features.shape[0], channel)
        self.project = nn.ModuleDict({
            "node": nn.Linear(feature_dim, channel), "edge": nn.Linear(edge_features.shape[1], channel),
            "time": nn.Linear(time_dim, channel), "id": nn.Linear(channel, channel),
        })
        scan = {SCAN_OPTION: check_scan_backend(scan_backend, model)} if runs_scan(model) else {}
        self.backbone = (NullMixer() if model == NULL else
                         build_backbone(model, d_model=4 * channel, n_layers=n_layers, n_heads=n_heads,
                                        dropout=dropout, **scan))
        self.output_src = nn.Linear(4 * channel, width)
        self.output_dst = nn.Linear(2 * channel, width)
        self.scorer = MergeLayer(width, channel)

    def source(self, nodes: torch.Tensor, edges: torch.Tensor, gaps: torch.Tensor) -> torch.Tensor:
        """Source embeddings [B, W] from token node ids, edge ids [B, T] and time gaps [B, T]."""
        tokens = torch.cat([
            self.project["node"](self.node_features[nodes]), self.project["edge"](self.edge_features[edges]),
            self.project["time"](self.time_encoder(gaps)), self.project["id"](self.id_embedding(nodes)),
        ], dim=-1)                                                                 # [B, T, 4 channel]
        mask = torch.ones(nodes.shape, dtype=torch.bool, device=nodes.device)     # [B, T]
        return self.output_src(self.backbone(tokens, mask)[:, -1])

    def destination(self, items: torch.Tensor) -> torch.Tensor:
        """Destination embeddings [M, W] of item node ids [M]."""
        return self.output_dst(torch.cat([self.project["node"](self.node_features[items]),
                                          self.project["id"](self.id_embedding(items))], dim=-1))
