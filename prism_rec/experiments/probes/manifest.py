"""The manifest of finished probe runs (``probes_manifest.jsonl``, one JSON line per run) and run identities.

A run is found again by its identity: task, model spec, seed, every setting, the task's format version and
the probe protocol. ``PROTOCOL`` 2: every backbone at its reference initialisation
(``prism_rec/models/init.py``), the authors' bias-free head, the loss and accuracy read at the final token only.
Runs written before it carry no protocol (1) and are never taken for protocol-2 runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...files import read_jsonl, write_jsonl
from .settings import ProbeSettings
from .tasks import TASKS

MANIFEST_NAME = "probes_manifest.jsonl"
CHECKPOINTS_NAME = "probes_checkpoints.pt"
PROTOCOL = 2


def run_identity(task: str, model: str, seed: int, settings: ProbeSettings, version: int | None = None,
                 protocol: int = PROTOCOL) -> str:
    """The key of a run: task, model spec, seed, every setting, the task's format version (the current one
    unless given) and the protocol; version 1 and protocol 1 stay out, as before either existed."""
    version = TASKS[task].version if version is None else version
    marks = ([version] if version != 1 else []) + ([{"protocol": protocol}] if protocol != 1 else [])
    return json.dumps([task, model, seed, settings.as_dict(), *marks], sort_keys=True)


def entry_identity(entry: dict) -> str:
    return run_identity(entry["task"], entry["model"], entry["seed"], ProbeSettings(**entry["settings"]),
                        entry.get("task_version", 1), entry.get("protocol", 1))


def load_manifest(out_dir: Path) -> list[dict]:
    return read_jsonl(Path(out_dir) / MANIFEST_NAME)


def save_manifest(out_dir: Path, entries: list[dict]) -> None:
    write_jsonl(Path(out_dir) / MANIFEST_NAME, entries)
