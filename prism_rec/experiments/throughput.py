"""Training throughput and peak memory of every backbone across sequence lengths (paper section 5.3).

One training step is the project's own: ``SequentialRecommender`` (tied token/item embedding, the
backbone, final norm) and ``prism_rec.training.trainer.NextItemObjective`` (full softmax cross-entropy over the
whole vocabulary or item table at every position), then backward and an AdamW step, in bf16 autocast
on CUDA. Each case runs warm-up steps, then timed steps (CUDA events) until the step count or the
per-case time budget is reached; the median step time gives tokens/s = batch * length / step time.

Configurations: "paper" (CUDA) is the paper's 0.13B language-model shape (d_model 768, 8 layers,
vocabulary 32,000) at 2K x 8, 4K x 4, 8K x 2 and 16K x 1, plus the recommendation default (d_model 64,
2 layers, 2 heads, 58,636 items as in Movies) at 200 x 256; "tiny" (CPU, for CI) is the same program
at toy sizes. Results go to MLflow (experiment "throughput", when mlflow is importable) and to
``<results-dir>/throughput.md`` and ``throughput.png`` (``throughput-tiny.*`` for the tiny one).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import platform
import shlex
import statistics
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import registry
from ..files import write_atomically, write_figure_atomically
from ..models.recommender import SequentialRecommender
from ..options import resolve_models
from ..paths import RESULTS_DIR
from ..tracking.store import git_commit, machine_description, provenance_tags, triton_version
from ..training.trainer import NextItemObjective
from ..training.devices import resolve_device
from ..training.config import TrainConfig

EXPERIMENT = "throughput"

# Heads at the language-model shape, as each model's paper sizes them; presets of a factory inherit
# its entry. Any other backbone gets heads of width 64.
LANGUAGE_MODEL_HEADS = {
    "gated_deltanet": {"n_heads": 6},  # key = value width 128
    "prism": {"n_heads": 6},  # built on Gated DeltaNet: width 128
    "mamba2": {"n_heads": 24, "d_state": 128},  # expand 2 -> 1536 channels, head width 64, state 128
}
DEFAULT_HEAD_WIDTH = 64
# Backbones whose cost per token should not grow with length (chunked linear scans); presets included.
LINEAR_BACKBONES = ("gated_deltanet", "mamba2", "prism")
PAPER_TOKENS_PER_S = {"prism_16k": 57_000, "ttt_linear": 340, "transformer_pp_2k": 71_400,
                      "transformer_pp_slowdown_16k": 3.8}


@dataclass(frozen=True)
class Shape:
    """A model size and the (length, batch) cases measured at it."""

    name: str
    title: str
    d_model: int
    n_layers: int
    vocabulary: int
    dropout: float
    cases: tuple[tuple[int, int], ...]
    paper_heads: bool  # True: LANGUAGE_MODEL_HEADS; False: 2 heads (the recommendation default)


@dataclass(frozen=True)
class Configuration:
    name: str
    shapes: tuple[Shape, ...]
    warmup: int
    steps: int
    case_budget_s: float
    file_stem: str


CONFIGURATIONS = {
    "paper": Configuration(
        "paper",
        (
            Shape("lm-0.13B", "0.13B language-model shape: d_model 768, 8 layers, vocabulary 32,000", 768, 8,
                  32_000, 0.0, ((2048, 8), (4096, 4), (8192, 2), (16384, 1)), paper_heads=True),
            Shape("recsys", "recommendation default: d_model 64, 2 layers, 2 heads, 58,636 items (Movies), "
                  "dropout 0.1", 64, 2, 58_636, 0.1, ((200, 256),), paper_heads=False),
        ),
        warmup=2, steps=10, case_budget_s=20.0, file_stem="throughput",
    ),
    "tiny": Configuration(
        "tiny",
        (
            Shape("lm-tiny", "tiny language-model shape: d_model 32, 2 layers, 2 heads, vocabulary 256", 32, 2,
                  256, 0.0, ((32, 2), (64, 1)), paper_heads=False),
            Shape("recsys-tiny", "tiny recommendation shape: d_model 16, 2 layers, 2 heads, 500 items", 16, 2,
                  500, 0.1, ((16, 8),), paper_heads=False),
        ),
        warmup=1, steps=2, case_budget_s=10.0, file_stem="throughput-tiny",
    ),
}


@dataclass
class CaseResult:
    """One (backbone, shape, length, batch) measurement; ``status``: ok, out of memory, over time, failed, not run."""

    backbone: str
    shape: str
    length: int
    batch: int
    status: str
    step_s: float | None = None  # median timed step; for "over time", the last warm-up step
    steps: int = 0
    peak_memory_mib: float | None = None
    detail: str = ""

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.step_s is None else self.batch * self.length / self.step_s


@dataclass
class BackboneResults:
    backbone: str
    shape: Shape
    options: dict
    parameters: int | None
    cases: list[CaseResult] = field(default_factory=list)


def base_backbone(name: str, candidates) -> str | None:
    """The name among ``candidates`` registered with the same factory as ``name`` (presets share it)."""
    factory = registry.backbone_entry(name).factory
    for candidate in candidates:
        if candidate in registry.list_backbones() and registry.backbone_entry(candidate).factory is factory:
            return candidate
    return None


def head_options(name: str, shape: Shape) -> dict:
    if not shape.paper_heads:
        return {"n_heads": 2}
    base = base_backbone(name, LANGUAGE_MODEL_HEADS)
    return dict(LANGUAGE_MODEL_HEADS[base]) if base else {"n_heads": shape.d_model // DEFAULT_HEAD_WIDTH}


def describe_heads(options: dict, shape: Shape, backbone: str) -> str:
    width = shape.d_model * (2 if base_backbone(backbone, ("mamba2",)) else 1) // options["n_heads"]
    extra = ", state " + str(options["d_state"]) if "d_state" in options else ""
    return f"{options['n_heads']} x {width}{extra}"


def timed_step(step, device: torch.device) -> float:
    """Seconds one call of ``step`` takes: CUDA events on CUDA, the host clock elsewhere."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    begin = time.perf_counter()
    step()
    return time.perf_counter() - begin


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_steps(model, optimizer, case: CaseResult, vocabulary: int, configuration: Configuration,
                  device: torch.device) -> CaseResult:
    """Warm up, then time training steps of ``case`` within the per-case budget."""
    generator = torch.Generator(device=device).manual_seed(0)
    objective = NextItemObjective(model, TrainConfig(loss="full"), generator)
    window = torch.randint(1, vocabulary + 1, (case.batch, case.length + 1), device=device, generator=generator)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss_sum, positions = objective(window)
        (loss_sum / positions).backward()
        optimizer.step()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timed_step(step, device)  # compiles kernels and fills caches: outside the budget
    began = time.perf_counter()
    for _ in range(configuration.warmup - 1):
        last_warmup_s = timed_step(step, device)
        if time.perf_counter() - began > configuration.case_budget_s / 2:
            break
    if time.perf_counter() - began > configuration.case_budget_s:
        case.status, case.step_s = "over time", last_warmup_s
        return case
    times = []
    while len(times) < configuration.steps and (not times or time.perf_counter() - began <= configuration.case_budget_s):
        times.append(timed_step(step, device))
    case.status, case.step_s, case.steps = "ok", statistics.median(times), len(times)
    if device.type == "cuda":
        case.peak_memory_mib = torch.cuda.max_memory_allocated(device) / 2**20
    return case


