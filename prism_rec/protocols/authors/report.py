"""results/authors_protocol.md: the authors' protocol runs beside the paper's Table 2 and the next-item runs.

Per dataset: seed 0's rate grids (``design``). Per dataset and head width, at each model's chosen rate (or
the rate leading so far, flagged, while its grid is unfinished): each model's test AUC as the authors
compute it (batch means, ``metrics``), this suite's full-ranking AUC on the same cases with a 95 % cluster
bootstrap interval over test users (prism_rec.tracking.bootstrap: a user's cases move together), Hit@200,
the link AP and ROC-AUC with one random negative, and paired differences on the same users: every model
against ``null`` and ``sasrec``, and PRISM against Gated DeltaNet (the authors' presets and the faithful
pair), the gap of the paper's ordering. Then both protocols side by side (the next-item runs of the
headline manifests, ``next_item``), and the statement ``decision`` computes from them.
"""

from __future__ import annotations

import collections
import json
import warnings
from pathlib import Path

import numpy as np

from ...errors import OptionError
from ...experiments import tuning
from ...files import read_jsonl, write_atomically
from ...markdown import fill, pipe_table
from ...paths import PROJECT_ROOT, TEMPLATES_DIR
from ...tracking.bootstrap import bootstrap_mean_ci, paired_difference, verdict
from . import decision
from .design import PER_BACKBONE, RATE_FREE, Design, equal_heads_retrain, tuning_entries
from .grid import MANIFEST
from .metrics import full_ranking_auc
from .model import POP
from .next_item import NEXT_ITEM_MANIFESTS, next_item_cells
from .train import RunConfig

REPORT = PROJECT_ROOT / "results" / "authors_protocol.md"
DEFAULT_DESIGN = Design(()).record()  # the design of manifest rows that do not record theirs
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
TIED_FLAG = 0.01  # rate_grid_table and group_table flag a run that tied every candidate in this share of its cases


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


def _rate(rate: float | None, chosen: bool) -> str:
    return "—" if rate is None else f"{rate:g}" + ("" if chosen else " (grid unfinished)")


def group_table(runs: list[dict], dataset: str, rates: dict[str, str]) -> tuple[str, str]:
    """The table of one (dataset, head width) group and its paired differences; ``rates``: model -> rate text."""
    users, counts = np.unique(runs[0]["cases"]["user"], return_counts=True)
    by_model: dict[str, list[dict]] = {}
    for run in runs:
        by_model.setdefault(run["config"]["model"], []).append(run)
    matrices = {model: np.stack([per_user(run, users) for run in group]) for model, group in by_model.items()}
    domain = DATASET_DOMAIN.get(dataset)
    rows, any_collapsed = [], False
    order = sorted(by_model, key=lambda model: -float(np.mean([r["test_full_auc"] for r in by_model[model]])))
    for model in order:
        group = by_model[model]
        low, high = bootstrap_mean_ci(matrices[model], cases=counts)
        paper = PAPER_TABLE_2.get(PAPER_MODEL.get(model, ""))
        collapsed = collapsed_seeds(group)
        any_collapsed |= collapsed > 0
        rows.append([model, str(group[0]["width"] or "—"), rates[model],
                     f"{len(group)}" + (f" ({collapsed} collapsed)" if collapsed else ""),
                     _spread([r["test_auc"] for r in group]), _spread([r["test_full_auc"] for r in group]),
                     f"[{low:.4f}, {high:.4f}]", _spread([r["test_hit@200"] for r in group]),
                     _spread([r["test_link_average_precision"] for r in group]),
                     _spread([r["test_link_roc_auc"] for r in group]),
                     ", ".join(str(r["best_epoch"]) for r in group),
                     f"{paper[PAPER_DOMAINS.index(domain)]:.4f}" if paper and domain else "—"])
    table = pipe_table(["model", "head width", "rate", "seeds", "AUC (theirs)", "full-ranking AUC", "95% interval",
                        "Hit@200 (theirs)", "link AP", "link ROC-AUC", "best epochs",
                        f"paper {domain or '(no domain)'}"], rows, "lrlrrrrrrrlr")
    if any_collapsed:
        table += (f"\n\n\"Collapsed\": seeds that scored every candidate item alike in at least {TIED_FLAG:.0%} of "
                  "their test cases. Their AUC is 0.5 there. The authors' Hit@K ranks ties below the target, so it "
                  "counts each such case a hit and the row's Hit@200 mean is inflated by them.")
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


