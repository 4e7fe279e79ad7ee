"""Data pipeline core: interactions -> k-core filter -> chronological sequences -> split -> cache.

Every dataset source yields an interactions frame with columns ``user``, ``item``, ``timestamp`` (and
optionally ``rating``) in file order. ``prepare`` turns it into a ``ProcessedDataset``:

1. Duplicates: repeated (user, item) pairs are kept as separate events by default (``dedup="none"``);
   ``"first"``/``"last"`` keep one occurrence.
2. Iterative filtering to a fixed point: drop items with fewer than ``min_item_interactions`` and users
   with fewer than ``min_user_interactions``, and repeat until nothing changes.
3. Each user's history sorted by timestamp; equal timestamps keep file order (stable sort).
4. Contiguous ids: users 0..U-1 and items 1..I in order of first appearance after sorting by
   (user id, time); item 0 is padding.
5. Each kept interaction keeps its timestamp and rating (NaN when the source has none), aligned with
   ``items``, so the data can be exported unchanged (``prism_rec.data.export``).
6. Split. ``loo`` (leave-one-out, the paper's text): per user, the last item is the test target, the
   second-to-last the validation target, the rest is training. ``time`` (the authors' code): global
   timestamp quantiles at 70 % and 85 %; interactions up to the first are training, each interaction in
   (q70, q85] is a validation case and each after q85 a test case, predicted from the user's whole
   earlier history.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SPLITS = ("loo", "time")
DEDUP_MODES = ("none", "first", "last")
CACHE_VERSION = 2


class DataError(ValueError):
    """A dataset cannot be read or processed; the message names the file, line or option at fault."""


class MissingDataError(DataError):
    """Raw files are missing; the message says which files to place where."""


@dataclass
class ProcessedDataset:
    """Chronological item sequences of every user plus the split into training prefix and cases.

    items: all users' sequences concatenated, internal item ids in 1..n_items     [N]
    offsets: user u's sequence is items[offsets[u]:offsets[u + 1]]                 [U + 1]
    train_length: how many of a user's first items are training interactions       [U]
    valid_cases / test_cases: rows (user, position): predict items[offsets[user] + position]
        from the items before it                                                    [C, 2]
    user_ids / item_ids: original ids (item_ids[0] is the padding token "")
    timestamps / ratings: of each interaction in ``items`` (seconds; NaN rating when unknown)  [N]
    item_categories: category of each item id ("" when unknown), or None without metadata     [I + 1]
    """

    name: str
    items: np.ndarray
    offsets: np.ndarray
    train_length: np.ndarray
    valid_cases: np.ndarray
    test_cases: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray
    options: dict
    timestamps: np.ndarray | None = None
    ratings: np.ndarray | None = None
    item_categories: np.ndarray | None = None

    @property
    def n_users(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_items(self) -> int:
        return len(self.item_ids) - 1

    @property
    def n_interactions(self) -> int:
        return len(self.items)

    def sequence(self, user: int) -> np.ndarray:
        return self.items[self.offsets[user] : self.offsets[user + 1]]

    def stats(self) -> dict:
        lengths = np.diff(self.offsets)
        return {
            "users": self.n_users,
            "items": self.n_items,
            "interactions": self.n_interactions,
            "mean_length": float(lengths.mean()) if len(lengths) else 0.0,
            "max_length": int(lengths.max()) if len(lengths) else 0,
            "valid_cases": len(self.valid_cases),
            "test_cases": len(self.test_cases),
        }

    def save(self, path: Path) -> None:
        """Write atomically: a temporary file in the same folder, renamed when complete."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            optional = {
                key: value if key != "item_categories" else value.astype(str)
                for key, value in (("timestamps", self.timestamps), ("ratings", self.ratings),
                                   ("item_categories", self.item_categories))
                if value is not None
            }
            with os.fdopen(fd, "wb") as handle:
                np.savez(
                    handle, **optional,
                    items=self.items, offsets=self.offsets, train_length=self.train_length,
                    valid_cases=self.valid_cases, test_cases=self.test_cases,
                    user_ids=self.user_ids.astype(str), item_ids=self.item_ids.astype(str),
                    meta=np.array(json.dumps({"name": self.name, "options": self.options, "version": CACHE_VERSION})),
                )
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> ProcessedDataset:
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                if meta.get("version") != CACHE_VERSION:
                    raise DataError(f"{path}: cache version {meta.get('version')} != {CACHE_VERSION}")
                return cls(
                    name=meta["name"], options=meta["options"],
                    **{key: data[key] for key in ("items", "offsets", "train_length", "valid_cases",
                                                  "test_cases", "user_ids", "item_ids")},
                    **{key: data[key] for key in ("timestamps", "ratings", "item_categories") if key in data},
                )
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as error:  # a damaged .npz is a bad zip
            if isinstance(error, DataError):
                raise
            raise DataError(f"{path}: unreadable processed cache ({error}); delete it to rebuild") from error