def run_case(model, optimizer, case: CaseResult, vocabulary: int, configuration: Configuration,
             device: torch.device) -> CaseResult:
    try:
        measure_steps(model, optimizer, case, vocabulary, configuration, device)
    except torch.OutOfMemoryError:
        case.status = "out of memory"
    except Exception as error:  # a backbone that breaks at one shape must not stop the others
        case.status, case.detail = "failed", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    optimizer.zero_grad(set_to_none=True)
    release_memory(device)
    return case


def measure_backbone(backbone: str, shape: Shape, configuration: Configuration, device: torch.device,
                     deadline: float | None) -> BackboneResults:
    """Every case of ``shape`` for ``backbone``, longer lengths skipped once a shorter one ran over time."""
    options = head_options(backbone, shape)
    results = BackboneResults(backbone, shape, options, None)
    pending = [CaseResult(backbone, shape.name, length, batch, "not run") for length, batch in shape.cases]
    if deadline is not None and time.perf_counter() > deadline:
        for case in pending:
            case.detail = "total budget spent"
        results.cases = pending
        return results
    try:
        with torch.device(device):
            model = SequentialRecommender(shape.vocabulary, backbone, d_model=shape.d_model,
                                          max_len=max(length for length, _ in shape.cases), dropout=shape.dropout,
                                          n_layers=shape.n_layers, **options)
    except torch.OutOfMemoryError:
        for case in pending:
            case.status = "out of memory"
        results.cases = pending
        release_memory(device)
        return results
    results.parameters = sum(parameter.numel() for parameter in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    slow_length = None
    for case in pending:
        if slow_length is not None:
            case.status, case.detail = "over time", f"skipped: over time at length {slow_length}"
        elif deadline is not None and time.perf_counter() > deadline:
            case.detail = "total budget spent"
        else:
            run_case(model, optimizer, case, shape.vocabulary, configuration, device)
            if case.status == "over time":
                slow_length = case.length
        results.cases.append(case)
        print(f"{backbone:>16} {shape.name:>12} {case.length:>6} x {case.batch:<4} {format_case(case, configuration)}",
              flush=True)
    del model, optimizer
    release_memory(device)
    return results


def format_rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s / 1000:.1f}K" if tokens_per_s >= 100 else f"{tokens_per_s:.1f}"


