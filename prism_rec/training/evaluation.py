"""Full-ranking evaluation of a trained recommender on (user, position) cases: metric means, and each
case's rank for the paired tests (prism_rec/tracking/case_ranks.py)."""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.batching import evaluation_batch
from ..data.core import ProcessedDataset
from ..models.recommender import SequentialRecommender
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, World
from .metrics import METRIC_NAMES, MetricMeans, metrics_from_counts, target_counts


@torch.no_grad()
def evaluate(model: SequentialRecommender, dataset: ProcessedDataset, cases: np.ndarray, config: TrainConfig,
             device: torch.device, description: str = "eval", world: World = SINGLE_PROCESS,
             case_ranks: dict | None = None) -> dict[str, float]:
    """Full-ranking metrics of ``cases`` (user, position) rows, batched on ``device``; in a data-parallel
    world every rank ranks its share of the cases and the metric sums and counts are added up. A
    ``case_ranks`` dict receives every case's user and twice-rank (2 * above + tied others, case_ranks.py)
    as arrays "users" and "twice_rank", in the order of ``cases``, and "n_items"."""
    model.eval()
    means = MetricMeans()
    own_cases = world.share(cases)
    own_ranks = []
    batches = range(0, len(own_cases), config.eval_batch_size)
    for start in tqdm(batches, desc=description, leave=False, disable=not (config.progress and world.is_main)):
        histories, targets = evaluation_batch(dataset, own_cases[start : start + config.eval_batch_size],
                                              config.max_len)
        hidden = model.encode(torch.from_numpy(histories).to(device))[:, -1]  # [C, d]
        with torch.autocast(device.type, enabled=False):  # bf16 scores would tie many items with the target
            scores = model.score_all(hidden.float())  # [C, I]
        above, tied_others = target_counts(scores, torch.from_numpy(targets - 1).to(device))  # [C] each
        means.add(metrics_from_counts(above, tied_others, dataset.n_items))
        if case_ranks is not None:
            own_ranks.append((2 * above + tied_others).cpu().numpy())
    if case_ranks is not None:
        ranks = np.concatenate(world.gather_objects(np.concatenate(own_ranks) if own_ranks else np.zeros(0, np.int64)))
        case_ranks.update(users=cases[:, 0].copy(), twice_rank=ranks, n_items=dataset.n_items)
    if world.distributed:
        totals = world.sum([means.sums[name] for name in METRIC_NAMES] + [means.count], device)
        means = MetricMeans()
        means.add_sums(dict(zip(METRIC_NAMES, totals[:-1])), int(totals[-1]))
    return means.means()
