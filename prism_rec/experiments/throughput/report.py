"""The throughput report: markdown tables per shape and the tokens/s plot."""

from __future__ import annotations

import datetime
import platform
import textwrap
from pathlib import Path

import torch

from ...files import write_figure_atomically
from ...markdown import fill, pipe_table
from ...paths import TEMPLATES_DIR
from ...tracking.store import git_commit, machine_description, triton_version
from .measure import BackboneResults, format_case
from .shapes import Configuration, describe_heads
from .targets import target_lines


def markdown_report(results: list[BackboneResults], configuration: Configuration, device: torch.device,
                    command: str, mlflow_note: str) -> str:
    cuda = device.type == "cuda"
    lines = [fill(TEMPLATES_DIR / "throughput.md", command=command, device=machine_description(device),
                  torch=torch.__version__, triton=triton_version(), python=platform.python_version(),
                  when=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                  commit=git_commit(), precision=", bf16 autocast." if cuda else ", fp32 on CPU.",
                  warmup=configuration.warmup, steps=configuration.steps,
                  clock="CUDA events" if cuda else "host clock", case_budget=f"{configuration.case_budget_s:.0f}",
                  memory_note=("peak memory = `torch.cuda.max_memory_allocated` over the case." if cuda
                               else "no peak memory on CPU."), mlflow_note=mlflow_note)]
    for shape in configuration.shapes:
        entries = [entry for entry in results if entry.shape.name == shape.name]
        if not entries:
            continue
        header = [f"{length} x {batch}" for length, batch in shape.cases]
        rows = [[entry.backbone, describe_heads(entry.options, shape, entry.backbone),
                 "n/a" if entry.parameters is None else f"{entry.parameters / 1e6:.2f}M",
                 *(format_case(case, configuration) for case in entry.cases)] for entry in entries]
        lines += ["", f"## {shape.title}", "",
                  pipe_table(["backbone", "heads x width", "parameters", *header], rows, align="l" * (3 + len(header)))]
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