def format_case(case: CaseResult, configuration: Configuration) -> str:
    if case.status == "ok":
        text = f"{format_rate(case.tokens_per_s)} tok/s"
        if case.peak_memory_mib is not None:
            text += f", {case.peak_memory_mib / 1024:.1f} GiB"
        if case.steps < configuration.steps:
            text += f" ({case.steps} step{'s' if case.steps > 1 else ''})"
        return text
    if case.status == "over time" and case.step_s is not None:
        return f"over time (~{format_rate(case.tokens_per_s)} tok/s from one warm-up step)"
    return f"{case.status} ({case.detail})" if case.detail else case.status


def tokens_per_s_at(results: list[BackboneResults], backbone: str, length: int) -> float | None:
    for entry in results:
        if entry.backbone == backbone:
            for case in entry.cases:
                if case.length == length and case.status == "ok":
                    return case.tokens_per_s
    return None


def format_ratio(numerator: float | None, denominator: float | None) -> str:
    return "n/a" if numerator is None or denominator is None else f"{numerator / denominator:.2f}"


def target_lines(results: list[BackboneResults], configuration: Configuration) -> list[str]:
    """The issue's targets, each marked met / missed / not measured from the language-model shape."""
    shape = configuration.shapes[0]
    lengths = [length for length, _ in shape.cases]
    shortest, longest = lengths[0], lengths[-1]
    lm = [entry for entry in results if entry.shape.name == shape.name]
    measured = {entry.backbone for entry in lm}
    lines = []
    if {"prism", "gated_deltanet"} <= measured:
        ratios = [(length, tokens_per_s_at(lm, "prism", length), tokens_per_s_at(lm, "gated_deltanet", length))
                  for length in lengths]
        known = [prism / gdn for _, prism, gdn in ratios if prism and gdn]
        if any(ratio < 0.8 for ratio in known):
            verdict = "missed"
        else:
            verdict = "met" if len(known) == len(lengths) else "not measured"
        lines.append(f"- PRISM (L = 3) at least 0.8x Gated DeltaNet's tokens/s at every length: **{verdict}** "
                     f"(" + ", ".join(f"{length}: {format_ratio(p, g)}" for length, p, g in ratios) + ")")
    else:
        lines.append("- PRISM (L = 3) vs Gated DeltaNet: not measured (run both)")
    for entry in lm:
        if base_backbone(entry.backbone, LINEAR_BACKBONES) is None:
            continue
        first, last = tokens_per_s_at(lm, entry.backbone, shortest), tokens_per_s_at(lm, entry.backbone, longest)
        verdict = "not measured" if first is None or last is None else ("met" if last >= 0.9 * first else "missed")
        lines.append(f"- {entry.backbone}: tokens/s at {longest} within 10% of its {shortest} figure: **{verdict}** "
                     f"({longest} / {shortest} = {format_ratio(last, first)})")
    prism = tokens_per_s_at(lm, "prism", longest)
    paper = PAPER_TOKENS_PER_S
    paper_transformer = paper["prism_16k"] / (paper["transformer_pp_2k"] / paper["transformer_pp_slowdown_16k"])
    for other, paper_ratio, paper_text in (
        ("ttt-linear", paper["prism_16k"] / paper["ttt_linear"], "57K / 0.34K"),
        ("transformer++", paper_transformer, "57K / (71.4K / 3.8)"),
    ):
        value = tokens_per_s_at(lm, other, longest)
        bound = next((case for entry in lm if entry.backbone == other for case in entry.cases
                      if case.length == longest and case.status == "over time" and case.step_s), None)
        measured_text = format_ratio(prism, value)
        if value is None and bound is not None and prism is not None:
            measured_text = f"~{prism / bound.tokens_per_s:.0f} ({other} over time: one warm-up step)"
        lines.append(f"- PRISM / {other} at {longest}: measured {measured_text}; paper ~{paper_ratio:.1f} "
                     f"({paper_text} tokens/s on an H20)")
    return lines


