"""Run many planned probes (``grid.ProbeRun``) as a campaign (campaign.py: worker processes sharing one device,
or a Dask cluster's workers), within a budget.

Finished runs go to the manifest (``<out>/probes_manifest.jsonl``) and to MLflow (experiment "probes",
one run per (task, model, seed); ``log_manifest_to_mlflow`` adds runs made where MLflow is absent) as
they complete, so an interrupted invocation loses only its in-flight
runs. Runs already in the manifest with identical settings are skipped. With ``time_budget`` seconds no
run is started after the deadline and in-flight runs pause at it: their model, optimiser and data-stream
state go to ``<out>/probes_checkpoints.pt`` (loaded with ``weights_only=True``; with ``checkpoint_limit``
bytes, a paused run whose checkpoint would not fit is dropped and starts over next time) and the next
invocation over the same folder continues them. A run that has not paused ``PAUSE_GRACE_SECONDS`` after the
deadline (a first step still compiling) is abandoned, its worker killed: it resumes from its previous
checkpoint, if any, or starts over. Runs start in the order given. ``compile`` is the training
step's mode (``prism_rec.training.compile``), recorded in each manifest entry as resolved ("off" on CPU).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import torch

from ...tracking.runs import log_finished_run
from ...tracking.runs import search as search_runs
from ...tracking.store import experiment_id, git_commit, machine_description
from ...training.checkpoint import save_atomically
from ...training.compile import resolve_compile
from ...training.devices import resolve_device
from ..campaign import Campaign, Executor, LocalExecutor, Manifest, Status, deadline_after
from .grid import ProbeRun
from .manifest import CHECKPOINTS_NAME, MANIFEST_NAME, PROTOCOL, entry_identity, load_manifest
from .tasks import TASKS
from .train import ProbeJob, train_probe

PAUSE_GRACE_SECONDS = 15.0  # a run between steps pauses within one step (milliseconds); compiling takes longer

EXPERIMENT = "probes"


def _load_checkpoints(out_dir: Path) -> dict[str, bytes]:
    path = out_dir / CHECKPOINTS_NAME
    stored = torch.load(path, weights_only=True) if path.exists() else {}
    # uint8 tensors; bytes in files of earlier versions
    return {identity: blob if isinstance(blob, bytes) else blob.numpy().tobytes() for identity, blob in stored.items()}


def _save_checkpoints(out_dir: Path, checkpoints: dict[str, bytes]) -> None:
    """Each run's checkpoint as a uint8 tensor: torch.save pickles ``bytes`` (protocol 2) as latin-1 text
    stored in UTF-8, about 1.5 times their size, which would break ``checkpoint_limit``."""
    path = out_dir / CHECKPOINTS_NAME
    if checkpoints:
        save_atomically({identity: torch.frombuffer(bytearray(blob), dtype=torch.uint8)
                         for identity, blob in checkpoints.items()}, path)
    elif path.exists():
        path.unlink()


def _log_to_mlflow(entry: dict, command: str) -> None:
    """One MLflow run (experiment "probes") for a manifest entry, unless a run with its identity exists."""
    experiment = experiment_id(EXPERIMENT)
    identity = hashlib.sha1(entry_identity(entry).encode()).hexdigest()
    if len(search_runs(experiment, f"tags.probe_identity = '{identity}'")):
        return
    tags = {key: str(entry[key]) for key in ("device", "machine", "git_commit", "torch_version")}
    tags.update({"command": command, "probe_identity": identity,
            "task": entry["task"], "model": entry["model"], "seed": str(entry["seed"])})
    params = {"task": entry["task"], "task_version": entry.get("task_version", 1),
              "protocol": entry.get("protocol", 1), "model": entry["model"], "seed": entry["seed"],
              "profile": entry["profile"], "compile": entry.get("compile", "off"), **entry["settings"]}
    metrics = {"final_accuracy": entry["accuracy"], "final_train_loss": entry["final_train_loss"],
               "wall_seconds": entry["wall_seconds"], "n_parameters": entry["n_parameters"],
               "steps_per_second": entry["steps"] / max(entry["wall_seconds"], 1e-9)}
    log_finished_run(experiment, f"{entry['task']}-{entry['model']}-s{entry['seed']}", tags, params, metrics,
                     {"train_loss": [(step, loss) for step, loss in entry["loss_curve"]]})


def log_manifest_to_mlflow(out_dir: Path, command: str) -> int:
    """Log every run of ``out_dir``'s manifest not yet in MLflow (runs made where MLflow was absent)."""
    entries = load_manifest(Path(out_dir))
    if not entries:
        raise FileNotFoundError(f"option --out: no finished runs in {Path(out_dir) / MANIFEST_NAME}")
    for entry in entries:
        _log_to_mlflow(entry, command)
    return len(entries)


