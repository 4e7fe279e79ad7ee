"""The RecBole configuration of a bridged run: RecBole's own yaml defaults for the model (its
properties/overall.yaml, quick_start_config/sequential.yaml and model/<Model>.yaml, which RecBole's Config
loads itself), then this run's sizes and budget, then the ``--option`` values, which may set any key those
files define.

From the run's TrainConfig: MAX_ITEM_LIST_LENGTH = max_len, the width (``hidden_size`` of the transformers,
``embedding_size`` of the others) = d_model, n_layers and n_heads of the transformers, epochs,
train_batch_size = batch_size, learning_rate = lr, weight_decay, stopping_step = patience, eval_batch_size
and seed. Everything else is RecBole's: its loss (loss_type CE), optimizer (Adam, weight decay as an L2
term), dropout, initialisation, and its model selection (valid_metric MRR@10 on the validation file, full
ranking with the training items masked).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from ..training.config import TrainConfig
from . import PREFIX
from .split import PARTS

# the models the bridge runs, and the RecBole keys this suite's shared sizes set for each
SIZE_KEYS = {
    "SASRec": {"d_model": "hidden_size", "n_layers": "n_layers", "n_heads": "n_heads"},
    "BERT4Rec": {"d_model": "hidden_size", "n_layers": "n_layers", "n_heads": "n_heads"},
    "GRU4Rec": {"d_model": "embedding_size"},
    "NARM": {"d_model": "embedding_size"},
    "Caser": {"d_model": "embedding_size"},
}
SUPPORTED = tuple(PREFIX + name for name in sorted(SIZE_KEYS))
BUDGET_KEYS = {"epochs": "epochs", "batch_size": "train_batch_size", "lr": "learning_rate",
               "weight_decay": "weight_decay", "patience": "stopping_step", "eval_batch_size": "eval_batch_size",
               "seed": "seed", "max_len": "MAX_ITEM_LIST_LENGTH"}
DESCRIPTIONS = {"SASRec": "self-attentive sequential recommendation", "BERT4Rec": "bidirectional masked transformer",
                "GRU4Rec": "session GRU", "NARM": "GRU with attention over the session", "Caser": "convolutional "
                "sequence embedding (horizontal and vertical filters, user embedding)"}


def model_class_name(model: str) -> str:
    """"recbole:SASRec" -> "SASRec", refusing (ValueError naming --models) a model the bridge does not run."""
    if model not in SUPPORTED:
        raise ValueError(f"option --models: {model} is not a RecBole model the bridge runs "
                         f"(it runs {', '.join(SUPPORTED)})")
    return model.removeprefix(PREFIX)


def _properties() -> Path:
    spec = importlib.util.find_spec("recbole")
    if spec is None:
        raise ImportError("the RecBole bridge needs recbole==1.2.1: pip install --no-deps recbole==1.2.1")
    return Path(spec.origin).parent / "properties"


def model_yaml(name: str) -> dict:
    """RecBole's properties/model/<name>.yaml: the model's own settings and their defaults."""
    return yaml.safe_load((_properties() / "model" / f"{name}.yaml").read_text()) or {}


def recbole_defaults(name: str) -> dict:
    """The values RecBole's own yaml files give a sequential model ``name`` (later files win, as in its Config)."""
    folder = _properties()
    values = {}
    for path in (folder / "overall.yaml", folder / "dataset" / "sample.yaml",
                 folder / "quick_start_config" / "sequential.yaml"):
        values.update(yaml.safe_load(path.read_text()) or {})
    return {**values, **model_yaml(name)}


def run_options(model: str, config: TrainConfig) -> dict:
    """The model's RecBole settings this run changes: the sizes, the budget and the ``--option`` values;
    refuses (ValueError naming the option) a model the bridge does not run and a key RecBole does not define."""
    name = model_class_name(model)
    defaults = recbole_defaults(name)
    for key, value in config.backbone_options.items():
        if key not in defaults:
            raise ValueError(f"option --option {key}={value}: {model} has no RecBole setting {key!r} "
                             f"(its model settings: {', '.join(model_yaml(name))})")
    sizes = {key: getattr(config, ours) for ours, key in SIZE_KEYS[name].items()}
    budget = {key: getattr(config, ours) for ours, key in BUDGET_KEYS.items()}
    return {**sizes, **budget, **config.backbone_options}


def model_settings(model: str, config: TrainConfig) -> dict:
    """Every RecBole model setting of the run (its model yaml with :func:`run_options` applied): what the
    run's params record as ``backbone.<key>``."""
    name = model_class_name(model)
    own = model_yaml(name)
    return {**own, **{k: v for k, v in run_options(model, config).items() if k in own}}


def config_dict(model: str, config: TrainConfig, data_path: Path, folder: Path, use_gpu: bool) -> dict:
    """The ``config_dict`` of RecBole's Config for a run reading the split files under ``data_path``
    (split.write_split) and writing its checkpoints under ``folder``."""
    options = run_options(model, config)
    loss_type = options.get("loss_type", recbole_defaults(model_class_name(model)).get("loss_type"))
    return {
        "data_path": str(data_path), "benchmark_filename": list(PARTS), "checkpoint_dir": str(folder / "saved"),
        "load_col": {"inter": ["user_id", "item_id_list", "item_id"], "item": ["item_id"]},
        "alias_of_item_id": ["item_id_list"], "use_gpu": use_gpu, "gpu_id": "0" if use_gpu else "",
        "show_progress": config.progress, "state": "INFO", "reproducibility": True,
        **({"train_neg_sample_args": None} if loss_type == "CE" else {}),
        **options,
    }

