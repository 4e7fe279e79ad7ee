"""results/README.md of the headline benchmark, built from its manifest, and the per-dataset tables.

The summary, costs and findings come from results/headline_manifest.jsonl alone (one line per finished
run); results/<dataset>/auc.md and .csv come from the MLflow store (tables.write_tables) once the records
are imported. A cell without runs reads "missing"; nothing is estimated.
"""

from __future__ import annotations

import collections
import datetime
import statistics
from pathlib import Path

from . import registry
from .headline import DATASETS, LAYERS, SEEDS, SETTINGS, backbone_parameters, training_config
from .files import write_atomically
from .tables import RESULTS_DIR, finished_child_runs, write_tables

PAPER_COLUMNS = {"books-dealrec": 0, "movies-fedcsr": 1, "electronics-gerec": 2, "yelp-iclrec": 3}
PAPER_TABLE2 = {  # paper Table 2, AUC: Books, Movies, Electronics, Yelp
    "SASRec (sasrec)": (.8910, .7677, .7293, .9410), "HSTU (hstu)": (.8835, .7748, .7189, .9324),
    "Mamba-2 (mamba2)": (.8872, .7713, .7157, .9385), "Gated DeltaNet (gated_deltanet)": (.8844, .7504, .7159, .9367),
    "TTT (ttt-linear, ttt-mlp)": (.8871, .7591, .6946, .9375), "Titans (titans)": (.8869, .7652, .7007, .9395),
    "GLA (not in the suite)": (.8752, .7478, .7008, .8943), "PRISM (prism)": (.8888, .7727, .7134, .9393),
}
PAPER_ABLATION = {"prism": .7134, "prism-L1": .6805, "prism-nogelu": .7047, "prism-noconv": .7076,
                  "prism-nogain": .7098}  # paper Table 3, AUC on Electronics
LINEAR_MODELS = ("mamba2", "gated_deltanet", "prism", "ttt-linear", "ttt-mlp")
DEVICE_CALL = "PRISM_REC_GIT_COMMIT={commit} benchmarks/headline_gpu.sh $OUT"
EARLY_STOP_GAP = 0.05  # a run is listed as stuck when its test AUC is this far below its dataset's best run


def newest_entries(manifest: list[dict]) -> dict[tuple[str, str, int], dict]:
    """The newest (last) manifest entry per (dataset, model, seed)."""
    return {(entry["dataset"], entry["model"], entry["seed"]): entry for entry in manifest}


