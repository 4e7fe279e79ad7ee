"""The candidates an evaluation ranks a target against, when not every item: the items outside the user's
history (``TrainConfig.exclude_history``, as RecBole's full ranking masks them) or the target and N sampled
negatives (``TrainConfig.sampled``: "uniform:N" or "popularity:N", for comparison with papers that sample
only). Negatives are drawn without replacement, never the target (nor a history item with
``exclude_history``), uniformly or in proportion to the items' training counts, from a generator seeded by
the run's seed and walked in the order of the cases: the same cases and seed get the same negatives
whatever the batch size or the model.
"""

from __future__ import annotations

import numpy as np

from ..data.core import ProcessedDataset
from ..models.popularity import training_counts

SAMPLERS = ("uniform", "popularity")
SAMPLED_LABEL = "sampled: for comparison with papers that sample only"  # on every table of a sampled metric


def parse_sampled(spec: str) -> tuple[str, int] | None:
    """``TrainConfig.sampled`` as (sampler, N), or None for full ranking ("none"); a bad value raises
    ValueError naming the option."""
    if spec == "none":
        return None
    sampler, _, count = spec.partition(":")
    if sampler not in SAMPLERS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"option --sampled: expected none, uniform:N or popularity:N with N >= 1, got {spec!r}")
    return sampler, int(count)


def candidates_description(sampled: str, exclude_history: bool) -> str:
    """What each test case ranks its target against in an evaluation with these options, as a table says it;
    a sampled one opens with :data:`SAMPLED_LABEL`."""
    parsed = parse_sampled(sampled)
    history = ", history excluded" if exclude_history else ""
    if parsed is not None:
        sampler, count = parsed
        return f"{SAMPLED_LABEL}: each test case ranks its target against {count} {sampler}-sampled negatives{history}"
    return ("each test case ranks its target against the items outside the user's history" if exclude_history
            else "each test case ranks its target against all items")


def history_mask(dataset: ProcessedDataset, cases: np.ndarray) -> np.ndarray:
    """bool [C, n_items]: column i - 1 is True where item i is in the user's sequence before the case's
    position and is not the case's target."""
    users, positions = cases[:, 0], cases[:, 1]
    starts = dataset.offsets[users]
    rows = np.repeat(np.arange(len(cases)), positions)
    index = np.repeat(starts, positions) + np.arange(int(positions.sum())) - np.repeat(np.cumsum(positions) - positions,
                                                                                       positions)
    mask = np.zeros((len(cases), dataset.n_items), dtype=bool)
    mask[rows, dataset.items[index] - 1] = True
    mask[np.arange(len(cases)), dataset.items[starts + positions] - 1] = False
    return mask


def check_sampled(dataset: ProcessedDataset, spec: str, exclude_history: bool) -> None:
    """Refuse (ValueError naming the option) a sample size that some case of ``dataset`` cannot fill."""
    parsed = parse_sampled(spec)
    if parsed is None:
        return
    sampler, count = parsed
    available = dataset.n_items - 1 if sampler == "uniform" else int((training_counts(dataset) > 0).sum()) - 1
    if exclude_history:
        available -= max(len(np.unique(dataset.sequence(user))) - 1 for user in range(dataset.n_users))
    if count > available:
        raise ValueError(f"option --sampled: {spec!r} asks for {count} negatives but {dataset.name} has only "
                         f"{available} candidate items for some case ({dataset.n_items} items"
                         + (", history excluded)" if exclude_history else ")"))


def sample_negatives(dataset: ProcessedDataset, cases: np.ndarray, spec: str, seed: int,
                     exclude_history: bool, chunk_cells: int = 1 << 24) -> np.ndarray:
    """Negative item columns (0-based) [C, N] of every case, for ``spec`` "uniform:N" or "popularity:N"
    (see the module docstring). Without replacement by Efraimidis-Spirakis keys: the N largest of
    log(u) / weight, u ~ U(0, 1), over the allowed items."""
    sampler, count = parse_sampled(spec)
    weights = (np.ones(dataset.n_items) if sampler == "uniform"
               else training_counts(dataset).astype(np.float64))  # [I]
    generator = np.random.default_rng(seed)
    targets = dataset.items[dataset.offsets[cases[:, 0]] + cases[:, 1]] - 1  # [C]
    negatives = np.empty((len(cases), count), dtype=np.int64)
    step = max(1, chunk_cells // dataset.n_items)
    for start in range(0, len(cases), step):
        chunk = slice(start, start + step)
        with np.errstate(divide="ignore"):
            keys = np.log(generator.random((len(targets[chunk]), dataset.n_items))) / weights  # [c, I]
        keys[np.arange(len(keys)), targets[chunk]] = -np.inf
        if exclude_history:
            keys[history_mask(dataset, cases[chunk])] = -np.inf
        top = np.argpartition(-keys, count - 1, axis=1)[:, :count]  # [c, N]
        if not np.isfinite(np.take_along_axis(keys, top, axis=1)).all():
            raise ValueError(f"option --sampled: {spec!r}: a case has fewer than {count} candidate items")
        negatives[chunk] = top
    return negatives
