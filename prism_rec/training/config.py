"""The settings of one training run (``TrainConfig``) and the short hash that names a run by them."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

from .candidates import parse_sampled
from .compile import COMPILE_MODES
from .devices import ONE_DEVICE_HELP
from .metrics import CUTOFFS

LOSSES = ("full", "sampled")
PRECISIONS = ("bf16", "fp32")  # bf16: bf16 autocast on CUDA; fp32: fp32 everywhere, TF32 off (CPU is always fp32)


def knob(default, help: str, choices: tuple | None = None, per_dataset: bool = False, parse=None):
    """A ``TrainConfig`` field with what ``prism-rec bench`` says of it: its help, its choices, whether an
    unset option takes the dataset's value (``per_dataset``) instead of ``default``, and the function that reads
    its text (``parse``; default: the field's type). Bench's options are made from these fields, so a new field
    is a new option."""
    return field(default=default, metadata={"help": help, "choices": choices, "per_dataset": per_dataset,
                                            "parse": parse})


def parse_cutoffs(text: str) -> tuple[int, ...]:
    """'5,10,20' -> (5, 10, 20)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from None


@dataclass
class TrainConfig:
    """Every knob of one training run; all of it is logged as MLflow params. Fields made with :func:`knob`
    are options of ``prism-rec bench`` (a bool that defaults to True is ``--no-<name>``)."""

    d_model: int = knob(64, "width of the item embeddings and of the backbone")
    n_layers: int = knob(2, "backbone layers")
    n_heads: int = knob(2, "heads of each backbone layer")
    dropout: float = knob(0.1, "dropout rate")
    max_len: int = knob(200, "training window (default: the dataset's)", per_dataset=True)
    batch_size: int = knob(128, "training windows per step")
    lr: float = knob(1e-3, "AdamW learning rate")
    weight_decay: float = knob(0.0, "AdamW weight decay")
    epochs: int = knob(50, "at most this many training epochs")
    patience: int = knob(5, "stop once the best validation AUC is this many epochs old")
    loss: str = knob("full", "full: cross-entropy over every item; sampled: over --n-negatives sampled items",
                     LOSSES)
    n_negatives: int = knob(1024, "negatives per position of the sampled loss")
    eval_batch_size: int = knob(256, "histories per evaluation batch")
    seed: int = 0
    device: str = knob("auto", ONE_DEVICE_HELP)
    progress: bool = knob(True, "no progress bars")
    backbone_options: dict = field(default_factory=dict)
    precision: str = knob("bf16", "bf16: bf16 autocast on CUDA (default); fp32: fp32 with TF32 off (CPU is always "
                                  "fp32)", PRECISIONS)
    compile: str = knob("auto", "the training step through torch.compile (prism_rec/training/compile.py): auto (the "
                                "compiled mode verified for the backbone on CUDA, VERIFIED_MODES; eager elsewhere), "
                                "off, or a mode",
                        COMPILE_MODES)
    # evaluation (metrics.py, candidates.py)
    cutoffs: tuple[int, ...] = knob(CUTOFFS, "Hit@K and NDCG@K cutoffs reported besides the table's 10,200,500 "
                                             "(comma list)", parse=parse_cutoffs)
    exclude_history: bool = knob(False, "rank each target only against the items outside the user's history "
                                        "(as RecBole)")
    sampled: str = knob("none", "none (all items, default), or uniform:N / popularity:N sampled negatives per case "
                                "(for comparison with papers that sample only)")

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
        """Every field but the progress switch, backbone options as ``backbone.<name>``; lists where the field is
        a tuple (as a run record's JSON reads them back)."""
        flat = {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}
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
        defaults = TrainConfig().params()
        for name in ("precision", "cutoffs", "exclude_history", "sampled"):  # options added later, at their default
            if params[name] == defaults[name]:
                params.pop(name)
        return params


def config_hash(values: dict) -> str:
    """Short stable hash of a JSON-serialisable configuration (key order does not matter)."""
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