def _aucs(manifest: list[dict]) -> dict[tuple[str, str], list[float]]:
    """{(dataset, model): test AUCs} of the newest entry per (dataset, model, seed)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for (dataset, model, _), entry in sorted(newest_entries(manifest).items()):
        cells.setdefault((dataset, model), []).append(entry["test_auc"])
    return cells


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def _cell(values: list[float] | None) -> str:
    if not values:
        return "missing"
    if len(values) == 1:
        return f"{values[0]:.4f} (1 seed)"
    return f"{statistics.fmean(values):.4f} ± {_spread(values):.4f} ({len(values)})"


def mean_ranks(cells: dict, models: list[str]) -> dict[str, tuple[float, int]]:
    """Per model: the mean over datasets of its rank (1 = best mean AUC; equal means share the average
    of their ranks) among the models with runs there, and the number of datasets it was ranked on."""
    ranks: dict[str, list[float]] = {}
    for dataset in DATASETS:
        means = {m: statistics.fmean(cells[(dataset, m)]) for m in models if cells.get((dataset, m))}
        for model, mean in means.items():
            above = sum(other > mean for other in means.values())
            tied = sum(other == mean for other in means.values())
            ranks.setdefault(model, []).append(above + (tied + 1) / 2)
    return {model: (statistics.fmean(r), len(r)) for model, r in ranks.items()}


def summary_table(cells: dict, models: list[str]) -> list[str]:
    ranks = mean_ranks(cells, models)
    lines = ["| backbone | " + " | ".join(DATASETS) + " | mean rank |", "|---|" + "---:|" * (len(DATASETS) + 1)]
    best = {d: max((statistics.fmean(cells[(d, m)]) for m in models if cells.get((d, m))), default=None)
            for d in DATASETS}
    for model in models:
        row = []
        for dataset in DATASETS:
            text = _cell(cells.get((dataset, model)))
            values = cells.get((dataset, model))
            row.append(f"**{text}**" if values and statistics.fmean(values) == best[dataset] else text)
        rank = ranks.get(model)
        rank_text = "missing" if rank is None else f"{rank[0]:.1f} (over {rank[1]})"
        lines.append(f"| {model} | " + " | ".join(row) + f" | {rank_text} |")
    return lines


def paper_table() -> list[str]:
    lines = ["| paper model (ours) | " + " | ".join(DATASETS) + " |", "|---|" + "---:|" * len(DATASETS)]
    for name, values in PAPER_TABLE2.items():
        lines.append(f"| {name} | " + " | ".join(f"{values[PAPER_COLUMNS[d]]:.4f}" for d in DATASETS) + " |")
    return lines


def cost_tables(manifest: list[dict], models: list[str]) -> list[str]:
    """Backbone parameters at the headline settings, total parameters and training tokens/s per dataset."""
    by_cell: dict[tuple[str, str], list[dict]] = {}
    for entry in manifest:
        by_cell.setdefault((entry["dataset"], entry["model"]), []).append(entry)

    def figure(dataset: str, model: str, key: str, form: str) -> str:
        entries = by_cell.get((dataset, model))
        return form.format(statistics.fmean(e[key] for e in entries)) if entries else "missing"

    lines = ["| backbone | layers | backbone params | " + " | ".join(f"{d} total params" for d in DATASETS) + " |",
             "|---|---:|---:|" + "---:|" * len(DATASETS)]
    for model in models:
        config = training_config(DATASETS[0], model, 0, "cpu", {})
        lines.append(f"| {model} | {config.n_layers} | {backbone_parameters(model, config):,} | "
                     + " | ".join(figure(d, model, "n_parameters", "{:,.0f}") for d in DATASETS) + " |")
    lines += ["", "Training tokens/s on the H200 (mean over seeds; next-item targets per second of training, "
              "evaluation excluded):", "",
              "| backbone | " + " | ".join(DATASETS) + " |", "|---|" + "---:|" * len(DATASETS)]
    for model in models:
        lines.append(f"| {model} | " + " | ".join(figure(d, model, "train_tokens_per_s", "{:,.0f}") for d in DATASETS) + " |")
    return lines


def _compare(cells: dict, dataset: str, better: str, worse: str) -> str:
    """'a > b beyond the spread' style verdict for two models on one dataset."""
    first, second = cells.get((dataset, better)), cells.get((dataset, worse))
    if not first or not second:
        missing = " and ".join(m for m, v in ((better, first), (worse, second)) if not v)
        return f"{dataset}: undetermined ({missing} missing)"
    gap = statistics.fmean(first) - statistics.fmean(second)
    text = f"{dataset}: {better} − {worse} = {gap:+.4f}"
    if len(first) < 2 or len(second) < 2:
        return text + f" (seeds {len(first)} vs {len(second)}: no spread to judge against)"
    spread = _spread(first) + _spread(second)
    verdict = "beyond" if abs(gap) > spread else "within"
    return text + f", {verdict} the seed spread (sum of the two std {spread:.4f})"


def same_seed_check(manifest: list[dict], model: str, reference: str, why: str) -> str:
    """How closely ``model`` reproduces ``reference`` seed by seed (``why`` says why it should); runs that
    differ are named with their commits."""
    entries = newest_entries(manifest)
    pairs = [(key, entries[(key[0], model, key[2])], entry) for key, entry in sorted(entries.items())
             if key[1] == reference and (key[0], model, key[2]) in entries]
    if not pairs:
        return f"**{model} against {reference}, seed by seed:** no run of both with the same dataset and seed."
    differing = [f"{dataset} s{seed} ({abs(ours['test_auc'] - theirs['test_auc']):.1e}; commits "
                 f"{ours['git_commit']} and {theirs['git_commit']})"
                 for (dataset, _, seed), ours, theirs in pairs if ours["test_auc"] != theirs["test_auc"]]
    return (f"**{model} against {reference}, seed by seed** ({why}): the same test AUC to every digit in "
            f"{len(pairs) - len(differing)} of {len(pairs)} runs"
            + (f"; different in {', '.join(differing)}." if differing else "."))


def findings(cells: dict, models: list[str], manifest: list[dict]) -> list[str]:
    lines = ["**PRISM vs Gated DeltaNet (its L = 0 case).** A gap counts as beyond the seed spread when it exceeds "
             "the sum of the two sample standard deviations (3 seeds each at full coverage)."]
    lines += [f"- {_compare(cells, d, 'prism', 'gated_deltanet')}" for d in DATASETS]
    lines += ["", same_seed_check(manifest, "prism-L0", "gated_deltanet", "PRISM at L = 0 is Gated DeltaNet, "
                                  "built with the same parameters in the same order")]
    lines += ["", "**Ablation order (paper Table 3: full > no nonlinearity > L = 1).**"]
    for dataset in DATASETS:
        trio = [(m, cells.get((dataset, m))) for m in ("prism", "prism-nogelu", "prism-L1")]
        if not all(values for _, values in trio):
            lines.append(f"- {dataset}: undetermined ({', '.join(m for m, v in trio if not v)} missing)")
            continue
        ordered = sorted(trio, key=lambda item: -statistics.fmean(item[1]))
        holds = [m for m, _ in ordered] == ["prism", "prism-nogelu", "prism-L1"]
        lines.append(f"- {dataset}: observed " + " > ".join(f"{m} {statistics.fmean(v):.4f}" for m, v in ordered)
                     + ("; the paper's order holds" if holds else "; not the paper's order"))
    lines += ["", f"**SASRec against the linear-recurrent models ({', '.join(LINEAR_MODELS)}).**"]
    for dataset in DATASETS:
        sasrec = cells.get((dataset, "sasrec"))
        linear = {m: cells[(dataset, m)] for m in LINEAR_MODELS if cells.get((dataset, m))}
        if not sasrec or not linear:
            lines.append(f"- {dataset}: undetermined (sasrec {'present' if sasrec else 'missing'}, "
                         f"{len(linear)} of {len(LINEAR_MODELS)} linear models present)")
            continue
        below = [m for m, v in linear.items() if statistics.fmean(v) < statistics.fmean(sasrec)]
        lines.append(f"- {dataset}: SASRec {statistics.fmean(sasrec):.4f} is above {len(below)} of the {len(linear)} "
                     f"linear models with runs ({', '.join(below) or 'none'}); best linear "
                     f"{max(linear, key=lambda m: statistics.fmean(linear[m]))} "
                     f"{max(statistics.fmean(v) for v in linear.values()):.4f}")
    return lines


def gpu_sharing_note(manifest: list[dict]) -> str:
    """One paragraph on how the GPU runs shared their GPU (the manifest's ``jobs_per_device`` and
    ``gpu_sharing``; lines written before ``gpu_sharing`` existed ran in time slices)."""
    gpu_runs = [entry for entry in manifest  # tracking.machine_description names CUDA devices "<name> (CUDA x)"
                if "jobs_per_device" in entry and "(CUDA " in entry.get("machine", "")]
    if not gpu_runs:
        return "No run in the manifest trained on a GPU."
    counts = sorted({entry["jobs_per_device"] for entry in gpu_runs})
    modes = collections.Counter(entry.get("gpu_sharing", "time-slicing") for entry in gpu_runs)
    words = {"mps": "through a CUDA MPS server", "time-slicing": "in time slices"}
    shared = ", ".join(f"{count} {words.get(mode, mode)}" for mode, count in sorted(modes.items()))
    return (f"The GPU runs shared each GPU with {' or '.join(f'{c:g}' for c in counts)} worker processes "
            f"on average (the manifest's `jobs_per_device`, workers per GPU while the call began; runs: {shared}), so tokens/s is each run's share, not a solo "
            "figure, and depends on whichever other runs were in flight: these figures compare backbones only "
            "roughly; `make throughput` measures solo steps.")


def early_stops(manifest: list[dict]) -> list[str]:
    """Runs that ended within 3 x patience epochs with a test AUC more than EARLY_STOP_GAP below the best
    run of their dataset: a plateau early stopping did not outlast, which widens a cell's seed spread."""
    manifest = list(newest_entries(manifest).values())
    best = {}
    for entry in manifest:
        best[entry["dataset"]] = max(best.get(entry["dataset"], 0.0), entry["test_auc"])
    stuck = [e for e in manifest if e["epochs_run"] <= 3 * SETTINGS["patience"]
             and e["test_auc"] < best[e["dataset"]] - EARLY_STOP_GAP]
    lines = [f"**Runs stuck early.** Runs that ended within {3 * SETTINGS['patience']} epochs (patience "
             f"{SETTINGS['patience']}) more than {EARLY_STOP_GAP} AUC below their dataset's best run: "
             f"{len(stuck)} of {len(manifest)}."]
    for dataset in DATASETS:
        runs = sorted((e for e in stuck if e["dataset"] == dataset), key=lambda e: (e["model"], e["seed"]))
        if runs:
            lines.append(f"- {dataset} (best run {best[dataset]:.4f}): " + ", ".join(
                f"{e['model']} s{e['seed']} {e['test_auc']:.4f} after {e['epochs_run']} epochs" for e in runs))
    return lines


