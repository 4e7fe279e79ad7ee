"""The headline benchmark's protocol (headline-v2): its datasets, seeds and settings, the files it
writes, and the training settings of one cell; shared by the runs (headline/driver.py) and the report
(headline/report/)."""

from __future__ import annotations

from ... import registry
from ...training.config import TrainConfig

PROTOCOL = "headline-v2"
DATASETS = ("ml-100k", "yelp-iclrec", "electronics-gerec", "books-dealrec", "movies-long", "movies-fedcsr")
SEEDS = (0, 1, 2)
SETTINGS = {"d_model": 64, "n_layers": 2, "n_heads": 2, "dropout": 0.1, "batch_size": 256, "epochs": 200,
            "patience": 10}
LAYERS = {"titans": 1}  # one Titans layer is a memory block plus an attention block
MANIFEST_NAME = "headline_v2_manifest.jsonl"
CASE_RANKS_NAME = "headline_v2_case_ranks.jsonl"


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
