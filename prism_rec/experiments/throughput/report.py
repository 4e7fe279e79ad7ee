"""The throughput report: markdown tables per shape, the plot of tokens/s and peak memory, and the report read
back (:func:`read_report`) to redraw the plot."""

from __future__ import annotations

import datetime
import platform
import re
import textwrap
from dataclasses import replace
from pathlib import Path

import torch

from ...markdown import fill, pipe_table
from ...paths import TEMPLATES_DIR
from ...tracking.store import git_commit, machine_description, triton_version
from .measure import BackboneResults, CaseResult, format_case
from .shapes import CONFIGURATIONS, Configuration, describe_heads
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


# Backbone families: a colour each in the plot; a family's members differ in marker and line style.
FAMILIES = {"attention": ("tab:blue", ("sasrec", "transformer++", "hstu")),
            "Gated DeltaNet": ("tab:orange", ("gated_deltanet", "gdn-authors")),
            "PRISM and its ablations": ("tab:red", ("prism", "prism-authors", "prism-L0", "prism-L1", "prism-eq18",
                                                    "prism-noconv", "prism-nogain", "prism-nogelu")),
            "Mamba-2": ("tab:green", ("mamba2", "mamba2-authors")),
            "test-time training": ("tab:purple", ("ttt-linear", "ttt-mlp", "titans"))}
OTHER_FAMILY, OTHER_COLOUR = "other", "tab:gray"
MARKERS, LINE_STYLES = "osD^v<>PX*", ("-", "--", ":", "-.")
GIB = 1024  # MiB


def family(backbone: str) -> str:
    """The family of :data:`FAMILIES` that ``backbone`` belongs to, else "other"."""
    return next((name for name, (_, members) in FAMILIES.items() if backbone in members), OTHER_FAMILY)


def _styles(backbones: list[str]) -> dict[str, dict]:
    """Line style per backbone: its family's colour, a marker and line style of its own within the family."""
    styles, counts = {}, {}
    for backbone in backbones:
        name = family(backbone)
        index = counts[name] = counts.get(name, -1) + 1
        colour = FAMILIES[name][0] if name in FAMILIES else OTHER_COLOUR
        styles[backbone] = {"color": colour, "marker": MARKERS[index % len(MARKERS)],
                            "linestyle": LINE_STYLES[index % len(LINE_STYLES)]}
    return styles


def _by_family(entries: list[BackboneResults]) -> list[BackboneResults]:
    order = [*FAMILIES, OTHER_FAMILY]
    return sorted(entries, key=lambda entry: order.index(family(entry.backbone)))


def _rate_axis(axis, label: str) -> None:
    """A log axis with ticks at 1, 2 and 5 of every decade, written 2K, 500, 1.2M (a range under a decade still
    gets several)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _short(value)))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_ylabel(label)


def _short(value: float) -> str:
    for scale, suffix in ((1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _lines(axis, entries: list[BackboneResults], shape, styles: dict, value, label: str) -> None:
    """One line per backbone of ``value(case)`` against length (log-log) over its measured cases, labelled
    right of the axes level with its last point, or beside that point where the line stops short of the last
    length; tokens/s of cases over time (from one warm-up step) as open markers."""
    from ...tracking.plots import label_line_ends, place_labels

    ends = []
    for entry in entries:
        points = [(case.length, value(case)) for case in entry.cases if case.status == "ok" and value(case)]
        style = styles[entry.backbone]
        if points:
            axis.plot(*zip(*points), markersize=4, linewidth=1.2, **style)
            ends.append((entry.backbone, *points[-1], style["color"]))
        estimates = [(case.length, case.tokens_per_s) for case in entry.cases
                     if case.status == "over time" and case.step_s is not None and value is _tokens]
        if estimates:
            axis.plot(*zip(*estimates), linestyle="none", marker=style["marker"], markersize=4,
                      markerfacecolor="white", color=style["color"])
    axis.set_xscale("log", base=2)
    axis.set_xticks([length for length, _ in shape.cases], [f"{length} x {batch}" for length, batch in shape.cases],
                    fontsize=7)
    axis.minorticks_off()
    _rate_axis(axis, label)
    axis.set_xlabel("sequence length x batch (log scale)", fontsize=8)
    axis.grid(True, which="major", alpha=0.3)
    last = shape.cases[-1][0]
    label_line_ends(axis, [end for end in ends if end[1] == last])
    place_labels(axis, [(text, x, y) for text, x, y, _ in ends if x != last])


def _tokens(case: CaseResult) -> float | None:
    return case.tokens_per_s


def _memory(case: CaseResult) -> float | None:
    return None if case.peak_memory_mib is None else case.peak_memory_mib / GIB


def plot(results: list[BackboneResults], configuration: Configuration, path: Path, title: str) -> Path:
    """Training tokens/s and peak memory against length at the first shape (log-log lines, a colour per family
    of :data:`FAMILIES`, each line labelled at its end), and tokens/s at the last shape's first case as a point
    per backbone; no whiskers (each point is one median of timed steps). A 300-dpi PNG at ``path`` with an SVG
    beside it."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from ...tracking.plots import save_figure

    lines_shape, points_shape = configuration.shapes[0], configuration.shapes[-1]
    backbones = list(dict.fromkeys(entry.backbone for entry in _by_family(results)))
    styles = _styles(backbones)
    lines = _by_family([entry for entry in results if entry.shape.name == lines_shape.name])
    figure, (rate_axis, memory_axis, points_axis) = plt.subplots(
        1, 3, figsize=(16, 6.5), gridspec_kw={"width_ratios": [5, 4, 3]}, layout="constrained")
    _lines(rate_axis, lines, lines_shape, styles, _tokens, "training tokens/s (log scale)")
    rate_axis.set_title(f"tokens/s, {lines_shape.title}", fontsize=9)
    if any(_memory(case) for entry in lines for case in entry.cases if case.status == "ok"):
        _lines(memory_axis, lines, lines_shape, styles, _memory, "peak memory, GiB (log scale)")
        memory_axis.yaxis.set_major_formatter(lambda value, _: f"{value:g}")
    else:
        memory_axis.text(0.5, 0.5, "no peak memory (measured on CUDA only)", ha="center", va="center",
                         transform=memory_axis.transAxes)
        memory_axis.set_axis_off()
    memory_axis.set_title(f"peak memory, {lines_shape.title}", fontsize=9)
    measured = [(entry.backbone, entry.cases[0].tokens_per_s) for entry in _by_family(results)
                if entry.shape.name == points_shape.name and entry.cases[0].status == "ok"]
    for position, (backbone, rate) in enumerate(reversed(measured)):
        points_axis.plot(rate, position, linestyle="none", marker=styles[backbone]["marker"],
                         color=styles[backbone]["color"])
    points_axis.set_yticks(range(len(measured)), [backbone for backbone, _ in reversed(measured)], fontsize=7)
    points_axis.set_xscale("log")
    points_axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    points_axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _short(value)))
    points_axis.xaxis.set_minor_formatter(NullFormatter())
    points_axis.margins(x=0.08, y=0.04)
    points_axis.grid(True, axis="x", which="major", alpha=0.3)
    length, batch = points_shape.cases[0]
    points_axis.set_xlabel(f"training tokens/s at {length} x {batch} (log scale)", fontsize=8)
    points_axis.set_title("\n".join(textwrap.wrap(f"tokens/s, {points_shape.title}", 40)), fontsize=9)
    present = [name for name in [*FAMILIES, OTHER_FAMILY] if any(family(b) == name for b in backbones)]
    handles = [Line2D([], [], color=FAMILIES[name][0] if name in FAMILIES else OTHER_COLOUR, linewidth=3)
               for name in present]
    figure.legend(handles, present, loc="outside lower center", ncols=len(present), fontsize=8, frameon=False)
    figure.suptitle(f"{title}\nno whiskers: each point is the median of one case's timed steps (open marker: "
                    "over time, tokens/s from one warm-up step)", fontsize=10)
    return save_figure(figure, path)