def scan_note(runs: list[dict]) -> str:
    """A sentence naming, per model, the delta scan backends its runs trained with and how many runs each
    (train.run's record "scan"; models without the scan and older records name none); "" when none does."""
    used = collections.Counter((run["config"]["model"], run["scan"]) for run in runs if run.get("scan"))
    if not used:
        return ""
    return " Delta scan (kernels/delta_scan.py backend): " + ", ".join(
        f"{model} {backend} ({count})" for (model, backend), count in sorted(used.items())) + "."


def device_note(runs: list[dict]) -> str:
    """A sentence naming, per model, the device kinds its runs trained on, when the runs span more than one
    kind (train.run's record "device"); "" otherwise. The protocol trains in fp32 on every device, and a seed's
    initialisation, features, negatives and batch order are drawn on the CPU, so runs of one seed on two kinds
    differ only in their dropout draws and rounding."""
    used = collections.Counter((run["config"]["model"], run["device"].split(":")[0]) for run in runs
                               if run.get("device"))
    if len({kind for _, kind in used}) < 2:
        return ""
    return (" Devices (fp32 on each; a seed's initialisation, features, negatives and batch order are the same on "
            "each, its dropout draws and rounding are not): " + ", ".join(
                f"{model} {kind} ({count})" for (model, kind), count in sorted(used.items())) + ".")


def machine_note(runs: list[dict]) -> str:
    """A sentence naming the machines the runs trained on and how many runs each (train.run's record
    "machine"; runs recorded before it counted apart); "" when no run names one."""
    used = collections.Counter(run.get("machine") for run in runs)
    if not any(used):
        return ""
    named = [f"{machine} ({count})" for machine, count in sorted(used.items(), key=lambda item: str(item[0]))
             if machine]
    unnamed = f"; machine not recorded ({used[None]}: runs from before the record named it)" if used[None] else ""
    return f" Machines: {', '.join(named)}{unnamed}."


def design_of(runs: list[dict]) -> Design:
    """The design the runs were made under, as their manifest rows record it (``Design.record``; rows from
    before it was recorded: the default design, which made them): their datasets, (one set of) settings, the
    union of their models, and one set of seeds, rate grid and equal-heads width."""
    fixed = [{k: v for k, v in run["config"].items() if k not in RATE_FREE} for run in runs]
    if any(settings != fixed[0] for settings in fixed):
        raise OptionError("option --from: the runs were made with different settings (other than model, seed, rate "
                          "and head width); give folders of one design")
    records = [run.get("design", DEFAULT_DESIGN) for run in runs]
    shared = {json.dumps({k: v for k, v in record.items() if k != "models"}, sort_keys=True) for record in records}
    if len(shared) > 1:
        raise OptionError("option --from: the runs were made by designs of different seeds, rate grids or "
                          "equal-heads widths (prism-rec authors grid --seeds, --lr-grid, --equal-head); give folders "
                          "of one design")
    models = list(dict.fromkeys(model for record in records for model in record["models"]))
    return Design.from_record(tuple(sorted({run["dataset"] for run in runs})), RunConfig(model="null", **fixed[0]),
                              {**records[0], "models": models})


def head_groups(cells: dict, dataset: str, channel: int) -> dict[str, list[tuple[str, tuple]]]:
    """{head: [(model, cell)]} of ``dataset``: per-backbone, and per integer head its own runs with the
    per-backbone runs of the models that head does not retrain (``equal_heads_retrain``: the same runs);
    ``pop`` in every group."""
    mine = {(model, head): cell for (d, model, head), cell in cells.items() if d == dataset}
    floor = [(model, cell) for (model, head), cell in mine.items() if model == POP]
    heads = sorted({head for model, head in mine if model != POP}, key=lambda h: (h != PER_BACKBONE, h))
    groups = {}
    for head in heads:
        members = [(model, cell) for (model, h), cell in mine.items() if h == head and model != POP]
        if head != PER_BACKBONE:
            members += [(model, cell) for (model, h), cell in mine.items() if h == PER_BACKBONE and model != POP
                        and not equal_heads_retrain(model, head, channel) and (model, head) not in mine]
        groups[head] = members + floor
    return groups or {PER_BACKBONE: floor}


