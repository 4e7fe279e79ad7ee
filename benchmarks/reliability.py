"""The reliability sweep: hostile inputs, kills and overlaps tried against the command line, each probe's
command, expected and observed outcome written to results/reliability.md.

    python3 benchmarks/reliability.py [--out results/reliability.md] [--work DIR] [--areas names,options,...]
    (make reliability)

CPU only, minutes: every training is one epoch of a 16-wide SASRec or GRU4Rec on ml-100k (its processed
cache, datasets/processed). Each probe runs in a fresh workspace (an MLflow store, checkpoint and results
folders of its own under --work, a temporary folder by default), by ``prism-rec`` in this process
(``cli.main``, its exit status and output caught) or in subprocesses where it needs processes of its own
(kills, two benches at once). A probe holds when what it observed is what it expected; the script exits 1
when one does not.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prism_rec.files import write_atomically  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "fixtures"
TINY = ["--seeds", "1", "--device", "cpu", "--epochs", "1", "--d-model", "16", "--max-len", "8", "--batch-size", "256",
        "--eval-batch-size", "1024", "--no-progress"]


@dataclass
class Outcome:
    code: int | str | None
    out: str
    err: str

    def line(self) -> str:
        """The exit status and the last line of the error output (or of the output)."""
        lines = [line for line in (self.err or self.out).splitlines() if line.strip()]
        return f"exit {self.code}" + (f": {lines[-1].strip()}" if lines else "")


@dataclass
class Probe:
    group: str
    command: str
    expected: str
    run: Callable[[Path], tuple[str, bool]]


PROBES: list[Probe] = []


def probe(group: str, command: str, expected: str):
    def register(run):
        PROBES.append(Probe(group, command, expected, run))
        return run
    return register


def cli(*argv: str) -> Outcome:
    """``prism-rec ARGV`` in this process."""
    from prism_rec.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
            if isinstance(stop.code, str):
                print(stop.code, file=err)
    return Outcome(code, out.getvalue(), err.getvalue())


def spawn(work: Path, *argv: str, store: Path | None = None) -> subprocess.Popen:
    """``prism-rec ARGV`` as a subprocess of one thread, logging to ``store`` (default the workspace's)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": f"sqlite:///{store or work / 'mlflow.db'}"}
    return subprocess.Popen([sys.executable, "-m", "prism_rec.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def bench_args(work: Path, models: str = "sasrec") -> list[str]:
    return ["bench", "--models", models, *TINY, "--checkpoint-dir", str(work / "checkpoints"),
            "--results-dir", str(work / "results")]


def wait_for(folder: Path, pattern: str, process: subprocess.Popen, seconds: float = 120) -> Path:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = sorted(folder.rglob(pattern))
        if found:
            return found[0]
        if process.poll() is not None:
            raise RuntimeError(f"process ended before {pattern} appeared: {process.stdout.read()[-500:]}")
        time.sleep(0.02)
    raise RuntimeError(f"no {pattern} under {folder} after {seconds} s")


def interrupted_checkpoint(work: Path, models: str = "sasrec") -> Path:
    """A bench stopped after 3 batches (its checkpoint kept); the checkpoint's path."""
    os.environ["PRISM_REC_INTERRUPT_AFTER_BATCHES"] = "3"
    try:
        cli(*bench_args(work, models))
    finally:
        del os.environ["PRISM_REC_INTERRUPT_AFTER_BATCHES"]
    [path] = sorted((work / "checkpoints").rglob("*.pt"))
    return path


def expect(outcome: Outcome, code: int, text: str) -> tuple[str, bool]:
    return outcome.line(), outcome.code == code and text in outcome.line()


# -- 1. checkpoints ------------------------------------------------------------------------------------------

def damaged_resume(work: Path, damage: Callable[[bytearray], None]) -> tuple[str, bool]:
    path = interrupted_checkpoint(work)
    data = bytearray(path.read_bytes())
    damage(data)
    path.write_bytes(bytes(data))
    return expect(cli(*bench_args(work), "--resume"), 1, f"checkpoint {path}: content digest mismatch")


def flip_bytes(data: bytearray) -> None:
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])


def flip_bit(data: bytearray) -> None:
    data[len(data) // 2] ^= 0x01


@probe("checkpoint", "bench (stopped after 3 batches), 64 bytes of its checkpoint flipped, bench --resume",
       "exit 1, one line: the checkpoint's path, content digest mismatch")
def flipped_bytes(work: Path) -> tuple[str, bool]:
    return damaged_resume(work, flip_bytes)


@probe("checkpoint", "bench (stopped after 3 batches), one bit of its checkpoint flipped, bench --resume",
       "exit 1, one line: the checkpoint's path, content digest mismatch")
def flipped_bit(work: Path) -> tuple[str, bool]:
    return damaged_resume(work, flip_bit)


@probe("checkpoint", "gru4rec's checkpoint copied to sasrec's checkpoint path, bench --models sasrec --resume",
       "exit 1, one line: written for model 'gru4rec', this run is 'sasrec'")
def foreign_model(work: Path) -> tuple[str, bool]:
    theirs = interrupted_checkpoint(work / "theirs", "gru4rec")
    ours = interrupted_checkpoint(work)
    shutil.copyfile(theirs, ours)
    return expect(cli(*bench_args(work), "--resume"), 1, "written for model 'gru4rec', this run is 'sasrec'")


@probe("checkpoint", "bench --lr 0.001 (stopped after 3 batches), bench --lr 0.002 --resume",
       "exit 1: the checkpoint's settings named (lr)")
def other_settings(work: Path) -> tuple[str, bool]:
    path = interrupted_checkpoint(work)
    os.environ["PRISM_REC_INTERRUPT_AFTER_BATCHES"] = "3"
    try:  # the run of other settings has its own checkpoint name: put the first one there
        cli(*bench_args(work), "--lr", "0.002")
    finally:
        del os.environ["PRISM_REC_INTERRUPT_AFTER_BATCHES"]
    [other] = [p for p in (work / "checkpoints").rglob("*.pt") if p != path]
    shutil.copyfile(path, other)
    return expect(cli(*bench_args(work), "--lr", "0.002", "--resume"), 1, "written with other settings (lr)")


@probe("checkpoint", "bench (stopped after 3 batches), bench --resume", "exit 0, the run resumed and finished")
def intact_resume(work: Path) -> tuple[str, bool]:
    interrupted_checkpoint(work)
    outcome = cli(*bench_args(work), "--resume")
    return outcome.line(), outcome.code == 0 and "resuming from" in outcome.out


# -- 2. names that become paths ------------------------------------------------------------------------------

def import_record(work: Path, experiment: str) -> tuple[str, bool]:
    from prism_rec.tracking.records import RECORD_FORMAT

    source = work / "in" / "gpu.records.jsonl"
    source.parent.mkdir(parents=True)
    source.write_text(json.dumps({"format": RECORD_FORMAT, "experiment": experiment, "run_name": "sasrec-s0"}) + "\n")
    outcome = cli("import-runs", str(source))
    written = sorted(p.name for p in work.iterdir())
    return (f"{outcome.line()}; workspace holds {', '.join(written)}",
            outcome.code == 1 and "expected a plain name" in outcome.line() and written == ["in"])


for name in ("../../..", "/tmp/escape", "a/b", "a\\b", "a\0b", ".."):
    probe("names", f"import-runs of a record whose experiment is {name!r}",
          "exit 1, one line naming file:line and the experiment; nothing written")(
        lambda work, name=name: import_record(work, name))


@probe("names", "tables --results-dir R over a store holding an experiment '../../escape' (an older import)",
       "the experiment skipped with one line; nothing written outside R")
def tables_skip(work: Path) -> tuple[str, bool]:
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mlflow.create_experiment("../../escape", artifact_location=(work / "artifacts").as_uri())
    results = work / "a" / "b" / "results"
    outcome = cli("tables", "--results-dir", str(results))
    escaped = (results / "../../escape").resolve().exists()
    return (f"{outcome.line()}; outside R: {'written' if escaped else 'nothing'}",
            outcome.code == 0 and "skipped: not a plain name" in outcome.err and not escaped)


for name in ("../x", "/etc", "a\0b"):
    probe("names", f"bench --dataset {name!r}", "exit 2, one line naming --dataset")(
        lambda work, name=name: expect(cli("bench", "--dataset", name, *TINY), 2, "option --dataset"))


# -- 3. overlapping benches ----------------------------------------------------------------------------------

@probe("lock", "bench A sasrec,gru4rec holds gru4rec's lock (stopped by SIGSTOP); bench B gru4rec over the same "
       "checkpoints (another store)", "B skips gru4rec naming A's pid and the lock, exit 0; A's lock and "
       "checkpoint untouched; A then finishes")
def overlap(work: Path) -> tuple[str, bool]:
    first = spawn(work, *bench_args(work, "sasrec,gru4rec"), store=work / "a.db")
    second = None
    try:
        lock = wait_for(work / "checkpoints", "gru4rec-*.lock", first)
        first.send_signal(signal.SIGSTOP)
        second = spawn(work, *bench_args(work, "gru4rec"))
        output = second.communicate(timeout=300)[0]
        skipped = [line for line in output.splitlines() if "skipped" in line]
        kept = lock.exists()
        first.send_signal(signal.SIGCONT)
        finished = first.wait(timeout=300)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
    observed = f"B exit {second.returncode}: {skipped[0].strip() if skipped else 'no skip'}; A exit {finished}"
    return observed, (second.returncode == 0 and bool(skipped) and f"process {first.pid}" in skipped[0] and kept
                      and finished == 0)


# -- 4. probe on CPU -----------------------------------------------------------------------------------------

@probe("probe", "probe --tasks parity --models sasrec --seeds 1 --steps 2 --eval-size 16 --batch-size 4 "
       "--seq-len 8 --no-mlflow (default --device auto, on a CPU)", "exit 0, probes.md written")
def probe_on_cpu(work: Path) -> tuple[str, bool]:
    outcome = cli("probe", "--tasks", "parity", "--models", "sasrec", "--seeds", "1", "--steps", "2", "--eval-size",
                  "16", "--batch-size", "4", "--seq-len", "8", "--out", str(work / "probes"), "--no-mlflow")
    return outcome.line().splitlines()[0][:120], outcome.code == 0 and (work / "probes" / "probes.md").is_file()


# -- 5. options ----------------------------------------------------------------------------------------------

OPTIONS = [
    ("bench --n-heads -2", "option --n-heads"), ("bench --n-heads 0", "option --n-heads"),
    ("bench --dropout nan", "option --dropout"), ("bench --seeds=-1,2", "option --seeds"),
    ("bench --seeds 4294967296,1", "option --seeds"), ("bench --seeds 1e12", "option --seeds"),
    ("bench --seeds 1000000000000", "option --seeds"), ("bench --lr 1e300", "option --lr"),
    ("bench --max-len 1e9", "argument --max-len"), ("bench --max-len 1000000000", "option --max-len"),
    ("bench --max-len 0", "option --max-len"), ("bench --n-negatives 1000000000000", "option --n-negatives"),
    ("bench --device tpu", "option --device"), ("bench --models sasrec,sasrec", "option --models"),
    ("bench --models prism --option L=abc", "option --option L=abc"), ("bench --option L", "argument --option"),
    ("bench --threads 0", "option --threads"), ("probe --time-budget nan", "option --time-budget"),
    ("probe --workers 0", "option --workers"), ("probe --models sasrec,sasrec", "option --models"),
    ("headline run --out {work}/h --budget nan", "option --budget"),
    ("headline run --out {work}/h --seeds 0", "option --seeds"),
    ("throughput --steps 0", "option --steps"), ("throughput --total-budget -5", "option --total-budget"),
    ("ui --port 70000", "option --port"), ("list --d-model 0", "option --d-model"),
    ("data download --dataset ml-100k --timeout nan", "option --timeout"),
    ("bench --results-dir /proc/results", "option --results-dir"),
    ("bench --checkpoint-dir {work}/a-file", "option --checkpoint-dir"),
    ("probe --out /proc/probes", "option --out"),
]


def option_probe(work: Path, command: str, named: str) -> tuple[str, bool]:
    (work / "a-file").write_text("")
    outcome = cli(*shlex.split(command.format(work=work)))
    one_line = len(outcome.err.strip().splitlines()) == 1
    untouched = not (work / "mlflow.db").exists()
    observed = outcome.line() + ("" if one_line else " (more than one line)") + ("" if untouched else " (logged)")
    return observed, outcome.code == 2 and named in outcome.line() and one_line and untouched


for command, named in OPTIONS:
    probe("options", command.format(work="WORK"),
          f"exit 2, one line naming {named.split()[-1]}, nothing logged")(
        lambda work, command=command, named=named: option_probe(work, command, named))


@probe("store", "tables with the sqlite store locked by another writer", "exit 1, one line: database is locked")
def locked_store(work: Path) -> tuple[str, bool]:
    from prism_rec.tracking import store

    holder = sqlite3.connect(work / "mlflow.db")
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    saved, store.STORE_WAIT_SECONDS = store.STORE_WAIT_SECONDS, 0.5
    try:
        outcome = cli("tables", "--results-dir", str(work / "results"))
    finally:
        store.STORE_WAIT_SECONDS = saved
        holder.close()
    return expect(outcome, 1, "database is locked")


@probe("store", "bench with mlflow.db overwritten by garbage", "exit 1, one line: not a usable sqlite database")
def corrupt_store(work: Path) -> tuple[str, bool]:
    (work / "mlflow.db").write_bytes(b"garbage" * 1000)
    return expect(cli(*bench_args(work)), 1, "not a usable sqlite database")


# -- 6. data -------------------------------------------------------------------------------------------------

def prepared(work: Path, folder: str, change: Callable[[bytes], bytes], file: str, *extra: str) -> tuple[Outcome, Path]:
    import gzip

    raw = work / "raw"
    shutil.copytree(FIXTURES / folder, raw)
    path = raw / file
    packed = file.endswith(".gz")
    data = change(gzip.decompress(path.read_bytes()) if packed else path.read_bytes())
    path.write_bytes(gzip.compress(data) if packed else data)
    return cli("data", "prepare", "--dataset", "books", "--raw-dir", str(raw), "--out", str(work / "processed"),
               "--min-user-interactions", "3", "--min-item-interactions", "1", "--no-progress", *extra), raw


def first_user(work: Path) -> str:
    from prism_rec.data.core import ProcessedDataset

    [cache] = sorted((work / "processed").rglob("*.npz"))
    return str(ProcessedDataset.load(cache).user_ids[0])


RAW_FILES = {"amazon2014": "reviews_Books_5.json.gz", "amazon2014csv": "ratings_Books.csv"}
for label, change, file in (
        ("a UTF-8 byte-order mark before a JSON reviews file", lambda d: b"\xef\xbb\xbf" + d, "amazon2014"),
        ("a UTF-8 byte-order mark before a ratings CSV", lambda d: b"\xef\xbb\xbf" + d, "amazon2014csv"),
        ("CR-only line endings in a JSON reviews file", lambda d: d.replace(b"\n", b"\r"), "amazon2014"),
        ("CR-only line endings in a ratings CSV", lambda d: d.replace(b"\n", b"\r"), "amazon2014csv")):
    def read_as_original(work: Path, change=change, folder=file) -> tuple[str, bool]:
        outcome, _ = prepared(work, folder, change, RAW_FILES[folder])
        user = first_user(work) if outcome.code == 0 else ""
        return f"exit {outcome.code}, first user {user!r}", outcome.code == 0 and user == "A1EE2E3N7PW666"
    probe("data", f"data prepare --dataset books over {label}", "exit 0, user ids as in the original file")(
        read_as_original)


@probe("data", "data prepare --dataset books over reviews with a bare NaN rating", "exit 1, file:line of the NaN")
def nan_rating(work: Path) -> tuple[str, bool]:
    outcome, _ = prepared(work, "amazon2014", lambda d: d.replace(b'"overall": 5.0', b'"overall": NaN', 1),
                          "reviews_Books_5.json.gz")
    return expect(outcome, 1, "'overall' is nan; expected a finite number")


@probe("data", "data prepare, then its processed cache cut to 200 bytes, data prepare again",
       "exit 1, one line: unreadable processed cache; delete it to rebuild")
def damaged_cache(work: Path) -> tuple[str, bool]:
    prepared(work, "amazon2014", lambda d: d, "reviews_Books_5.json.gz")
    [cache] = sorted((work / "processed").rglob("*.npz"))
    cache.write_bytes(cache.read_bytes()[:200])
    return expect(cli("data", "prepare", "--dataset", "books", "--raw-dir", str(work / "raw"), "--out",
                      str(work / "processed"), "--min-user-interactions", "3", "--min-item-interactions", "1",
                      "--no-progress"), 1, "delete it to rebuild")


# -- 7. leftovers --------------------------------------------------------------------------------------------

@probe("leftovers", "a temporary checkpoint file of a dead process in --checkpoint-dir, then bench",
       "the file removed at the start, said in one line; exit 0")
def stale_temporary(work: Path) -> tuple[str, bool]:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = work / "checkpoints" / "ml-100k" / f".sasrec-s0-0.pt.{ended.stdout.strip()}.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a checkpoint")
    outcome = cli(*bench_args(work))
    said = [line for line in outcome.out.splitlines() if line.startswith("removed")]
    return (f"exit {outcome.code}; {said[0] if said else 'not said'}; file {'left' if stale.exists() else 'gone'}",
            outcome.code == 0 and bool(said) and not stale.exists())


@probe("leftovers", "bench SIGKILLed in its first epoch (no checkpoint yet), then bench --resume",
       "the run trained again in its own MLflow run: one child, FINISHED, no KILLED twin")
def killed_before_checkpoint(work: Path) -> tuple[str, bool]:
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])

    def children():
        return mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'child'")

    killed = spawn(work, *bench_args(work))
    try:
        end = time.monotonic() + 120
        while not list((work / "checkpoints").rglob("*.lock")) or children().empty:
            if killed.poll() is not None or time.monotonic() > end:
                raise RuntimeError("the bench ended before its run began")
            time.sleep(0.01)
        killed.send_signal(signal.SIGKILL)
    finally:
        killed.kill()
        killed.wait()
    if list((work / "checkpoints").rglob("*.pt")):
        return "killed after its first checkpoint: the probe missed its moment", False
    outcome = cli(*bench_args(work), "--resume")
    runs = children()
    statuses = sorted(runs["status"])
    return f"exit {outcome.code}; children: {', '.join(statuses)}", outcome.code == 0 and statuses == ["FINISHED"]


