"""The settings of one training run (``TrainConfig``) and the short hash that names a run by them."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

from .candidates import parse_sampled
from .compile import COMPILE_MODES
from .metrics import CUTOFFS

LOSSES = ("full", "sampled")
PRECISIONS = ("bf16", "fp32")  # bf16: bf16 autocast on CUDA; fp32: fp32 everywhere, TF32 off (CPU is always fp32)


@dataclass
class TrainConfig:
    """Every knob of one training run; all of it is logged as MLflow params."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    dropout: float = 0.1
    max_len: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    epochs: int = 50
    patience: int = 5
    loss: str = "full"
    n_negatives: int = 1024
    eval_batch_size: int = 256
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    backbone_options: dict = field(default_factory=dict)
    precision: str = "bf16"
    # the training step through torch.compile (prism_rec/training/compile.py): auto (the fastest mode verified for
    # the backbone on CUDA, eager elsewhere), off, inductor, cudagraphs, graphs
    compile: str = "auto"
    # evaluation (metrics.py, candidates.py): the Hit/NDCG cutoffs reported besides the table's 10, 200, 500;
    # history items removed from the candidates; "uniform:N" / "popularity:N" sampled negatives ("none": all items)
    cutoffs: tuple[int, ...] = CUTOFFS
    exclude_history: bool = False
    sampled: str = "none"

    def __post_init__(self):
        self.cutoffs = tuple(self.cutoffs)  # a list read back from JSON names the same run

    def validate(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"option --loss: {self.loss!r} is not one of {LOSSES}")
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"option --compile: {self.compile!r} is not one of {COMPILE_MODES}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"option --precision: {self.precision!r} is not one of {PRECISIONS}")
        for name in ("d_model", "n_layers", "max_len", "batch_size", "epochs", "eval_batch_size", "n_negatives"):
            if getattr(self, name) < 1:
                raise ValueError(f"option --{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        for name in ("lr", "weight_decay"):  # a rate of 0 trains nothing (pop's runs record it)
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"option --{name.replace('_', '-')}: must be a finite number >= 0, got {value}")
        if self.patience < 0:
            raise ValueError(f"option --patience: must be >= 0, got {self.patience}")
        if not self.cutoffs or not all(isinstance(k, int) and k >= 1 for k in self.cutoffs):
            raise ValueError(f"option --cutoffs: every cutoff must be an integer >= 1, got {list(self.cutoffs)}")
        parse_sampled(self.sampled)

    def params(self) -> dict:
        flat = asdict(self)
        options = flat.pop("backbone_options")
        flat.pop("progress")
        flat.update({f"backbone.{key}": value for key, value in sorted(options.items())})
        return flat

    def identity(self) -> dict:
        """The params that define a run's result, i.e. all but the device: what a resumed run must match.
        The precision and the evaluation settings count only when not at their defaults, so runs made before
        they were options keep their hashes."""
        params = self.params()
        params.pop("device")
        params.pop("compile")  # how the step runs, like the device: runs keep their hashes and may resume across it
        defaults = TrainConfig()
        for name in ("precision", "cutoffs", "exclude_history", "sampled"):  # options added later, at their default
            if params[name] == getattr(defaults, name):
                params.pop(name)
        return params


def config_hash(values: dict) -> str:
    """Short stable hash of a JSON-serialisable configuration (key order does not matter)."""
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
