"""Train a RecBole model on a ProcessedDataset's split with RecBole's own trainer, then evaluate its best
checkpoint with this suite's evaluator (prism_rec/training/evaluation.py), so that its test metrics, case
ranks, intervals and paired tests are those of every other run.

What ``recbole.quick_start.run_recbole`` does, without its ray import (compat.py): Config, init_seed,
create_dataset, data_preparation, get_model, get_trainer, ``trainer.fit`` (RecBole's loss, optimizer, early
stopping on its validation metric, best checkpoint saved). Around it: the split files (split.py), RecBole's
log and checkpoints in a temporary folder that is removed after the run (nothing lands in the working
directory: its tensorboard writer is pointed there too), and after every RecBole validation this suite's
validation metrics, so the run's history has the same columns as any other run's.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..data.core import ProcessedDataset
from ..training.candidates import check_sampled
from ..training.config import TrainConfig
from ..training.devices import resolve_device
from ..training.distributed import SINGLE_PROCESS, World
from ..training.evaluation import evaluate
from ..training.trainer import FitResult, peak_memory_mb
from .compat import cudnn_flags_kept, import_recbole, isolated_config
from .config import config_dict, model_class_name
from .split import NAME, write_split


class RecBoleScorer(nn.Module):
    """A trained RecBole sequential model as this suite's evaluator sees it: ``score_histories`` turns our
    left-padded histories and users into RecBole's right-padded id sequences, lengths and user ids, calls
    the model's ``full_sort_predict`` and returns the scores in our item order."""

    def __init__(self, model: nn.Module, recbole_dataset, n_users: int, n_items: int, interaction_class):
        super().__init__()
        self.model, self.interaction_class = model, interaction_class
        items, users = recbole_dataset.field2token_id["item_id"], recbole_dataset.field2token_id["user_id"]
        self.fields = model.ITEM_SEQ, model.ITEM_SEQ_LEN, model.USER_ID
        self.register_buffer("item_ids", torch.tensor([0] + [items[str(i)] for i in range(1, n_items + 1)]))
        self.register_buffer("user_ids", torch.tensor([users[str(u)] for u in range(n_users)]))

    @torch.no_grad()
    def score_histories(self, histories: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        """Scores [C, n_items] (fp32, column i is our item i + 1) of left-padded histories [C, T] of ``users`` [C]."""
        lengths = (histories > 0).sum(1)  # [C]
        width = histories.shape[1]
        columns = torch.arange(width, device=histories.device)
        source = (columns[None, :] + (width - lengths)[:, None]).clamp(max=width - 1)  # [C, T]
        right_padded = torch.where(columns[None, :] < lengths[:, None],
                                   self.item_ids[histories.gather(1, source)], 0)  # [C, T]
        sequence, length, user = self.fields
        batch = self.interaction_class({sequence: right_padded, length: lengths, user: self.user_ids[users]})
        scores = self.model.full_sort_predict(batch).view(len(histories), -1)  # [C, RecBole's items]
        return scores[:, self.item_ids[1:]].float()


def full_width(recbole_dataset, max_len: int) -> None:
    """Right-pad the item_id_list field of a built RecBole dataset (one file's part) to ``max_len`` columns,
    as RecBole's own data augmentation makes it: read from files, the field is only as wide as the part's
    longest list, and models whose layers are sized by MAX_ITEM_LIST_LENGTH (Caser's vertical filter) need
    the full width."""
    sequences = recbole_dataset.inter_feat.interaction["item_id_list"]  # [N, w]
    if sequences.shape[1] < max_len:
        padding = sequences.new_zeros(len(sequences), max_len - sequences.shape[1])
        recbole_dataset.inter_feat.interaction["item_id_list"] = torch.cat([sequences, padding], dim=1)
        recbole_dataset.field2seqlen["item_id_list"] = max_len


@contextlib.contextmanager
def _recbole_output(folder: Path):
    """RecBole's log (it logs to the root logger) into ``folder``/recbole.log, and the tensorboard writer
    its Trainer makes into ``folder``/tensorboard, for the duration of the block."""
    import recbole.trainer.trainer as trainer_module
    from torch.utils.tensorboard import SummaryWriter

    root = logging.getLogger()
    handler = logging.FileHandler(folder / "recbole.log")
    saved_level, saved_writer = root.level, trainer_module.get_tensorboard
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    trainer_module.get_tensorboard = lambda logger: SummaryWriter(str(folder / "tensorboard"))
    try:
        yield
    finally:
        trainer_module.get_tensorboard = saved_writer
        root.removeHandler(handler)
        root.setLevel(saved_level)
        handler.close()


def fit_recbole(dataset: ProcessedDataset, model: str, config: TrainConfig,
                on_epoch: Callable[[int, dict], None] | None = None, checkpoint_path: Path | None = None,
                resume: bool = False, world: World = SINGLE_PROCESS) -> FitResult:
    """``trainer.fit``'s counterpart for ``model`` "recbole:<Model>" (module docstring): the best checkpoint's
    test metrics and case ranks by our evaluator, the history of every validated epoch (train_loss, our
    valid_* metrics and RecBole's own ``recbole_valid_score``), best_epoch RecBole's. ``checkpoint_path`` is
    not written (RecBole keeps its checkpoints in the temporary folder, and nothing resumes from them):
    ``resume`` is refused."""
    name = model_class_name(model)
    config.validate()
    check_sampled(dataset, config.sampled, config.exclude_history)
    if world.distributed:
        raise ValueError(f"option --models: {model} trains in RecBole's own single-process loop, not under torchrun")
    if resume:
        raise ValueError(f"option --resume: {model} trains in RecBole's own loop, which this suite cannot resume")
    recbole_config, recbole_data, recbole_utils, interaction = import_recbole()
    device = resolve_device(config.device)
    wall_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="prism-recbole-") as temporary:
        folder = Path(temporary)
        data_path = write_split(dataset, folder / "data", config.max_len).parent
        with _recbole_output(folder), cudnn_flags_kept():
            with isolated_config():
                settings = recbole_config.Config(model=name, dataset=NAME, config_dict=config_dict(
                    model, config, data_path, folder, device.type == "cuda"))
            settings["device"] = device
            recbole_utils.init_seed(config.seed, True)
            recbole_dataset = recbole_data.create_dataset(settings)
            train_data, valid_data, _ = recbole_data.data_preparation(settings, recbole_dataset)
            for loader in (train_data, valid_data):
                full_width(loader._dataset, config.max_len)
            recbole_utils.init_seed(config.seed, True)
            network = recbole_utils.get_model(name)(settings, train_data._dataset).to(device)
            trainer = recbole_utils.get_trainer(settings["MODEL_TYPE"], name)(settings, network)
            scorer = RecBoleScorer(network, recbole_dataset, dataset.n_users, dataset.n_items,
                                   interaction.Interaction).to(device)
            loop = _Recorder(trainer, scorer, dataset, model, config, device, on_epoch)
            try:
                trainer.fit(train_data, valid_data, saved=True, show_progress=config.progress,
                            callback_fn=loop.validated)
            finally:
                trainer.tensorboard.close()
            state = torch.load(trainer.saved_model_file, map_location=device, weights_only=False)  # RecBole's own file
            network.load_state_dict(state["state_dict"])
            network.load_other_parameter(state.get("other_parameter"))
            case_ranks: dict = {}
            test = evaluate(scorer, dataset, dataset.test_cases, config, device, f"{model} test", case_ranks=case_ranks)
    n_trained = len(train_data.dataset) * len(loop.history)
    return FitResult(
        model=scorer, best_epoch=loop.best_epoch + 1, epochs_run=len(loop.history), history=loop.history,
        valid={k.removeprefix("valid_"): v for k, v in loop.history[loop.best_epoch].items()
               if k.startswith("valid_")},
        test=test, test_case_ranks=case_ranks, diverged_epoch=0,
        train_tokens_per_s=n_trained / max(loop.train_seconds, 1e-9), peak_memory_mb=peak_memory_mb(device),
        wall_seconds=time.perf_counter() - wall_start, n_parameters=sum(p.numel() for p in network.parameters()),
    )


