"""Training checkpoints for resuming interrupted runs, and the deferred handling of Ctrl-C, SIGTERM and
SIGHUP.

A training checkpoint (written by prism_rec/training/trainer.py through :func:`write_checkpoint`) is the line
``CHECKPOINT_MAGIC``, one JSON header line, then a ``torch.save`` payload of plain containers and tensors
(loaded with ``weights_only=True``): "model" and "optimizer" (state dicts), "per_rank" (each rank's generator
states and loss sum of the epoch so far) and "progress" (the loop state, the trainer's ``Progress`` as a
dict). The header holds the format, the payload's SHA-256 and size, and the run identity
(:func:`run_identity`: model, settings hash and settings, data signature, world size); ``read_checkpoint``
checks the identity and then the digest before anything is unpickled. Files are written under a temporary
name and moved into place with ``os.replace``, so an interruption at any moment leaves either the previous
complete file or the new one; :func:`remove_stale_temporaries` deletes what a kill left of a write.
:class:`RunLock` is the lock file beside a run's checkpoint that its trainer holds for the whole training.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
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
from ..names import path_name
from ..paths import PROJECT_ROOT
from .config import TrainConfig, config_hash

CHECKPOINT_DIR = PROJECT_ROOT / "checkpoints"
INTERRUPT_AFTER_BATCHES_ENV = "PRISM_REC_INTERRUPT_AFTER_BATCHES"
CHECKPOINT_FORMAT = "prism-rec-training-2"
CHECKPOINT_MAGIC = b"prism-rec checkpoint\n"
IDENTITY_FIELDS = {"model": "model", "settings": "settings", "data": "data", "world_size": "number of processes"}


def checkpoint_file(dataset: str, model: str, seed: int, run_hash: str, root: Path = CHECKPOINT_DIR) -> Path:
    """checkpoints/<dataset>/<model>-s<seed>-<hash>.pt (``dataset`` and ``model`` must be plain names; the colon
    of a bridged model's "recbole:<Model>" becomes "_")."""
    name = path_name(model.replace(":", "_"), "model")
    return Path(root) / path_name(dataset, "dataset") / f"{name}-s{int(seed)}-{run_hash}.pt"


def save_atomically(state: dict, path: Path) -> None:
    """Write ``state`` (torch.save) to ``path`` through :func:`write_atomically`."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_atomically(path, buffer.getvalue())


def run_identity(model: str, config: TrainConfig, dataset: ProcessedDataset, world_size: int) -> dict:
    """What a checkpoint must match to be resumed: the model, the settings (``TrainConfig.identity()``, as
    JSON values, and their hash), the data signature and the number of processes."""
    settings = json.loads(json.dumps(config.identity(), sort_keys=True, default=str))
    return {"model": model, "settings": config_hash(settings), "config": settings,
            "data": data_signature(dataset), "world_size": world_size}


def write_checkpoint(state: dict, identity: dict, path: Path) -> None:
    """Write the training checkpoint ``state`` of the run ``identity`` (:func:`run_identity`) to ``path``:
    magic line, header line, payload (module docstring)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = {"format": CHECKPOINT_FORMAT, "identity": identity, "sha256": hashlib.sha256(payload).hexdigest(),
              "bytes": len(payload)}
    write_atomically(path, CHECKPOINT_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)


def _header(path: Path) -> tuple[dict, bytes]:
    """The header and payload of the checkpoint at ``path``; a ValueError names the file when it is not one."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {path} does not exist") from None
    if not data.startswith(CHECKPOINT_MAGIC):
        raise ValueError(f"checkpoint {path}: not a prism-rec training checkpoint of format {CHECKPOINT_FORMAT} "
                         "(older or foreign file); delete it to train from scratch")
    line, _, payload = data[len(CHECKPOINT_MAGIC):].partition(b"\n")
    try:
        header = json.loads(line)
        header["identity"].get, header["sha256"], header["bytes"]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError(f"checkpoint {path}: its header is damaged; delete it to train from scratch") from None
    return header, payload


def _payload(path: Path, header: dict, payload: bytes) -> dict:
    """The state in ``payload``, loaded once its size and SHA-256 match the header's."""
    digest = hashlib.sha256(payload).hexdigest()
    if len(payload) != header["bytes"] or digest != header["sha256"]:
        raise ValueError(f"checkpoint {path}: content digest mismatch ({len(payload)} bytes, sha256 {digest[:16]}; "
                         f"written {header['bytes']} bytes, sha256 {str(header['sha256'])[:16]}): the file is "
                         "corrupt; delete it to train from scratch")
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:
        raise ValueError(f"checkpoint {path} cannot be read ({type(error).__name__}: {error})") from None


def load(path: Path) -> dict:
    """The state of the training checkpoint at ``path`` (tensors on the CPU), its digest checked."""
    header, payload = _header(path)
    return _payload(path, header, payload)


def data_signature(dataset: ProcessedDataset) -> str:
    """A hash of the processed sequences and cases: the data a checkpoint was trained on."""
    digest = hashlib.blake2b(digest_size=8)
    for array in (dataset.items, dataset.offsets, dataset.train_length, dataset.valid_cases, dataset.test_cases):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def read_checkpoint(path: Path, identity: dict) -> dict:
    """The state of the training checkpoint at ``path``, checked (before it is unpickled) to be one of the run
    ``identity`` (:func:`run_identity`) and intact; a one-line ValueError names the file and what differs."""
    header, payload = _header(path)
    found = header["identity"]
    for key, label in IDENTITY_FIELDS.items():
        if found.get(key) != identity[key]:
            if key == "settings":
                theirs, ours = found.get("config") or {}, identity["config"]
                changed = sorted(k for k in {**theirs, **ours} if theirs.get(k) != ours.get(k))
                detail = f"written with other settings ({', '.join(changed)})"
            elif key == "world_size":
                detail = (f"written by {found.get(key)} processes; resume with NPROC={found.get(key)} "
                          f"(this run has {identity[key]})")
            elif key == "data":
                detail = "trained on other data (the dataset's files or processing changed since)"
            else:
                detail = f"written for {label} {found.get(key)!r}, this run is {identity[key]!r}"
            raise ValueError(f"checkpoint {path}: {detail}; delete it to train from scratch")
    return _payload(path, header, payload)


class RunLock:
    """An exclusive lock (flock) on ``<checkpoint>.lock`` beside a run's checkpoint, which holds the pid of the
    process that trains the run. ``acquire`` returns False (and sets ``holder``) when another process holds
    it; ``release`` deletes the file. The lock goes with the process, so a kill frees it."""

    def __init__(self, checkpoint: Path):
        self.path = Path(f"{checkpoint}.lock")
        self.handle = None
        self.holder: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = open(self.path, "a+")  # noqa: SIM115 (held open, and locked, for the whole training)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES):
                    handle.close()
                    raise
                handle.seek(0)
                text = handle.read().strip()
                handle.close()
                self.holder = int(text) if text.isdigit() else None
                return False
            try:  # a holder that released it between our open and flock deleted this file: lock the new one
                current = os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                current = False
            if current:
                handle.truncate(0)
                handle.write(str(os.getpid()))
                handle.flush()
                self.handle = handle
                return True
            handle.close()

    def release(self) -> None:
        if self.handle is not None:
            self.path.unlink(missing_ok=True)
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


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