def markdown_report(results: list[BackboneResults], configuration: Configuration, device: torch.device,
                    command: str, mlflow_note: str) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Training throughput and peak memory",
        "",
        f"Produced by: `{command}`",
        f"Device: {machine_description(device)}; torch {torch.__version__}, Triton {triton_version()}, "
        f"Python {platform.python_version()}; {when}; git {git_commit()}.",
        "",
        "One step = forward, backward and AdamW step of the project's `SequentialRecommender` (tied "
        "embedding and output head, final norm) with `NextItemObjective`: full softmax cross-entropy over the "
        "whole vocabulary / item table at every position"
        + (", bf16 autocast." if device.type == "cuda" else ", fp32 on CPU.")
        + f" {configuration.warmup} warm-up step(s), then up to {configuration.steps} timed steps "
        f"({'CUDA events' if device.type == 'cuda' else 'host clock'}) within {configuration.case_budget_s:.0f} s "
        "per case; the median is reported. tokens/s = batch x length / step time; "
        + ("peak memory = `torch.cuda.max_memory_allocated` over the case. " if device.type == "cuda" else
           "no peak memory on CPU. ")
        + "A count in brackets means fewer timed steps than "
        "asked (serial models). The first warm-up step (kernel compilation) is outside the budget; 'over time' "
        "means the later warm-up steps alone ran past it, and gives tokens/s from the last of them.",
        "",
        mlflow_note,
    ]
    for shape in configuration.shapes:
        entries = [entry for entry in results if entry.shape.name == shape.name]
        if not entries:
            continue
        header = [f"{length} x {batch}" for length, batch in shape.cases]
        lines += ["", f"## {shape.title}", "",
                  "| backbone | heads x width | parameters | " + " | ".join(header) + " |",
                  "|---|---|---|" + "---|" * len(header)]
        for entry in entries:
            parameters = "n/a" if entry.parameters is None else f"{entry.parameters / 1e6:.2f}M"
            cells = [format_case(case, configuration) for case in entry.cases]
            lines.append(f"| {entry.backbone} | {describe_heads(entry.options, shape, entry.backbone)} | "
                         f"{parameters} | " + " | ".join(cells) + " |")
    lines += ["", "## Targets (issue 7), from the first shape", "", *target_lines(results, configuration), ""]
    return "\n".join(lines)