# -- the sweep -----------------------------------------------------------------------------------------------

def run_all(work: Path) -> list[tuple[Probe, str, bool, float]]:
    rows = []
    for index, item in enumerate(PROBES, start=1):
        folder = work / f"probe-{index:02d}"
        folder.mkdir(parents=True)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
        started = time.perf_counter()
        try:
            observed, held = item.run(folder)
        except Exception as error:  # a probe that crashes has not held
            observed, held = f"{type(error).__name__}: {error}", False
        seconds = time.perf_counter() - started
        observed = observed.replace(str(folder), "WORK")
        rows.append((item, observed, held, seconds))
        print(f"[{index}/{len(PROBES)}] {'held' if held else 'FAILED'} ({seconds:.0f} s) {item.command}: {observed}",
              flush=True)
    return rows


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\0", "\\0").replace("\n", " ")


def report(rows: list[tuple[Probe, str, bool, float]], seconds: float) -> str:
    held = sum(row[2] for row in rows)
    lines = ["# Reliability sweep", "",
             f"{held} of {len(rows)} probes held; the sweep took {seconds:.0f} s on the CPU. `make reliability` "
             "(benchmarks/reliability.py) reruns it and rewrites this file. Each probe ran in a fresh workspace "
             "(its own MLflow store, checkpoint and results folders); trainings are one epoch of a 16-wide model "
             "on ml-100k. \"Observed\" is the exit status and the last line the command printed (WORK: the "
             "probe's workspace). Option probes expect their failure before any work: nothing logged, the store "
             "not even created.", "",
             "| # | area | command | expected | observed | held |", "|---|---|---|---|---|---|"]
    for index, (item, observed, ok, _) in enumerate(rows, start=1):
        lines.append(f"| {index} | {item.group} | `{cell(item.command)}` | {cell(item.expected)} | {cell(observed)} | "
                     f"{'yes' if ok else '**no**'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "reliability.md")
    parser.add_argument("--work", type=Path, help="folder of the probes' workspaces (default: a temporary one)")
    parser.add_argument("--areas", help="comma list of the areas to probe (default all; the report then lists only "
                                        "those: give --out elsewhere)")
    args = parser.parse_args()
    if args.areas:
        PROBES[:] = [item for item in PROBES if item.group in args.areas.split(",")]
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        rows = run_all(args.work or Path(temporary))
    write_atomically(args.out, report(rows, time.perf_counter() - started))
    print(f"wrote {args.out}")
    if not all(row[2] for row in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