def run_probes(runs: list[ProbeRun], out_dir: Path, device: str = "auto", workers: int = 1,
               time_budget: float | None = None, command: str = "", log_mlflow: bool = True,
               checkpoint_limit: int | None = None, compile: str = "off", start_margin: float = 0.0,
               executor: Executor | None = None) -> dict:
    """Train every run of ``runs`` not yet in the manifest, in order, on ``executor`` (default: a local pool
    of ``workers`` processes on ``device``); returns counts per status and the labels of the runs left
    unfinished. No run starts within ``start_margin`` seconds of the budget's end: a run checks the
    deadline only between steps, and its first step (compilation) can take that long."""
    if start_margin < 0:
        raise ValueError(f"option --start-margin: must be >= 0 seconds, got {start_margin}")
    deadline = deadline_after(time_budget, "--time-budget")
    executor = executor or LocalExecutor(workers, device)
    out_dir = Path(out_dir)
    step_mode = (resolve_compile(compile, resolve_device(executor.devices.names[0]))
                 if isinstance(executor, LocalExecutor) else f"{compile} (as each worker's device allows)")
    manifest = Manifest(out_dir / MANIFEST_NAME, key=entry_identity)
    finished = manifest.keys()
    checkpoints = _load_checkpoints(out_dir)
    pending = [ProbeJob(run.task, run.model, run.seed, run.settings, executor.job_device, deadline,
                        checkpoints.get(run.identity), run.profile, run.label, compile)
               for run in runs if run.identity not in finished]
    campaign = Campaign(executor, deadline, {"skipped (already in manifest)": len(runs) - len(pending)},
                        (Status.FINISHED, Status.PAUSED, Status.ABANDONED, Status.FAILED))
    counts = campaign.counts
    unfinished: list[str] = []
    total = len(pending)
    print(f"{total} probe runs to do on {executor.describe()}, compile {step_mode}"
          f"{f', budget {time_budget:.0f} s' if time_budget else ''}; {counts['skipped (already in manifest)']} "
          f"already in {out_dir}", flush=True)

    def late() -> str:
        return f", {time.time() - deadline:.1f} s after the deadline"

    def record(job: ProbeJob, status: Status, result: dict) -> None:
        identity = job.identity
        if status is Status.FINISHED:
            entry = {"task": job.task, "task_version": TASKS[job.task].version, "protocol": PROTOCOL,
                     "model": job.model, "seed": job.seed, "profile": job.profile,
                     "settings": job.settings.as_dict(), "accuracy": result["accuracy"],
                     "final_train_loss": result["final_train_loss"], "loss_curve": result["loss_curve"],
                     "steps": result["steps"], "wall_seconds": round(result["wall_seconds"], 2),
                     "n_parameters": result["n_parameters"], "device": result["device"], "compile": result["compile"],
                     "machine": machine_description(torch.device(result["device"])), "git_commit": git_commit(),
                     "torch_version": torch.__version__,
                     "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
            manifest.add(entry)
            if checkpoints.pop(identity, None) is not None:
                _save_checkpoints(out_dir, checkpoints)
            if log_mlflow:
                _log_to_mlflow(entry, command)
            print(f"[{sum(counts[s] for s in ('finished', 'paused', 'failed'))}/{total}] {job.label}: accuracy "
                  f"{result['accuracy']:.3f}, loss {result['final_train_loss']:.3f}, {result['wall_seconds']:.0f} s",
                  flush=True)
            return
        unfinished.append(job.label)
        if status is Status.PAUSED:
            kept = sum(len(blob) for key, blob in checkpoints.items() if key != identity)
            if checkpoint_limit is not None and kept + len(result["checkpoint"]) > checkpoint_limit:
                checkpoints.pop(identity, None)
                print(f"{job.label}: paused at step {result['step']}{late()}; its checkpoint would pass "
                      f"{checkpoint_limit} bytes, dropped (the run starts over next time)", flush=True)
            else:
                checkpoints[identity] = result["checkpoint"]
                print(f"{job.label}: paused at step {result['step']}{late()} (checkpoint kept)", flush=True)
            _save_checkpoints(out_dir, checkpoints)
        elif status is Status.ABANDONED:
            resumes = "resumes from its previous checkpoint" if identity in checkpoints else "starts over"
            print(f"{job.label}: not paused {PAUSE_GRACE_SECONDS:.0f} s after the deadline (its step still running, "
                  f"most likely compiling), abandoned; it {resumes} next time", flush=True)

    not_started = campaign.run(pending, train_probe, record, abandon_after=PAUSE_GRACE_SECONDS,
                               expected_seconds=(lambda job: start_margin) if start_margin else None)
    unfinished += [job.label for job in not_started]
    print(campaign.summary(), flush=True)
    return {"counts": counts, "unfinished": unfinished}