def plot(results: list[BackboneResults], configuration: Configuration, path: Path, title: str) -> None:
    """tokens/s against length (log-log), one line per backbone; the last shape as bars beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines_shape, bars_shape = configuration.shapes[0], configuration.shapes[-1]
    figure, (lines_axis, bars_axis) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 2]})
    colours = plt.get_cmap("tab20").colors
    lines = [entry for entry in results if entry.shape.name == lines_shape.name]
    for index, entry in enumerate(lines):
        points = [(case.length, case.tokens_per_s) for case in entry.cases if case.status == "ok"]
        if points:
            lines_axis.plot(*zip(*points), marker="osD^v<>"[index % 7], color=colours[index % len(colours)],
                            linestyle="-" if index < len(colours) else "--", label=entry.backbone)
    lines_axis.set_xscale("log", base=2)
    lines_axis.set_yscale("log")
    lines_axis.set_xticks([length for length, _ in lines_shape.cases],
                          [f"{length} x {batch}" for length, batch in lines_shape.cases])
    lines_axis.minorticks_off()
    lines_axis.set_xlabel("sequence length x batch")
    lines_axis.set_ylabel("training tokens/s")
    lines_axis.set_title(lines_shape.title, fontsize=9)
    lines_axis.grid(True, which="both", alpha=0.3)
    if lines_axis.get_lines():
        lines_axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    bars = [(entry.backbone, entry.cases[0].tokens_per_s) for entry in results
            if entry.shape.name == bars_shape.name and entry.cases[0].status == "ok"]
    if bars:
        names, rates = zip(*bars)
        bars_axis.barh(names, rates)
        bars_axis.set_xscale("log")
    length, batch = bars_shape.cases[0]
    bars_axis.set_xlabel(f"training tokens/s at {length} x {batch}")
    bars_axis.set_title("\n".join(textwrap.wrap(bars_shape.title, 60)), fontsize=9)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    write_figure_atomically(path, figure, dpi=120)
    plt.close(figure)


def log_to_mlflow(results: list[BackboneResults], configuration: Configuration, device: torch.device,
                  command: str) -> None:
    """One run per (backbone, shape): tokens/s and peak memory with step = length, status tags per case."""
    import mlflow

    from ..tracking.store import experiment_id

    experiment = experiment_id(EXPERIMENT)
    for entry in results:
        tags = {**provenance_tags(device), "backbone": entry.backbone, "shape": entry.shape.name,
                "configuration": configuration.name, "command": command}
        tags.update({f"status_{case.length}x{case.batch}": format_case(case, configuration) for case in entry.cases})
        with mlflow.start_run(experiment_id=experiment, run_name=f"{entry.backbone} {entry.shape.name}", tags=tags):
            mlflow.log_params({"d_model": entry.shape.d_model, "n_layers": entry.shape.n_layers,
                               "vocabulary": entry.shape.vocabulary, "dropout": entry.shape.dropout,
                               "parameters": entry.parameters, "warmup": configuration.warmup,
                               "steps": configuration.steps, "case_budget_s": configuration.case_budget_s,
                               **{f"backbone.{key}": value for key, value in entry.options.items()}})
            for case in entry.cases:
                if case.status == "ok":
                    mlflow.log_metric("tokens_per_s", case.tokens_per_s, step=case.length)
                    mlflow.log_metric("step_ms", case.step_s * 1000, step=case.length)
                    if case.peak_memory_mib is not None:
                        mlflow.log_metric("peak_memory_mib", case.peak_memory_mib, step=case.length)


def import_store(source_uri: str, results_dir: Path) -> int:
    """Copy the "throughput" runs of the MLflow store at ``source_uri`` (one written on a GPU machine)
    into the current store, once each (tag ``source_run_id``), and redraw ``<results-dir>/<stem>.png``
    from the newest run per (backbone, shape); returns the number of runs copied. The report (.md) is the
    one the measuring machine wrote."""
    import mlflow

    from ..tracking.store import experiment_id

    database = source_uri.removeprefix("sqlite:///")
    if database != source_uri and not Path(database).is_file():
        raise ValueError(f"option --import-store: no such file {database}")
    source = mlflow.MlflowClient(tracking_uri=source_uri)
    try:
        experiment = source.get_experiment_by_name(EXPERIMENT)
        runs = source.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'",
                                  order_by=["attributes.start_time DESC"]) if experiment else []
    except mlflow.exceptions.MlflowException as error:
        raise ValueError(f"option --import-store: cannot read {source_uri}: {error}") from None
    if not runs:
        raise ValueError(f"option --import-store: no finished runs of experiment {EXPERIMENT!r} in {source_uri}")
    destination = experiment_id(EXPERIMENT)
    present = mlflow.search_runs([destination], "attributes.status = 'FINISHED'")  # a failed copy is redone
    done = set(present.get("run_id", [])) | set(present.get("tags.source_run_id", []))  # also: a store into itself
    count = 0
    for run in reversed(runs):
        if run.info.run_id in done:
            continue
        count += 1
        tags = {key: value for key, value in run.data.tags.items() if not key.startswith("mlflow.")}
        with mlflow.start_run(experiment_id=destination, run_name=run.info.run_name,
                              tags={**tags, "source_run_id": run.info.run_id}):
            mlflow.log_params(run.data.params)
            for key in run.data.metrics:
                for point in source.get_metric_history(run.info.run_id, key):
                    mlflow.log_metric(key, point.value, step=point.step)
    configuration = CONFIGURATIONS[runs[0].data.tags["configuration"]]
    newest = {}
    for run in runs:  # newest first
        tags = run.data.tags
        if tags.get("configuration") == configuration.name:
            newest.setdefault((tags["backbone"], tags["shape"]), run)
    results = []
    for shape in configuration.shapes:
        for (backbone, shape_name), run in sorted(newest.items()):
            if shape_name == shape.name:
                rates = {p.step: p.value for p in source.get_metric_history(run.info.run_id, "tokens_per_s")}
                cases = [CaseResult(backbone, shape.name, length, batch, "ok" if length in rates else "not ok",
                                    step_s=batch * length / rates[length] if length in rates else None)
                         for length, batch in shape.cases]
                results.append(BackboneResults(backbone, shape, {}, None, cases))
    machine = runs[0].data.tags.get("machine", "unknown machine")
    plot(results, configuration, results_dir / f"{configuration.file_stem}.png", f"Training throughput, {machine}")
    return count


def run(models: list[str], configuration: Configuration, device: torch.device, results_dir: Path,
        use_mlflow: str, total_budget_s: float | None, command: str) -> list[BackboneResults]:
    """Measure every shape of ``configuration`` for each of ``models`` in turn, rewriting the report after
    each, so that a run cut short still leaves the backbones it finished."""
    if use_mlflow == "on" and importlib.util.find_spec("mlflow") is None:
        raise ValueError("option --mlflow on: mlflow is not installed (use --mlflow auto or off)")
    log = use_mlflow == "on" or (use_mlflow == "auto" and importlib.util.find_spec("mlflow") is not None)
    mlflow_note = (f'Logged to MLflow, experiment "{EXPERIMENT}".' if log else
                   f"Not logged to MLflow ({'--mlflow off' if use_mlflow == 'off' else 'mlflow not installed here'}).")
    markdown_path = results_dir / f"{configuration.file_stem}.md"
    plot_path = results_dir / f"{configuration.file_stem}.png"
    deadline = None if total_budget_s is None else time.perf_counter() + total_budget_s
    results: list[BackboneResults] = []
    for backbone in models:
        for shape in configuration.shapes:
            results.append(measure_backbone(backbone, shape, configuration, device, deadline))
            report = markdown_report(results, configuration, device, command, mlflow_note)
            write_atomically(markdown_path, report)
    plot(results, configuration, plot_path, f"Training throughput, {machine_description(device)}")
    if log:
        log_to_mlflow(results, configuration, device, command)
    print(f"wrote {markdown_path} and {plot_path}")
    return results


def command_line(args: argparse.Namespace) -> str:
    """The command as run, every option spelled out, for the report and the MLflow tags."""
    words = ["prism-rec", "throughput"]
    for option in ("models", "config", "device", "warmup", "steps", "case_budget", "total_budget", "results_dir",
                   "mlflow"):
        value = getattr(args, option)
        if value is not None:
            words += [f"--{option.replace('_', '-')}", str(value)]
    return shlex.join(words)


def command_throughput(args: argparse.Namespace) -> None:
    results_dir = Path(args.results_dir) if args.results_dir else RESULTS_DIR
    if args.import_store:
        print(f"copied {import_store(args.import_store, results_dir)} run(s) from {args.import_store}; "
              f"plot redrawn in {results_dir}")
        return
    device = resolve_device(args.device)
    name = args.config if args.config != "auto" else ("paper" if device.type == "cuda" else "tiny")
    for option, value, least in (("warmup", args.warmup, 1), ("steps", args.steps, 1),
                                 ("case-budget", args.case_budget, 1e-9), ("total-budget", args.total_budget, 1e-9)):
        if value is not None and value < least:
            raise ValueError(f"option --{option}: must be {'>= 1' if least == 1 else '> 0'}, got {value}")
    overrides = {"warmup": args.warmup, "steps": args.steps, "case_budget_s": args.case_budget}
    configuration = Configuration(**{**CONFIGURATIONS[name].__dict__,
                                     **{key: value for key, value in overrides.items() if value is not None}})
    run(resolve_models(args.models), configuration, device, results_dir, args.mlflow, args.total_budget,
        command_line(args))


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``throughput`` subcommand to ``subparsers`` (an argparse sub-parser action)."""
    parser = subparsers.add_parser("throughput", help="training tokens/s and peak memory across sequence lengths")
    parser.add_argument("--models", default="all", help="comma-separated backbone names, or 'all' (default)")
    parser.add_argument("--config", choices=("auto", *CONFIGURATIONS), default="auto",
                        help="paper: 0.13B LM shape at 2K-16K and the recsys shape; tiny: toy sizes for CI; "
                             "auto: paper on CUDA, tiny elsewhere")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--warmup", type=int, help="warm-up steps per case, at least 1 (paper 2, tiny 1)")
    parser.add_argument("--steps", type=int, help="timed steps per case (paper 10, tiny 2)")
    parser.add_argument("--case-budget", type=float, help="seconds per case before it counts as over time "
                                                          "(paper 20, tiny 10)")
    parser.add_argument("--total-budget", type=float, help="seconds for the whole run; cases left are marked not run")
    parser.add_argument("--results-dir", help=f"folder of the report and plot (default {RESULTS_DIR})")
    parser.add_argument("--mlflow", choices=("auto", "on", "off"), default="auto",
                        help="log to MLflow: auto = when mlflow is importable")
    parser.add_argument("--import-store", metavar="URI",
                        help="measure nothing: copy the finished throughput runs of this MLflow store (e.g. "
                             "sqlite:///x.db from a GPU machine) into the current one and redraw the plot in "
                             "--results-dir from them (the measuring options do not apply)")
    parser.set_defaults(func=command_throughput)
    return parser

