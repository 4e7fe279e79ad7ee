"""results/authors_protocol.md: the authors' protocol runs beside the paper's Table 2.

Per dataset and head width: each model's test AUC as the authors compute it (batch means, ``metrics``),
this suite's full-ranking AUC on the same cases with a 95 % cluster bootstrap interval over test users
(prism_rec.tracking.bootstrap: a user's cases move together), Hit@200, the link AP and ROC-AUC with one
random negative, and paired differences on the same users: every model against ``null`` and ``sasrec``,
and PRISM against Gated DeltaNet (the authors' presets and the faithful pair), the gap of the paper's ordering.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from ...errors import OptionError
from ...files import read_jsonl, write_atomically
from ...markdown import fill, pipe_table
from ...paths import PROJECT_ROOT, TEMPLATES_DIR
from ...tracking.bootstrap import bootstrap_mean_ci, paired_difference, verdict
from .grid import MANIFEST
from .metrics import full_ranking_auc

REPORT = PROJECT_ROOT / "results" / "authors_protocol.md"
# PAPER.md section 4, Table 2 AUC: Books, Movies, Electronics, Yelp
PAPER_TABLE_2 = {
    "SASRec": (0.8910, 0.7677, 0.7293, 0.9410), "HSTU": (0.8835, 0.7748, 0.7189, 0.9324),
    "Mamba-2": (0.8872, 0.7713, 0.7157, 0.9385), "Gated DeltaNet": (0.8844, 0.7504, 0.7159, 0.9367),
    "TTT": (0.8871, 0.7591, 0.6946, 0.9375), "Titans": (0.8869, 0.7652, 0.7007, 0.9395),
    "GLA": (0.8752, 0.7478, 0.7008, 0.8943), "PRISM": (0.8888, 0.7727, 0.7134, 0.9393),
}
PAPER_DOMAINS = ("Books", "Movies", "Electronics", "Yelp")
DATASET_DOMAIN = {"movies-long": "Movies", "movies-fedcsr": "Movies", "books-dealrec": "Books",
                  "yelp-iclrec": "Yelp"}
PAPER_MODEL = {"sasrec": "SASRec", "hstu": "HSTU", "mamba2": "Mamba-2", "mamba2-authors": "Mamba-2",
               "gated_deltanet": "Gated DeltaNet", "gdn-authors": "Gated DeltaNet", "ttt-linear": "TTT",
               "ttt-mlp": "TTT", "titans": "Titans", "prism": "PRISM", "prism-authors": "PRISM"}
REFERENCES = ("null", "sasrec")
ORDERING_PAIRS = (("prism-authors", "gdn-authors"), ("prism", "gated_deltanet"))


def load_runs(folders: list[Path]) -> list[dict]:
    """Every manifest row of ``folders`` with its test cases; a key in two folders keeps the later one."""
    runs = {}
    for folder in folders:
        manifest = Path(folder) / MANIFEST
        if not manifest.is_file():
            raise OptionError(f"option --from: {manifest} does not exist")
        for row in read_jsonl(manifest):
            row["cases"] = json.loads((Path(folder) / "cases" / f"{row['key']}.json").read_text())
            runs[row["key"]] = row
    return list(runs.values())


def per_user(run: dict, users: np.ndarray) -> np.ndarray:
    """The run's mean full-ranking AUC per user [U] over that user's test cases, users in ``users`` order."""
    cases = run["cases"]
    values = full_ranking_auc(np.asarray(cases["above"]), np.asarray(cases["ties"]), run["n_items"])
    user_ids = np.asarray(cases["user"])
    index = np.searchsorted(users, user_ids)
    return np.bincount(index, weights=values, minlength=len(users)) / np.bincount(index, minlength=len(users))


def _spread(values: list[float]) -> str:
    return f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}" if len(values) > 1 else f"{values[0]:.4f}"


def group_table(runs: list[dict], dataset: str) -> tuple[str, str]:
    """The table of one (dataset, head width) group and its paired differences."""
    users, counts = np.unique(runs[0]["cases"]["user"], return_counts=True)
    by_model: dict[str, list[dict]] = {}
    for run in runs:
        by_model.setdefault(run["config"]["model"], []).append(run)
    matrices = {model: np.stack([per_user(run, users) for run in group]) for model, group in by_model.items()}
    domain = DATASET_DOMAIN.get(dataset)
    rows = []
    order = sorted(by_model, key=lambda model: -float(np.mean([r["test_full_auc"] for r in by_model[model]])))
    for model in order:
        group = by_model[model]
        low, high = bootstrap_mean_ci(matrices[model], cases=counts)
        paper = PAPER_TABLE_2.get(PAPER_MODEL.get(model, ""))
        rows.append([model, str(group[0]["width"] or "—"), str(len(group)),
                     _spread([r["test_auc"] for r in group]), _spread([r["test_full_auc"] for r in group]),
                     f"[{low:.4f}, {high:.4f}]", _spread([r["test_hit@200"] for r in group]),
                     _spread([r["test_link_average_precision"] for r in group]),
                     _spread([r["test_link_roc_auc"] for r in group]),
                     ", ".join(str(r["best_epoch"]) for r in group),
                     f"{paper[PAPER_DOMAINS.index(domain)]:.4f}" if paper and domain else "—"])
    table = pipe_table(["model", "head width", "seeds", "AUC (theirs)", "full-ranking AUC", "95% interval",
                        "Hit@200 (theirs)", "link AP", "link ROC-AUC", "best epochs",
                        f"paper {domain or '(no domain)'}"], rows, "lrrrrrrrrlr")
    pairs = [(model, reference) for reference in REFERENCES for model in order
             if model != reference and reference in matrices]
    pairs += [pair for pair in ORDERING_PAIRS if set(pair) <= set(matrices)]
    differences = []
    for model, reference in pairs:
        with warnings.catch_warnings():  # Welch's test warns on a floor's identical seeds; its p stands
            warnings.simplefilter("ignore", RuntimeWarning)
            d = paired_difference(matrices[model], matrices[reference], cases=counts)
        differences.append([f"{model} - {reference}", f"{d.mean:+.4f}", f"[{d.low:+.4f}, {d.high:+.4f}]",
                            f"{d.seed_p:.3g}", verdict(d)])
    paired = pipe_table(["difference", "full-ranking AUC", "95% interval", "seed p", "verdict"], differences,
                        "lrrrl") if differences else "(one model only: no paired differences)"
    return table, paired


def write_report(folders: list[Path], path: Path = REPORT, command: str = "") -> Path:
    """Write the report of the runs in ``folders`` to ``path``; returns it."""
    runs = load_runs(folders)
    if not runs:
        raise OptionError(f"option --from: no finished runs in {', '.join(map(str, folders))}")
    groups: dict[tuple[str, str], list[dict]] = {}
    pop_runs: dict[str, list[dict]] = {}
    for run in runs:
        if run["config"]["model"] == "pop":  # the floor has no head: shown in every width's table
            pop_runs.setdefault(run["dataset"], []).append(run)
        else:
            groups.setdefault((run["dataset"], run["config"]["head_width"]), []).append(run)
    for dataset, floor in pop_runs.items():
        if not any(key[0] == dataset for key in groups):
            groups[(dataset, floor[0]["config"]["head_width"])] = []
    sections = []
    for (dataset, head), group in sorted(groups.items()):
        group = group + pop_runs.get(dataset, [])
        if len({json.dumps(run["task"], sort_keys=True) for run in group}) > 1:
            raise OptionError(f"option --from: the runs of {dataset} were made on different edge tasks "
                              f"(--min-user-edges or data differ); give folders of one task")
        stats = group[0]["task"]
        table, paired = group_table(group, dataset)
        sections.append(
            f"### {dataset}, head width {head}\n\nTime: {group[0]['time_kind']}. Kept: {stats['users']} users with >= "
            f"{stats['min_user_edges']} edges, {stats['items']} items, {stats['edges']} edges ({stats['train_edges']} "
            f"train, {stats['valid_edges']} validation, {stats['test_edges']} test cases).\n\n{table}\n\n{paired}")
    paper = pipe_table(["model", *PAPER_DOMAINS], [[name, *(f"{v:.4f}" for v in values)]
                                                   for name, values in PAPER_TABLE_2.items()], "lrrrr")
    text = fill(TEMPLATES_DIR / "authors_protocol.md", command=command or "prism-rec authors table",
                paper=paper, sections="\n\n".join(sections))
    write_atomically(path, text + "\n")
    return path
