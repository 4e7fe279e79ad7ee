"""One slice of the headline grid through the dask executor, then the same slice through the local pool:
throughput of each in runs per GPU-hour, and whether the two trained the same runs to the same metrics.

    python3 benchmarks/cluster_bench.py --out DIR [--datasets ml-100k] [--models ...] [--seeds 3]
        [--runs-per-device 12] [--device cuda] [--budget 150] [--set KEY=VALUE ...]

The dask side is a scheduler and ``--runs-per-device`` single-threaded worker processes started here on
127.0.0.1 (CUDA_VISIBLE_DEVICES=0 and the resource GPU=1/k each on CUDA, so the driver's runs ask for
1/k of a GPU; the environment's CUDA MPS server, if any, serves them as it serves the pool), stopped by
their process ids once its driver returns; the local side is ``headline run --workers k`` on the same
device. Each side starts from an empty manifest under DIR/dask and DIR/local, with ``--budget`` seconds
(runs in flight at its end are abandoned), and from empty compile caches of its own (TorchInductor's
and Triton's under DIR/<side>/compile_cache), so that both pay for compiling the same kernels: with one shared
cache the side that goes second trains on the first side's compiled kernels and looks several times
faster (``--shared-cache`` measures that way, the dask side first). DIR/cluster_bench.md and
DIR/cluster_bench.json get the results: runs finished, wall seconds of each driver (and the dask workers'
start), runs per GPU-hour (finished runs over the driver's wall time on one GPU), and for each run both
finished, whether its test and validation metrics are identical (CPU runs are bit-identical; CUDA runs are
where the kernels are deterministic).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prism_rec.experiments.headline.protocol import MANIFEST_NAME
from prism_rec.files import read_jsonl, write_atomically

START_SECONDS = 120.0
RUN_KEYS = ("dataset", "model", "seed", "lr", "config_hash")
MODELS = "pop,sasrec,gated_deltanet,mamba2,hstu,prism,prism-L0,prism-L1"


def headline_command(args: argparse.Namespace, out: Path, *executor: str) -> list[str]:
    words = [sys.executable, "-m", "prism_rec.cli", "headline", "run", "--out", str(out), "--datasets",
             args.datasets, "--models", args.models, "--seeds", str(args.seeds), "--device", args.device,
             "--budget", str(args.budget), *executor]
    for pair in args.set:
        words += ["--set", pair]
    return words


def side_environment(args: argparse.Namespace, out: Path) -> dict[str, str]:
    """The environment of one side's processes: its own empty compile caches unless ``--shared-cache``."""
    if args.shared_cache:
        return dict(os.environ)
    caches = out / "compile_cache"
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
            "TRITON_CACHE_DIR": str(caches / "triton")}


def timed(command: list[str], log: Path, environment: dict[str, str]) -> float:
    """Run ``command`` with its output to ``log``; its wall seconds (a failed run's driver exits 1: its
    log says which, and the results count only finished runs)."""
    started = time.time()
    with log.open("w") as output:
        subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, check=False, env=environment)
    return time.time() - started


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # started in a session of its own
        process.wait(timeout=30)


def dask_side(args: argparse.Namespace, out: Path) -> tuple[float, float]:
    """The slice on a loopback cluster of ``runs_per_device`` workers: (seconds to start them, the driver's
    wall seconds)."""
    import distributed

    k, cuda = args.runs_per_device, args.device.startswith("cuda")
    scheduler_file, started = out / "scheduler.json", time.time()
    environment = {**side_environment(args, out), **({"CUDA_VISIBLE_DEVICES": "0"} if cuda else {})}
    common = ["--no-dashboard", "--host", "127.0.0.1"]
    processes = []
    client = None
    try:
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0", "--scheduler-file",
             str(scheduler_file), *common], start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=(out / "scheduler_log.txt").open("w")))
        while not scheduler_file.exists():
            if time.time() - started > START_SECONDS or processes[0].poll() is not None:
                raise RuntimeError(f"no Dask scheduler started (see {out / 'scheduler_log.txt'})")
            time.sleep(0.2)
        share = ["--resources", f"GPU={1 / k!r}"] if cuda else []
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file),
             "--nworkers", str(k), "--nthreads", "1", "--memory-limit", "0", *share, *common],
            start_new_session=True, env=environment, stdout=subprocess.DEVNULL,
            stderr=(out / "workers_log.txt").open("w")))
        client = distributed.Client(scheduler_file=str(scheduler_file), timeout=START_SECONDS)
        client.wait_for_workers(k, timeout=START_SECONDS)
        address = client.scheduler.address
        workers_seconds = time.time() - started
        wall = timed(headline_command(args, out, "--executor", "dask", "--scheduler", address,
                                      *(["--runs-per-gpu", str(k)] if cuda else [])), out / "headline_log.txt",
                     environment)
        return workers_seconds, wall
    finally:
        if client is not None:
            client.close()
        stop(processes)


