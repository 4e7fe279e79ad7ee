"""Training checkpoints for resuming interrupted runs, and the deferred handling of Ctrl-C, SIGTERM and
SIGHUP.

A checkpoint is one ``torch.save`` file of plain containers and tensors (loadable with
``weights_only=True``), written under a temporary name and moved into place with ``os.replace``, so an
interruption at any moment leaves either the previous complete file or the new complete file. A training
checkpoint (``CHECKPOINT_FORMAT``, written by prism_rec/training/trainer.py) holds: "format", "config"
(``TrainConfig.identity()``), "world_size", "data" (``data_signature``), "model" and "optimizer" (state
dicts), "per_rank" (each rank's generator states and loss sum of the epoch so far) and "progress" (the
loop state, the trainer's ``Progress`` as a dict); ``read_checkpoint`` checks it against the run that resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import signal
import sys
import threading
from pathlib import Path

import numpy as np
import torch

from ..data.core import ProcessedDataset
from ..files import write_atomically
from ..paths import PROJECT_ROOT
from .config import TrainConfig

CHECKPOINT_DIR = PROJECT_ROOT / "checkpoints"
INTERRUPT_AFTER_BATCHES_ENV = "PRISM_REC_INTERRUPT_AFTER_BATCHES"
CHECKPOINT_FORMAT = "prism-rec-training-1"


def checkpoint_file(dataset: str, model: str, seed: int, run_hash: str, root: Path = CHECKPOINT_DIR) -> Path:
    """checkpoints/<dataset>/<model>-s<seed>-<hash>.pt"""
    return Path(root) / dataset / f"{model}-s{seed}-{run_hash}.pt"


def save_atomically(state: dict, path: Path) -> None:
    """Write ``state`` (torch.save) to ``path`` through :func:`write_atomically`."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_atomically(path, buffer.getvalue())


def load(path: Path) -> dict:
    """A checkpoint written by :func:`save_atomically`, tensors on the CPU."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {path} does not exist") from None
    except Exception as error:
        raise ValueError(f"checkpoint {path} cannot be read ({type(error).__name__}: {error})") from None


def data_signature(dataset: ProcessedDataset) -> str:
    """A hash of the processed sequences and cases: the data a checkpoint was trained on."""
    digest = hashlib.blake2b(digest_size=8)
    for array in (dataset.items, dataset.offsets, dataset.train_length, dataset.valid_cases, dataset.test_cases):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def read_checkpoint(path: Path, dataset: ProcessedDataset, config: TrainConfig, world_size: int) -> dict:
    """The training checkpoint at ``path``, checked to be one of ``config`` on ``dataset`` written by
    ``world_size`` processes; a ValueError names the file and what is wrong (unreadable, foreign, other
    settings or data)."""
    state = load(path)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"checkpoint {path}: not a prism-rec training checkpoint (format {found!r})")
    if state["config"] != config.identity():
        changed = sorted(k for k in {**state["config"], **config.identity()}
                         if state["config"].get(k) != config.identity().get(k))
        raise ValueError(f"checkpoint {path}: written with other settings ({', '.join(changed)})")
    if state["world_size"] != world_size:
        raise ValueError(f"checkpoint {path}: written by {state['world_size']} processes; "
                         f"resume with NPROC={state['world_size']} (this run has {world_size})")
    if state.get("data", data_signature(dataset)) != data_signature(dataset):
        raise ValueError(f"checkpoint {path}: trained on other data (the dataset's files or processing changed "
                         "since); delete it to train from scratch")
    return state


def capture_rng(generators: dict[str, torch.Generator]) -> dict:
    """States of Python's, NumPy's, torch's CPU and CUDA generators and of the named ``generators``."""
    _, keys, position, has_gauss, cached_gauss = np.random.get_state()
    version, python_state, gauss_next = random.getstate()
    return {
        "python": {"version": version, "state": list(python_state), "gauss_next": gauss_next},
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gauss": float(cached_gauss)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": {name: generator.get_state() for name, generator in generators.items()},
    }


def restore_rng(state: dict, generators: dict[str, torch.Generator]) -> None:
    """Inverse of :func:`capture_rng`."""
    python = state["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
    numpy = state["numpy"]
    np.random.set_state(("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["cached_gauss"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, generator in generators.items():
        generator.set_state(state["generators"][name])


class StopRequest:
    """Turns the first Ctrl-C, SIGTERM or SIGHUP into a request that training honours at its next batch
    boundary or after the running validation (saving a checkpoint first); a second signal interrupts at
    once.

    The environment variable PRISM_REC_INTERRUPT_AFTER_BATCHES=N requests a stop after N training
    batches of this process, which makes interruptions reproducible in tests and demonstrations.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.requested = False
        self.batches = 0
        limit = os.environ.get(INTERRUPT_AFTER_BATCHES_ENV)
        try:
            self.batch_limit = int(limit) if limit else None
        except ValueError:
            raise ValueError(f"{INTERRUPT_AFTER_BATCHES_ENV}: expected a number of batches, got {limit!r}") from None
        self.previous_handlers = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self.previous_handlers = {number: signal.signal(number, self._on_signal) for number in self.SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self.previous_handlers.items():
            signal.signal(number, handler)

    def _on_signal(self, number, frame) -> None:
        if number == signal.SIGHUP:
            silence_closed_terminal()
        if self.requested:
            raise KeyboardInterrupt(f"signal {number}")
        self.requested = True
        with contextlib.suppress(OSError):
            print(f"\n{signal.Signals(number).name}: stopping at the next batch or after this validation, with a "
                  "checkpoint; again to stop at once", file=sys.stderr, flush=True)

    def count_batch(self) -> None:
        self.batches += 1
        if self.batch_limit is not None and self.batches >= self.batch_limit:
            self.requested = True


def silence_closed_terminal() -> None:
    """Point standard output and error at /dev/null where they are a terminal: after SIGHUP (a closed SSH
    session) writing to it fails, which would turn an orderly stop into a crash."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.isatty():
                stream.flush()
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
        except (OSError, ValueError):
            continue
