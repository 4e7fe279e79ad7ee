"""Per-test-case results of a run, kept compactly so that confidence intervals and paired tests can be
computed later without retraining.

For each test case (one per test user) a run keeps the user's id and ``twice_rank``: twice the target's
mid-rank among all items, ``2 * #items scored above + #other items tied with it`` (an integer, exact).
The case's AUC is then ``1 - twice_rank / (2 * (n_items - 1))``, the same value metrics.rank_metrics
averages (trainer.evaluate derives both from metrics.target_counts). An entry holds both arrays,
zlib-compressed little-endian int32 in base64, so one JSON line per run stays small (about 2 bytes per test
user); :func:`decode` checks what it reads.

Entries written for a while also held ``top_items`` (each case's top-K item columns, with ``top_k``); they
made an entry about 2.7 times larger and nothing read them (the run logs coverage@K and average popularity@K
at every K they could give, training/evaluation.py), so they are no longer written, and :func:`decode` reads
such an entry as any other, its top items left aside.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass

import numpy as np

CASE_RANKS_FORMAT = "prism-rec-case-ranks-1"


def _pack(values: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(values, dtype="<i4").tobytes(), 9)).decode()


def _unpack(text: str) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype="<i4").astype(np.int64)


@dataclass(frozen=True)
class CaseRanks:
    """The per-case results of one run: ``users`` [N] and ``twice_rank`` [N] among ``n_items`` items."""

    users: np.ndarray
    twice_rank: np.ndarray
    n_items: int

    def auc(self) -> np.ndarray:
        """Per-case AUC [N] (float64)."""
        return 1.0 - self.twice_rank / (2.0 * (self.n_items - 1))


def encode(users: np.ndarray, twice_rank: np.ndarray, n_items: int) -> dict:
    """The JSON-ready form of one run's case results."""
    users, twice_rank = np.asarray(users), np.asarray(twice_rank)
    if users.shape != twice_rank.shape or users.ndim != 1:
        raise ValueError(f"case ranks: users {users.shape} and ranks {twice_rank.shape} must be equal 1-d arrays")
    return {"format": CASE_RANKS_FORMAT, "n_items": int(n_items), "n_cases": int(len(users)),
            "users": _pack(users), "twice_rank": _pack(twice_rank)}


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
    return CaseRanks(users, twice_rank, n_items)
