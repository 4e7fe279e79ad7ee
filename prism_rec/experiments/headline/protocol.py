"""The headline benchmark's protocol (headline-v2): its datasets, seeds and settings, the files it
writes, and the training settings of one cell; shared by the runs (headline/driver.py), the reports
(headline/report/) and the later protocol (headline/v3.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ... import registry
from ...training.config import TrainConfig
from .. import tuning

PROTOCOL = "headline-v2"
DATASETS = ("ml-100k", "yelp-iclrec", "electronics-gerec", "books-dealrec", "movies-long", "movies-fedcsr")
SEEDS = (0, 1, 2)
SETTINGS = {"d_model": 64, "n_layers": 2, "n_heads": 2, "dropout": 0.1, "batch_size": 256, "epochs": 200,
            "patience": 10}
LAYERS = {"titans": 1,  # one Titans layer is a memory block plus an attention block
          "gru4rec": 1}  # RecBole's GRU4Rec.yaml: num_layers 1
MANIFEST_NAME = "headline_v2_manifest.jsonl"
CASE_RANKS_NAME = "headline_v2_case_ranks.jsonl"
WIDTH = "d64"  # the name of SETTINGS' width; manifest lines without a "width" key have it


@dataclass(frozen=True)
class Width:
    """A width preset: d_model and heads, on ``models`` and ``datasets`` only (None: every one asked for)."""

    name: str
    d_model: int
    n_heads: int
    models: tuple[str, ...] | None = None
    datasets: tuple[str, ...] | None = None

    @property
    def settings(self) -> dict:
        return {"d_model": self.d_model, "n_heads": self.n_heads}


@dataclass(frozen=True)
class HeadlineProtocol:
    """What a headline protocol trains and where it writes: its name (each manifest line's "protocol"), seeds,
    rate grid, width presets and files."""

    name: str
    seeds: tuple[int, ...]
    grid: tuning.TuningGrid | tuple[float, ...]
    widths: dict[str, Width]
    manifest_name: str
    case_ranks_name: str


BASE_WIDTH = Width(WIDTH, SETTINGS["d_model"], SETTINGS["n_heads"])
V2 = HeadlineProtocol(PROTOCOL, SEEDS, tuning.LR_GRID, {WIDTH: BASE_WIDTH}, MANIFEST_NAME, CASE_RANKS_NAME)


def width_of(entry: dict) -> str:
    """The width preset of a manifest line (lines written before widths existed are SETTINGS')."""
    return entry.get("width", WIDTH)


def compile_of(entry: dict) -> str:
    """The compile mode a manifest line trained in (lines written before the compile option trained eager)."""
    return entry.get("compile") or "off"


def training_config(dataset: str, model: str, seed: int, device: str, overrides: dict, lr: float) -> TrainConfig:
    """The headline settings for one cell at rate ``lr``: SETTINGS, the dataset's default window,
    ``overrides`` last."""
    values = {**SETTINGS, "n_layers": LAYERS.get(model, SETTINGS["n_layers"]), "lr": lr,
              "max_len": registry.get_dataset(dataset).max_len, **overrides}
    return TrainConfig(**values, seed=seed, device=device, progress=False)


def backbone_parameters(model: str, config: TrainConfig) -> int:
    backbone = registry.build_backbone(model, d_model=config.d_model, n_layers=config.n_layers,
                                       n_heads=config.n_heads, dropout=config.dropout, **config.backbone_options)
    return sum(p.numel() for p in backbone.parameters())