def readme(manifest: list[dict]) -> str:
    models = registry.list_backbones()
    cells = _aucs(manifest)
    total = len(DATASETS) * len(models) * len(SEEDS)
    done = len({(e["dataset"], e["model"], e["seed"]) for e in manifest})
    capped = sum(1 for e in manifest if e["epochs_run"] >= SETTINGS["epochs"] and e["best_epoch"] > e["epochs_run"] - SETTINGS["patience"])
    commands = sorted({e["command"] for e in manifest})
    settings = ", ".join(f"{k} {v}" for k, v in SETTINGS.items())
    parts = [
        "# Headline results: every backbone on the four real subsets",
        "",
        f"Written {datetime.date.today().isoformat()} by `python -m prism_rec.headline tables` from "
        f"`results/headline_manifest.jsonl` ({done} of {total} (dataset, backbone, seed) runs finished). "
        "Per-dataset tables with Hit@K and NDCG@K: `results/<dataset>/auc.md` and `.csv` (from the MLflow store "
        "after `python -m prism_rec.headline import`).",
        "",
        "**Protocol.** Leave-one-out split (last item test, second-to-last validation), full-ranking test AUC "
        "against all items, each dataset's default thresholds (results/datasets.md) and window (max_len "
        f"{registry.get_dataset(DATASETS[0]).max_len}). Training: {settings}; AdamW, full softmax cross-entropy; "
        f"early stopping on validation AUC, best weights restored. The paper trains with Adam at lr 1e-4; this grid "
        f"uses the suite's default lr {SETTINGS['lr']:g} with the paper's patience {SETTINGS['patience']} (see 'Runs "
        f"stuck early' below). Layers: {SETTINGS['n_layers']} for every "
        f"backbone except {', '.join(f'{m} {n}' for m, n in LAYERS.items())} (one Titans layer is a memory block "
        f"plus an attention block). Seeds {', '.join(map(str, SEEDS))}. bf16 autocast on the H200. "
        f"{capped} finished run(s) stopped at the {SETTINGS['epochs']}-epoch cap while still improving.",
        "",
        "## Test AUC (mean ± sample std (seeds); best mean per dataset in bold; mean rank over the datasets "
        "where the backbone has runs)",
        "",
        *summary_table(cells, models),
        "",
        "For orientation only, the paper's Table 2 (AUC). The paper preprocesses the official full files "
        "(users >= 40, much longer histories); these subsets are other public preprocessings of the same "
        "domains (../shared/data/README.md), so the numbers are not comparable cell by cell:",
        "",
        *paper_table(),
        "",
        "Paper Table 3 (Electronics AUC) for the ablation presets: "
        + ", ".join(f"{m} {v:.4f}" for m, v in PAPER_ABLATION.items()) + ".",
        "",
        "## Findings",
        "",
        *findings(cells, models, manifest),
        "",
        *early_stops(manifest),
        "",
        "## Parameter budgets and training speed",
        "",
        "d_model 64 and 2 heads everywhere. Backbone parameters are those of the sequence mixer stack; the "
        "totals add the item embedding table (items x 64) and the recommender's output layers, so they differ "
        "by dataset.",
        "",
        *cost_tables(manifest, models),
        "",
        gpu_sharing_note(manifest),
        "",
        "## Reproducing every number",
        "",
        "1. Copy the four data folders into the git-ignored `.device_data/` (`mkdir -p .device_data && cp -r "
        "../shared/data/{books,electronics,movies,yelp} .device_data/`; `/.device_data/` is in `.git/info/exclude`).",
        "2. On a 2-GPU H200 machine (device tool, kind nvidia-h200-x2, `carry: [\".device_data\", \".triton_cache\"]`, "
        "timeout 590 s), this command (`<commit>`: the short hash of the commit you run, e.g. `git rev-parse --short HEAD`); "
        "it continues the committed manifest and skips the runs in it:",
        "",
        f"       {DEVICE_CALL.format(commit='<commit>')}",
        "",
        "   The training command inside it, as recorded in the runs: " + "; ".join(f"`{c}`" for c in commands) + ".",
        "   benchmarks/headline_gpu.sh starts a CUDA MPS server (so the kernels of the many small trainings run "
        "side by side rather than in turns; it falls back to time slices if the server does not serve) and one "
        "driver with 24 workers, 12 per GPU, over all four subsets, longest runs first within a seed and a run "
        "started only when it is expected to end within the budget (default 520 s; the expected times, scaled "
        "from earlier calls, are corrected by the runs that finish). Three such calls (commit cbfe3bd, BUDGET "
        "515, 515, 535) finished the last 83 runs: 39, 29 and 15. Through MPS, 12 runs on a GPU each trained "
        "an epoch about as fast as 5 runs in time slices had (yelp sasrec 5.5 s both, hstu 3.6 against 4.9 s; "
        "books sasrec 5.4 against 6.3 s) and 2.4-4x faster than 14 in time slices (yelp sasrec 13.2 s, hstu "
        "15.3 s): about 2.4 times the training per GPU. Earlier calls split the grid otherwise (the "
        "recorded commands above): one driver over both GPUs with 28 workers, cheapest runs first, which left "
        "the large subsets' slower runs unstarted; then the small subsets 14 at a time beside yelp and books 5 "
        "at a time, which finished 45 small-subset but only 12 large-subset runs in one call.",
        "3. Here: join the returned manifests into the committed one and keep the returned records under "
        "`.headline_runs/<date>/`, then",
        "",
        "       python -m prism_rec.headline merge results/headline_manifest.jsonl results/headline_manifest.jsonl \\",
        "           .headline_runs/<date>/headline_manifest.jsonl",
        "       python -m prism_rec.headline import .headline_runs/<date>   # MLflow child runs, skips known records",
        "       python -m prism_rec.headline tables                         # results/<dataset>/auc.*, this file",
        "",
        "Without a GPU the same grid runs on CPU: `python -m prism_rec.headline run --out DIR --workers N "
        "--budget SECONDS` (add `--datasets`, `--models`, `--seeds`, and `--set epochs=1` for a check).",
        "",
    ]
    return "\n".join(parts)


def write_results(manifest: list[dict], results_dir: Path = RESULTS_DIR) -> list[Path]:
    """results/<dataset>/auc.md and .csv for every dataset with runs in the store, and results/README.md."""
    written = []
    for dataset in DATASETS:
        if not finished_child_runs(dataset)[0].empty:
            written += list(write_tables(dataset, Path(results_dir))[:2])
    path = Path(results_dir) / "README.md"
    write_atomically(path, readme(manifest))
    return [*written, path]