def tied_share(run: dict) -> float:
    """The share of the run's test cases that scored every candidate alike: a scorer collapsed to a constant
    (a dead ReLU layer of the MergeLayer, say) gives 1, and its AUC 0.5."""
    ties = np.asarray(run["cases"]["ties"])
    return float(np.mean(ties == run["n_items"] - 1)) if len(ties) else 0.0


def collapsed_seeds(runs: list[dict]) -> int:
    """How many of ``runs`` tied every candidate in at least TIED_FLAG of their test cases (tied_share)."""
    return sum(tied_share(run) >= TIED_FLAG for run in runs)


def collapse_note(cells: dict, dataset: str) -> str:
    """A sentence naming the (model, head width) cells of ``dataset`` whose seeds at the chosen rate include
    collapsed ones (collapsed_seeds), and how many; "" when none do."""
    counts = []
    for (d, model, head), (_, _, members) in sorted(cells.items()):
        collapsed = collapsed_seeds(members) if d == dataset else 0
        if collapsed:
            counts.append(f"{model} (head width {head}) {collapsed} of {len(members)}")
    if not counts:
        return ""
    return (f" Seeds that collapsed to constant scores at their chosen rate: {'; '.join(counts)}. A difference "
            "against such an arm measures training that failed at that rate, not the architecture.")


def rate_grid_table(design: Design, runs: list[dict], dataset: str) -> str:
    """Seed 0's validation full-ranking AUC per rate tried, and the choice, of every model on ``dataset``; a
    rate whose seed-0 run tied every candidate in at least TIED_FLAG of its test cases says so."""
    own = design.own(runs)
    by_rate = tuning.valid_auc_by_rate(tuning_entries(own))
    tied = {(run["config"]["model"], run["config"]["lr"]): tied_share(run) for run in own
            if run["dataset"] == dataset and run["config"]["seed"] == 0
            and run["config"]["head_width"] == PER_BACKBONE}
    rows = []
    for (d, model), tried in sorted(by_rate.items()):
        if d != dataset:
            continue
        following = design.grid.next_rate(tried)
        choice = (f"next {following:g}" if following is not None else
                  f"{design.grid.choice(tried):g}" + (" (at the ladder's end)" if design.grid.at_edge(tried) else ""))
        cells = []
        for rate, auc in sorted(tried.items()):
            share = tied.get((model, rate), 0.0)
            cells.append(f"{rate:g}: {auc:.4f}" + (f" (all tied in {share:.0%} of test cases)"
                                                    if share >= TIED_FLAG else ""))
        rows.append([model, ", ".join(cells), choice])
    table = pipe_table(["model", "validation full-ranking AUC of seed 0 per rate", "choice"], rows, "lll")
    if any(share >= TIED_FLAG for share in tied.values()):
        table += ("\n\n\"All tied\": the run scored every candidate item alike in that share of its test cases (a "
                  "collapsed scorer); its AUC is 0.5 there, and the authors' Hit@K, which ranks ties below the target, "
                  "counts each such case a hit.")
    return table