def check_options(split: str, dedup: str, min_user_interactions: int, min_item_interactions: int) -> None:
    """Raise ``DataError`` naming the first processing option that ``prepare`` cannot take."""
    if split not in SPLITS:
        raise DataError(f"option --split: {split!r} is not one of {SPLITS}")
    if dedup not in DEDUP_MODES:
        raise DataError(f"option --dedup: {dedup!r} is not one of {DEDUP_MODES}")
    if min_item_interactions < 1:
        raise DataError(f"option --min-item-interactions: must be >= 1, got {min_item_interactions}")
    if split == "loo" and min_user_interactions < 3:
        raise DataError("option --min-user-interactions: leave-one-out needs at least 3 interactions per user")
    if min_user_interactions < 2:
        raise DataError(f"option --min-user-interactions: must be >= 2 (a user needs a case and a history), "
                        f"got {min_user_interactions}")


def filter_interactions(frame: pd.DataFrame, min_user: int, min_item: int) -> pd.DataFrame:
    """Drop rare items and light users repeatedly until both thresholds hold (a fixed point)."""
    while True:
        item_counts = frame["item"].map(frame["item"].value_counts())
        frame = frame[item_counts >= min_item]
        user_counts = frame["user"].map(frame["user"].value_counts())
        kept = frame[user_counts >= min_user]
        if len(kept) == len(frame):
            return kept
        frame = kept


def prepare(
    frame: pd.DataFrame,
    name: str,
    min_user_interactions: int,
    min_item_interactions: int,
    split: str = "loo",
    dedup: str = "none",
    source: str = "",
) -> ProcessedDataset:
    """Apply the protocol of the module docstring to an interactions frame in file order."""
    check_options(split, dedup, min_user_interactions, min_item_interactions)
    missing = {"user", "item", "timestamp"} - set(frame.columns)
    if missing:
        raise DataError(f"{source or name}: interactions lack column(s) {sorted(missing)}")
    frame = frame[["user", "item", "timestamp"]].assign(
        rating=pd.to_numeric(frame["rating"], errors="coerce") if "rating" in frame.columns else np.nan
    )
    frame["user"] = frame["user"].astype(str)
    frame["item"] = frame["item"].astype(str)
    frame["timestamp"] = pd.to_numeric(frame["timestamp"], errors="raise").astype(np.float64)
    frame["order"] = np.arange(len(frame))
    if dedup != "none":
        frame = frame.sort_values(["user", "timestamp", "order"], kind="stable")
        frame = frame.drop_duplicates(["user", "item"], keep=dedup)
    frame = filter_interactions(frame, min_user_interactions, min_item_interactions)
    if frame.empty:
        raise DataError(
            f"{source or name}: no interactions left after filtering (users >= {min_user_interactions}, "
            f"items >= {min_item_interactions}); lower --min-user-interactions/--min-item-interactions"
        )
    frame = frame.sort_values(["user", "timestamp", "order"], kind="stable")
    user_codes, user_ids = pd.factorize(frame["user"], sort=False)
    item_codes, item_ids = pd.factorize(frame["item"], sort=False)
    items = (item_codes + 1).astype(np.int32)
    offsets = np.zeros(len(user_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(user_codes, minlength=len(user_ids)), out=offsets[1:])
    lengths = np.diff(offsets)
    users = np.arange(len(user_ids))
    if split == "loo":
        train_length = (lengths - 2).astype(np.int32)
        valid_cases = np.stack([users, lengths - 2], axis=1)
        test_cases = np.stack([users, lengths - 1], axis=1)
    else:
        timestamps = frame["timestamp"].to_numpy()
        train_end, valid_end = np.quantile(timestamps, [0.70, 0.85])
        positions = np.arange(len(items)) - np.repeat(offsets[:-1], lengths)
        owner = np.repeat(users, lengths)
        train_length = np.bincount(owner, weights=timestamps <= train_end, minlength=len(users)).astype(np.int32)
        in_valid = (timestamps > train_end) & (timestamps <= valid_end) & (positions > 0)
        in_test = (timestamps > valid_end) & (positions > 0)
        valid_cases = np.stack([owner[in_valid], positions[in_valid]], axis=1)
        test_cases = np.stack([owner[in_test], positions[in_test]], axis=1)
    options = {
        "min_user_interactions": min_user_interactions, "min_item_interactions": min_item_interactions,
        "split": split, "dedup": dedup,
    }
    return ProcessedDataset(
        name=name, items=items, offsets=offsets, train_length=train_length,
        valid_cases=valid_cases.astype(np.int64), test_cases=test_cases.astype(np.int64),
        user_ids=np.asarray(user_ids, dtype=str), item_ids=np.concatenate([[""], np.asarray(item_ids, dtype=str)]),
        options=options, timestamps=frame["timestamp"].to_numpy(np.float64),
        ratings=frame["rating"].to_numpy(np.float64),
    )


def fingerprint(paths: list[Path], options: dict) -> str:
    """Hash of the source files' bytes and the processing options: the processed cache's key."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(json.dumps({"options": options, "version": CACHE_VERSION}, sort_keys=True).encode())
    for path in sorted(paths, key=lambda p: p.name):
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()
