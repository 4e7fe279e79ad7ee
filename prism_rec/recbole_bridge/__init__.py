"""RecBole's sequential models trained on this suite's splits (``--models recbole:<Model>``).

split.py writes a ProcessedDataset's split as RecBole pre-split atomic files, config.py builds RecBole's
configuration (its own yaml defaults plus this run's sizes and budget), compat.py imports recbole without the
dependencies it does not need here (ray), and run.py trains the model with RecBole's own trainer and
evaluates its best checkpoint with prism_rec/training/evaluation.py.
"""

from ..registry import RECBOLE_PREFIX as PREFIX


def is_recbole(model: str) -> bool:
    """Whether ``model`` names a RecBole model through the bridge ("recbole:<Model>")."""
    return model.startswith(PREFIX)
