"""Data-parallel scaling report: the same benchmark with 1 and N processes, read back from the MLflow store.

``prism-rec scaling --dataset NAME --out results/scaling.md`` takes, for every model, the newest finished
child run of each world size in the dataset's experiment, and writes training tokens/s, the scaling efficiency
(tokens/s with N processes / (N x tokens/s with 1)) and test AUC of each run, with the
difference against the single-process run beside the tolerance the CPU test holds two gloo processes to
(tests/training/test_ddp.py). An older 1-process run of the same settings, commit and machine is shown as a
``repeat``: its gap to the newest is the run-to-run spread. benchmarks/scaling_gpu.sh runs the benchmarks
and then this report.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pandas as pd

from ..files import write_atomically
from ..markdown import fill, pipe_table
from ..paths import TEMPLATES_DIR
from ..tracking.runs import finished_children
from ..tracking.store import experiment_id

AUC_TOLERANCE = 1e-4  # the bound tests/training/test_ddp.py asserts for 2 gloo processes against 1 (dropout 0)


def newest_runs_by_world_size(dataset: str) -> pd.DataFrame:
    """The newest finished child run per (model, settings hash, world size) of ``dataset``'s experiment
    (the hash leaves out the device and the process count, so 1 and N processes share it), and below
    them the second-newest single-process run of each (model, settings hash) where there is one, flagged
    ``repeat``: the same command run again at the same commit on the same machine, whose gap to the
    newest is the run-to-run spread."""
    runs = finished_children(experiment_id(dataset))
    if runs.empty:
        raise ValueError(f"option --dataset: no finished runs of {dataset!r} in the tracking store")
    runs["world_size"] = runs["tags.world_size"].astype(int)
    runs["repeat"] = False
    for tag in ("tags.git_commit", "tags.machine"):
        if tag not in runs:
            runs[tag] = None
    settings = ["tags.model", "tags.config_hash"]
    newest = runs.drop_duplicates([*settings, "world_size"], keep="first")
    older_single = runs[(runs["world_size"] == 1) & ~runs.index.isin(newest.index)]
    newest_single = newest[newest["world_size"] == 1].set_index(settings)[["tags.git_commit", "tags.machine"]]
    twins = older_single.join(newest_single, on=settings, rsuffix="_newest")
    same_code = ((twins["tags.git_commit"] == twins["tags.git_commit_newest"])
                 & (twins["tags.machine"] == twins["tags.machine_newest"]))  # else the gap is not run-to-run spread
    repeats = older_single[same_code].drop_duplicates(settings, keep="first").assign(repeat=True)
    return pd.concat([newest, repeats])


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, settings, world size): tokens/s, efficiency and AUC against the newest
    1-process run with the same settings; a repeated 1-process run comes after its newer twin."""
    rows = []
    precision = runs["params.precision"] if "params.precision" in runs else pd.Series("bf16", index=runs.index)
    precision = precision.fillna("bf16")  # runs from before --precision were bf16
    device = runs["tags.device"] if "tags.device" in runs else pd.Series("", index=runs.index)
    on_cpu = device.astype(str).str.startswith("cpu")
    runs = runs.assign(precision=precision.where(~on_cpu, "fp32"))  # the CPU always trains in fp32
    for (model, _), group in runs.groupby(["tags.model", "tags.config_hash"], sort=True):
        single = group[(group["world_size"] == 1) & ~group["repeat"]]
        base = single.iloc[0] if len(single) else None
        for _, run in group.sort_values(["world_size", "repeat"]).iterrows():
            size, tokens = int(run["world_size"]), float(run["metrics.train_tokens_per_s"])
            rows.append({
                "model": model, "precision": run["precision"], "commit": run["tags.git_commit"], "processes": size,
                "run": "repeat" if run["repeat"] else "newest", "train tokens/s": tokens,
                "scaling efficiency": tokens / (size * float(base["metrics.train_tokens_per_s"]))
                if base is not None else float("nan"),
                "test AUC": float(run["metrics.test_auc"]),
                "AUC gap to 1 process": abs(float(run["metrics.test_auc"]) - float(base["metrics.test_auc"]))
                if base is not None else float("nan"),
                "epochs (best)": f"{int(run['metrics.epochs_run'])} ({int(run['metrics.best_epoch'])})",
                "wall s": float(run["metrics.wall_seconds"]),
            })
    return pd.DataFrame(rows)


def _markdown(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        if isinstance(value, float):
            if value != value:
                return "missing"
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
        return str(value)

    return pipe_table(list(table.columns), [[cell(v) for v in row] for row in table.itertuples(index=False)],
                      align="l" * len(table.columns))


def write_report(dataset: str, out: Path) -> Path:
    runs = newest_runs_by_world_size(dataset)
    table = scaling_table(runs)

    def distinct(column: str) -> str:
        return ", ".join(sorted(set(runs[column].dropna()))) if column in runs else "unknown"

    gap = "AUC gap to 1 process"
    verdicts = []
    for row in table[(table["processes"] > 1) | (table["run"] == "repeat")].to_dict("records"):
        what = (f"{row['model']} ({row['precision']}), "
                + ("1 process run again" if row["run"] == "repeat" else f"{row['processes']} processes"))
        verdicts.append(f"- {what}: no 1-process run with the same settings" if row[gap] != row[gap] else
                        f"- {what}: |ΔAUC| = {row[gap]:.2e} "
                        f"({'within' if row[gap] <= AUC_TOLERANCE else 'outside'} the CPU test's {AUC_TOLERANCE:g})")
    report = fill(TEMPLATES_DIR / "scaling.md", dataset=dataset, date=datetime.date.today().isoformat(), out=out,
                  machines=distinct("tags.machine"), torch_versions=distinct("tags.torch_version"),
                  triton_versions=distinct("tags.triton_version"), commits=distinct("tags.git_commit"),
                  commands="; ".join(f"`{c}`" for c in sorted(set(runs["tags.command"].dropna()))),
                  table=_markdown(table))
    text = "\n".join([report, *verdicts, ""])
    write_atomically(out, text)
    return out


def add_parser(subparsers) -> None:
    """Add ``scaling`` to ``subparsers`` (an argparse sub-parser action)."""
    parser = subparsers.add_parser("scaling", help="data-parallel scaling report from the MLflow store",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", type=Path, default=Path("results/scaling.md"))
    parser.set_defaults(func=lambda args: print(f"wrote {write_report(args.dataset, args.out)}"))