def protocols_table(cells: dict, next_cells: dict, dataset: str, models: list[str], design: Design,
                    values: dict) -> str:
    """Both protocols per model of ``dataset``; fills ``values`` (decision.explain's input) on the way."""
    rows, equal = [], design.equal_head
    for model in models:
        per_backbone = cells.get((dataset, model, PER_BACKBONE))
        own_equal = cells.get((dataset, model, equal))
        equal_cell = own_equal or (None if design.retrains(model) else per_backbone)
        texts = []
        for heads, cell in ((decision.PER_BACKBONE, per_backbone), (decision.EQUAL, equal_cell)):
            if cell is None:
                texts.append("—")
                continue
            rate, chosen, group = cell
            scores = [run["test_full_auc"] for run in group]
            texts.append(f"{_spread(scores)} ({len(scores)}, {_rate(rate, chosen)})")
            if chosen and not (heads == decision.EQUAL and own_equal is None):
                values[(decision.AUTHORS, model, heads)] = scores
        nxt = next_cells[(dataset, model)]
        if nxt.test_auc:
            scores = [nxt.test_auc[seed] for seed in sorted(nxt.test_auc)]
            values[(decision.NEXT_ITEM, model, "-")] = scores
            texts.append(f"{_spread(scores)} ({len(scores)}, {_rate(nxt.rate, True)})")
        else:
            texts.append("—" if nxt.next_rate is None else f"— (grid unfinished: next {nxt.next_rate:g})")
        rows.append([model, *texts])
    return pipe_table(["model", "authors, per-backbone heads: full-ranking AUC (seeds, rate)",
                       f"authors, equal heads {equal}", "next-item d64: test AUC (seeds, rate)"], rows, "lrrr")


def write_report(folders: list[Path], path: Path = REPORT, command: str = "",
                 next_item: tuple[Path, ...] = NEXT_ITEM_MANIFESTS) -> Path:
    """Write the report of the runs in ``folders`` and the next-item manifests ``next_item`` to ``path``."""
    runs = load_runs(folders)
    if not runs:
        raise OptionError(f"option --from: no finished runs in {', '.join(map(str, folders))}")
    design = design_of(runs)
    cells = design.selected(runs)
    models = [*design.models, *sorted({run["config"]["model"] for run in runs} - set(design.models))]
    next_cells = next_item_cells(list(next_item), set(design.datasets), models)
    sections, statements = [], []
    for dataset in design.datasets:
        mine = [run for run in runs if run["dataset"] == dataset]
        if len({json.dumps(run["task"], sort_keys=True) for run in mine}) > 1:
            raise OptionError(f"option --from: the runs of {dataset} were made on different edge tasks "
                              f"(--min-user-edges or data differ); give folders of one task")
        stats = mine[0]["task"]
        sections.append(f"### {dataset}: seed 0's rate grids\n\n{rate_grid_table(design, runs, dataset)}")
        for head, members in head_groups(cells, dataset, design.base.channel).items():
            if not members:
                continue
            group = [run for _, cell in members for run in cell[2]]
            table, paired = group_table(group, dataset, {model: _rate(cell[0], cell[1]) for model, cell in members})
            sections.append(
                f"### {dataset}, head width {head}\n\nTime: {mine[0]['time_kind']}. Kept: {stats['users']} users with "
                f">= {stats['min_user_edges']} edges, {stats['items']} items, {stats['edges']} edges "
                f"({stats['train_edges']} train, {stats['valid_edges']} validation, {stats['test_edges']} test "
                f"cases).{scan_note(group)}{device_note(group)}{machine_note(group)}\n\n{table}\n\n{paired}")
        values: dict = {}
        joined = protocols_table(cells, next_cells, dataset, models, design, values)
        cell_table = pipe_table(["protocol", "implementation", "heads", "seeds", "PRISM - GDN", "Welch interval",
                                 "p", "PRISM - SASRec", "ordering appears"],
                                decision.cell_rows(values, design.retrains), "lllrrrrrl")
        sections.append(f"### {dataset}: both protocols\n\n{joined}\n\n{cell_table}")
        statements.append(f"**{dataset}.** {decision.explain(values, len(design.seeds), design.retrains)}"
                          f"{collapse_note(cells, dataset)}")
    paper = pipe_table(["model", *PAPER_DOMAINS], [[name, *(f"{v:.4f}" for v in values)]
                                                   for name, values in PAPER_TABLE_2.items()], "lrrrr")
    text = fill(TEMPLATES_DIR / "authors_protocol.md", command=command or "prism-rec authors table",
                paper=paper, sections="\n\n".join(sections), statements="\n\n".join(statements))
    write_atomically(path, text + "\n")
    return path