class _Recorder:
    """Times RecBole's training epochs and, after each of its validations, records the epoch's row of the
    history (its mean batch loss, our validation metrics, RecBole's validation score) and whether RecBole
    took the epoch as its best (its early stopping reset the count)."""

    def __init__(self, trainer, scorer: RecBoleScorer, dataset: ProcessedDataset, model: str, config: TrainConfig,
                 device: torch.device, on_epoch):
        self.trainer, self.scorer, self.dataset, self.model = trainer, scorer, dataset, model
        self.config, self.device, self.on_epoch = config, device, on_epoch
        self.history, self.best_epoch, self.train_seconds, self.losses = [], -1, 0.0, []
        train_epoch = trainer._train_epoch

        def timed(train_data, epoch_idx, *args, **kwargs):
            start = time.perf_counter()
            loss = train_epoch(train_data, epoch_idx, *args, **kwargs)
            self.train_seconds += time.perf_counter() - start
            self.losses.append(float(np.sum(loss)) / max(len(train_data), 1))  # RecBole sums its batch means
            return loss

        trainer._train_epoch = timed

    def validated(self, epoch_idx: int, valid_score: float) -> None:
        valid = evaluate(self.scorer, self.dataset, self.dataset.valid_cases, self.config, self.device,
                         f"{self.model} valid")
        row = {"train_loss": self.losses[-1], **{f"valid_{k}": v for k, v in valid.items()},
               "recbole_valid_score": float(valid_score)}
        if self.trainer.cur_step == 0:
            self.best_epoch = len(self.history)
        self.history.append(row)
        if self.on_epoch:
            self.on_epoch(len(self.history) - 1, row)