CELL = re.compile(r"(?P<rate>[\d.]+)(?P<unit>[KM]?) tok/s(?:, (?P<memory>[\d.]+) GiB)?(?: \((?P<steps>\d+) steps?\))?$")
OVER_TIME = re.compile(r"over time \(~(?P<rate>[\d.]+)(?P<unit>[KM]?) tok/s from one warm-up step\)$")
UNITS = {"": 1.0, "K": 1e3, "M": 1e6}


def read_report(path: Path) -> tuple[list[BackboneResults], Configuration, str]:
    """The measurements of a report :func:`markdown_report` wrote (its tables: tokens/s to the 0.1K, memory to
    the 0.1 GiB it prints), its configuration (the one whose shape titles its sections carry) and its device
    line; a report that is not one raises ValueError naming the file and line."""
    text = Path(path).read_text()
    device = re.search(r"^Device: ([^;]+);", text, re.MULTILINE)
    sections = dict(re.findall(r"^## (.+)\n\n(\|.+(?:\n\|.+)*)", text, re.MULTILINE))
    configuration = next((c for c in CONFIGURATIONS.values() if all(s.title in sections for s in c.shapes)), None)
    if device is None or configuration is None:
        raise ValueError(f"{path}: not a throughput report (no Device line or no section per shape of a "
                         f"configuration: {', '.join(CONFIGURATIONS)})")
    results = []
    for shape in configuration.shapes:
        for number, row in enumerate(sections[shape.title].splitlines()[2:], start=3):
            cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
            if len(cells) != 3 + len(shape.cases):
                raise ValueError(f"{path}: section {shape.title!r}, table line {number}: {len(cells)} cells, "
                                 f"expected {3 + len(shape.cases)}")
            cases = [_read_case(cells[0], shape.name, length, batch, cell)
                     for (length, batch), cell in zip(shape.cases, cells[3:])]
            results.append(BackboneResults(cells[0], shape, {}, None, cases))
    return results, replace(configuration, file_stem=Path(path).stem), device.group(1)


def _read_case(backbone: str, shape: str, length: int, batch: int, cell: str) -> CaseResult:
    for pattern, status in ((CELL, "ok"), (OVER_TIME, "over time")):
        found = pattern.match(cell)
        if found:
            rate = float(found["rate"]) * UNITS[found["unit"]]
            memory = found.groupdict().get("memory")
            return CaseResult(backbone, shape, length, batch, status, step_s=batch * length / rate,
                              steps=int(found.groupdict().get("steps") or 0),
                              peak_memory_mib=float(memory) * GIB if memory else None)
    return CaseResult(backbone, shape, length, batch, cell.split(" (")[0], detail=cell)