def compare(dask: list[dict], local: list[dict]) -> dict:
    """Runs each side finished, those both did, how many of those have identical test and validation
    metrics, and the largest test AUC gap."""
    def metrics(entry: dict) -> dict:
        return {k: v for k, v in entry.items() if k.startswith(("test_", "best_valid_"))
                or k in ("epochs_run", "best_epoch")}

    runs = [{tuple(e[key] for key in RUN_KEYS): e for e in side if "test_auc" in e} for side in (dask, local)]
    both = sorted(set(runs[0]) & set(runs[1]), key=str)
    identical = [key for key in both if metrics(runs[0][key]) == metrics(runs[1][key])]
    gaps = [abs(runs[0][key]["test_auc"] - runs[1][key]["test_auc"]) for key in both]
    return {"both": len(both), "identical": len(identical), "max_test_auc_gap": max(gaps, default=0.0),
            "differing": ["/".join(map(str, key[:4])) for key in both if key not in identical]}


def results_markdown(results: dict) -> str:
    rows = [f"| {side} | {r['finished']} | {r['wall_seconds']:.0f} | {r['runs_per_gpu_hour']:.0f} |"
            for side, r in results["sides"].items()]
    check = results["comparison"]
    return "\n".join([
        "# The dask executor beside the local pool", "",
        f"Made by `{results['command']}` at commit {results['git_commit']} on {results['machine']}; "
        f"{results['runs_per_device']} runs at once on the device ({results['device']}), budget "
        f"{results['budget']:.0f} s per side, dask first, "
        + ("one compile cache for both (the local side reuses the kernels the dask side compiled)."
           if results.get("shared_cache") else "each side from empty compile caches of its own."), "",
        "| executor | runs finished | driver wall s | runs per GPU-hour |", "| --- | ---: | ---: | ---: |", *rows, "",
        f"The dask workers took {results['dask_workers_seconds']:.0f} s to start (before its driver's wall time).",
        f"Runs both finished: {check['both']}; with identical test and validation metrics: {check['identical']}; "
        f"largest test AUC gap {check['max_test_auc_gap']:.2e}"
        + (f" (differing: {', '.join(check['differing'])})." if check["differing"] else "."), ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--datasets", default="ml-100k")
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--runs-per-device", type=int, default=12)
    parser.add_argument("--device", default="cuda", help="cuda (the first GPU) or cpu")
    parser.add_argument("--budget", type=float, default=150.0, help="seconds per side")
    parser.add_argument("--shared-cache", action="store_true",
                        help="both sides use the environment's compile caches (the second reuses the first's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="headline run --set")
    args = parser.parse_args(argv)
    sides = {name: args.out / name for name in ("dask", "local")}
    for folder in sides.values():
        folder.mkdir(parents=True, exist_ok=False)
    workers_seconds, dask_wall = dask_side(args, sides["dask"])
    local_wall = timed(headline_command(args, sides["local"], "--workers", str(args.runs_per_device)),
                       sides["local"] / "headline_log.txt", side_environment(args, sides["local"]))
    manifests = {name: read_jsonl(folder / MANIFEST_NAME) for name, folder in sides.items()}
    walls = {"dask": dask_wall, "local": local_wall}
    from prism_rec.tracking.store import git_commit, machine_description
    from prism_rec.training.devices import resolve_device

    results = {
        "command": " ".join(["python3", "benchmarks/cluster_bench.py", *(argv or sys.argv[1:])]),
        "git_commit": git_commit(), "machine": machine_description(resolve_device(args.device)),
        "device": args.device, "runs_per_device": args.runs_per_device, "budget": args.budget,
        "shared_cache": args.shared_cache, "dask_workers_seconds": workers_seconds,
        "comparison": compare(manifests["dask"], manifests["local"]),
        "sides": {name: {"finished": sum("test_auc" in e for e in manifests[name]), "wall_seconds": walls[name],
                         "runs_per_gpu_hour": sum("test_auc" in e for e in manifests[name]) * 3600 / walls[name]}
                  for name in sides}}
    write_atomically(args.out / "cluster_bench.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    write_atomically(args.out / "cluster_bench.md", results_markdown(results))
    print(results_markdown(results), flush=True)


if __name__ == "__main__":
    main()
