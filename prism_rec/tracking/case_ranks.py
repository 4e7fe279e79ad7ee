"""Per-test-case results of a run, kept compactly so that confidence intervals and paired tests can be
computed later without retraining.

For each test case (one per test user) a run keeps the user's id and ``twice_rank``: twice the target's
mid-rank among all items, ``2 * #items scored above + #other items tied with it`` (an integer, exact).
The case's AUC is then ``1 - twice_rank / (2 * (n_items - 1))``, the same value metrics.rank_metrics
averages (trainer.evaluate derives both from metrics.target_counts). An entry holds both arrays,
zlib-compressed little-endian int32 in base64, so one JSON line per run stays small (about 2 bytes per test
user); :func:`decode` checks what it reads.

Runs evaluated since the beyond-accuracy metrics also keep ``top_items`` [N, K]: each case's K best item
columns (0-based, best first; training/evaluation.py says which K and which candidates), packed as
little-endian uint16 where every item fits (int32 otherwise), so that coverage@K and average popularity@K
(training/metrics.beyond_accuracy) can be computed later too. An entry written before then has no
``top_items``: its run gains those metrics only by evaluating its model again.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass

import numpy as np

CASE_RANKS_FORMAT = "prism-rec-case-ranks-1"


def _pack(values: np.ndarray, dtype: str = "<i4") -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(values, dtype=dtype).tobytes(), 9)).decode()


def _unpack(text: str, dtype: str = "<i4") -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=dtype).astype(np.int64)


def _item_dtype(n_items: int) -> str:
    return "<u2" if n_items <= 1 << 16 else "<i4"


@dataclass(frozen=True)
class CaseRanks:
    """The per-case results of one run: ``users`` [N] and ``twice_rank`` [N] among ``n_items`` items, and
    ``top_items`` [N, K] where the run kept them (None otherwise)."""

    users: np.ndarray
    twice_rank: np.ndarray
    n_items: int
    top_items: np.ndarray | None = None

    def auc(self) -> np.ndarray:
        """Per-case AUC [N] (float64)."""
        return 1.0 - self.twice_rank / (2.0 * (self.n_items - 1))


def encode(users: np.ndarray, twice_rank: np.ndarray, n_items: int, top_items: np.ndarray | None = None) -> dict:
    """The JSON-ready form of one run's case results (``top_items`` [N, K] left out when None)."""
    users, twice_rank = np.asarray(users), np.asarray(twice_rank)
    if users.shape != twice_rank.shape or users.ndim != 1:
        raise ValueError(f"case ranks: users {users.shape} and ranks {twice_rank.shape} must be equal 1-d arrays")
    entry = {"format": CASE_RANKS_FORMAT, "n_items": int(n_items), "n_cases": int(len(users)),
             "users": _pack(users), "twice_rank": _pack(twice_rank)}
    if top_items is not None:
        top_items = np.asarray(top_items)
        if top_items.ndim != 2 or len(top_items) != len(users):
            raise ValueError(f"case ranks: top items {top_items.shape} must be [{len(users)}, K]")
        entry.update(top_k=int(top_items.shape[1]), top_items=_pack(top_items, _item_dtype(n_items)))
    return entry


def decode(entry: dict, where: str = "case ranks") -> CaseRanks:
    """The arrays of an :func:`encode` entry; ``where`` names its file and line in errors."""
    if entry.get("format") != CASE_RANKS_FORMAT:
        raise ValueError(f"{where}: not {CASE_RANKS_FORMAT} (format {entry.get('format')!r})")
    users, twice_rank = _unpack(entry["users"]), _unpack(entry["twice_rank"])
    n_items = int(entry["n_items"])
    if not len(users) == len(twice_rank) == entry["n_cases"]:
        raise ValueError(f"{where}: {len(users)} users, {len(twice_rank)} ranks, n_cases {entry['n_cases']}")
    if len(twice_rank) and (twice_rank.min() < 0 or twice_rank.max() > 2 * (n_items - 1)):
        raise ValueError(f"{where}: a rank outside [0, {n_items - 1}]")
    return CaseRanks(users, twice_rank, n_items, _decode_top_items(entry, where) if "top_items" in entry else None)


def _decode_top_items(entry: dict, where: str) -> np.ndarray:
    n_items, k = int(entry["n_items"]), int(entry["top_k"])
    top = _unpack(entry["top_items"], _item_dtype(n_items))
    if len(top) != entry["n_cases"] * k:
        raise ValueError(f"{where}: {len(top)} top items for {entry['n_cases']} cases of {k}")
    if len(top) and top.max() >= n_items:
        raise ValueError(f"{where}: a top item outside [0, {n_items - 1}]")
    return top.reshape(-1, k)
