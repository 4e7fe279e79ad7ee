"""Charts of the runs: learning curves (one run's, or every model of a benchmark on shared axes), the test AUC
per model, paired differences (a forest plot) and the cost Pareto plot; the files are 300-dpi PNGs with an SVG
beside (:func:`save_figure`)."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVGs, editable in a paper's figure
matplotlib.rcParams["svg.hashsalt"] = "prism-rec"  # the same figure gives the same SVG (its element ids)

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..files import write_atomically, write_figure_atomically  # noqa: E402
from .cells import runs_label  # noqa: E402


def learning_curve(history: list[dict], title: str, best_epoch: int | None = None) -> plt.Figure:
    """Train loss and validation AUC per epoch of one run, side by side, its best epoch (1-based) marked."""
    return learning_curves({"": [(history, best_epoch)]}, title)


def learning_curves(runs: dict[str, list[tuple[list[dict], int | None]]], title: str) -> plt.Figure:
    """Train loss and validation AUC per epoch (1-based) of every model in ``runs`` ({model: [(history,
    best epoch), one per seed]}) on one pair of shared axes, a colour per model, a star on the validation
    AUC of each run's best epoch (the weights its test metrics come from). A run without history (one that
    does not train, such as pop) draws nothing."""
    figure, (loss_axes, auc_axes) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for colour, (model, seeds) in zip(_colours(len(runs)), runs.items()):
        for index, (history, best_epoch) in enumerate(seed for seed in seeds if seed[0]):  # runs with history
            epochs = range(1, len(history) + 1)
            label = model if index == 0 and model else None
            loss_axes.plot(epochs, [row["train_loss"] for row in history], marker=".", color=colour, label=label)
            auc_axes.plot(epochs, [row["valid_auc"] for row in history], marker=".", color=colour, label=label)
            if best_epoch:
                auc_axes.plot(best_epoch, history[best_epoch - 1]["valid_auc"], marker="*", markersize=14,
                              color=colour, markeredgecolor="black", linestyle="none")
    loss_axes.set(xlabel="epoch", ylabel="train loss (cross-entropy)", title="training loss")
    auc_axes.set(xlabel="epoch", ylabel="validation AUC", title="validation AUC (star: best epoch)")
    for axes in (loss_axes, auc_axes):
        axes.grid(alpha=0.3)
        axes.xaxis.get_major_locator().set_params(integer=True)
    if any(runs):
        auc_axes.legend(fontsize=8, loc="lower right")
    figure.suptitle(title)
    return figure


def _colours(count: int) -> list:
    return [plt.get_cmap("tab10" if count <= 10 else "tab20")(index % 20) for index in range(count)]


def _caption(figure: plt.Figure, caption: str) -> None:
    """``caption`` in small type under the axes (the figure must use the constrained layout)."""
    if caption:
        figure.supxlabel(caption, fontsize=7, wrap=True)


DPI = 300  # the PNG of every figure here; an SVG of it lies beside


def save_figure(figure: plt.Figure, path: Path) -> Path:
    """``figure`` as a 300-dpi PNG at ``path`` and as an SVG beside it (same name, .svg), both written atomically;
    closes the figure and returns ``path``."""
    write_figure_atomically(path, figure, dpi=DPI)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})  # no date: a regenerated figure is unchanged
    write_atomically(Path(path).with_suffix(".svg"), buffer.getvalue())
    plt.close(figure)
    return path


# Offsets (points) tried for a point's label, nearest first: right, above, left, below and the diagonals, in rings.
_LABEL_OFFSETS = [(radius * dx, radius * dy) for radius in (5, 11, 18, 26, 36, 48)
                  for dx, dy in ((1, 0.3), (1, 1), (0, 1), (-1, 1), (-1, 0.3), (-1, -1), (0, -1), (1, -1))]


def _annotate(axes: plt.Axes, text: str, xy: tuple[float, float], offset: tuple[float, float], fontsize: float):
    dx, dy = offset
    leader = {"arrowstyle": "-", "color": "0.55", "linewidth": 0.5, "shrinkA": 0, "shrinkB": 3}
    label = axes.annotate(text, xy, xytext=offset, textcoords="offset points", fontsize=fontsize,
                          ha="left" if dx > 0 else "right" if dx < 0 else "center",
                          va="bottom" if dy > 0 else "top" if dy < 0 else "center",
                          arrowprops=leader if max(abs(dx), abs(dy)) > 6 else None)  # a line unless beside it
    label.set_in_layout(False)
    return label


def place_labels(axes: plt.Axes, labels: list[tuple[str, float, float]], obstacles: list | None = None,
                 fontsize: float = 7) -> list:
    """Each of ``labels`` ((text, x, y) in data coordinates) beside its point, at the nearest offset of
    :data:`_LABEL_OFFSETS` whose box stays inside the axes and overlaps no label placed before it, no marker,
    no text or legend already on the axes and no box of ``obstacles`` (display-coordinate Bboxes, such as
    whiskers), with a thin line to its point
    when it sits away from it; where no offset is free, the nearest. Labels are placed from the top of the axes
    down; the axes' limits and the figure's size must be final. Returns the annotations."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    axes.figure.draw_without_rendering()  # the layout (and so transData) as the saved figure will have it
    renderer = axes.figure.canvas.get_renderer()
    inside = axes.get_window_extent(renderer)
    points = [axes.transData.transform((x, y)) for _, x, y in labels]
    drawn = [*axes.texts, *([axes.get_legend()] if axes.get_legend() else [])]  # notes and the legend
    blocked = [*(obstacles or []), *(artist.get_window_extent(renderer) for artist in drawn),
               *(Bbox.from_bounds(px - 4, py - 4, 8, 8) for px, py in points)]
    placed = []
    for index in sorted(range(len(labels)), key=lambda i: -points[i][1]):
        text, x, y = labels[index]
        for offset in _LABEL_OFFSETS:
            label = _annotate(axes, text, (x, y), offset, fontsize)
            label.update_positions(renderer)
            box = Text.get_window_extent(label, renderer).expanded(1.04, 1.08)  # the text, not its line
            if (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
                    and not any(box.overlaps(other) for other in blocked)):
                break
            label.remove()
        else:
            label = _annotate(axes, text, (x, y), _LABEL_OFFSETS[0], fontsize)
            label.update_positions(renderer)
            box = Text.get_window_extent(label, renderer)
        blocked.append(box)
        placed.append(label)
    return placed


def _spread(heights: list[float], gap: float) -> list[float]:
    """Levels for labels wanted at ``heights``: each at its height where it is ``gap`` clear of the others,
    else in a stack of labels ``gap`` apart centred on the mean of the heights it holds (stacks that come
    within ``gap`` of each other merge)."""
    stacks = [[index] for index in sorted(range(len(heights)), key=lambda index: heights[index])]

    def bottom(stack):  # the lowest level of a stack centred on its members' mean height
        return float(np.mean([heights[index] for index in stack])) - gap * (len(stack) - 1) / 2

    merged = True
    while merged:
        merged = False
        for position in range(len(stacks) - 1):
            lower, upper = stacks[position], stacks[position + 1]
            if bottom(lower) + gap * len(lower) > bottom(upper):
                stacks[position : position + 2] = [lower + upper]
                merged = True
                break
    levels = [0.0] * len(heights)
    for stack in stacks:
        for rank, index in enumerate(stack):
            levels[index] = bottom(stack) + rank * gap
    return levels


def label_line_ends(axes: plt.Axes, ends: list[tuple[str, float, float, str]], fontsize: float = 7) -> list:
    """A label per line just right of the axes, level with its last point (``ends``: (text, x, y, colour) in
    data coordinates), in its colour, spread vertically so that no two overlap, a thin line to its point. The
    axes' limits are fixed first, so that the labels do not move them. Returns the annotations."""
    if not ends:
        return []
    axes.set_xlim(*axes.get_xlim())
    axes.set_ylim(*axes.get_ylim())
    axes.figure.draw_without_rendering()
    points = [axes.transData.transform((x, y)) for _, x, y, _ in ends]  # display pixels
    levels = _spread([point[1] for point in points], fontsize * 1.3 * axes.figure.dpi / 72)  # a label apart
    inverse = axes.transData.inverted()
    labels = []
    for (text, x, y, colour), point, height in zip(ends, points, levels):
        level = inverse.transform((point[0], height))[1]
        labels.append(axes.annotate(text, (x, y), xytext=(1.02, level), textcoords=("axes fraction", "data"),
                                    fontsize=fontsize, color=colour, va="center", ha="left", annotation_clip=False,
                                    arrowprops={"arrowstyle": "-", "color": colour, "linewidth": 0.5,
                                                "shrinkA": 1, "shrinkB": 2, "alpha": 0.7}))
    return labels


def _zoomed(low: np.ndarray, high: np.ndarray, margin: float = 0.08) -> tuple[float, float]:
    """Axis limits around the values from ``low`` to ``high``: their range with ``margin`` of it either side."""
    bottom, top = float(np.min(low)), float(np.max(high))
    pad = margin * (top - bottom) if top > bottom else 0.005
    return bottom - pad, top + pad


def auc_chart(summary: pd.DataFrame, title: str, path: Path, caption: str = "", floor: str | None = None) -> Path:
    """A point per model at its mean test AUC, best on top, on an axis zoomed to the data (neither 0 nor chance),
    each labelled on the right with its mean and n (seeds, and test users where ``summary`` has ``n_users``).
    Whiskers, named in the title: the 95% bootstrap interval over test users where ``summary`` has
    ``auc_ci_low``/``auc_ci_high`` for every model, else the std over seeds (one seed has no spread, and the
    title says so). The row of model ``floor`` (pop's), if given, is a note under the axis instead of a point, so
    that the axis zooms to the others. ``caption`` goes under it; writes ``path`` (PNG) and the SVG beside it."""
    floor_rows = summary[summary["model"] == floor] if floor is not None else summary.iloc[:0]
    if len(floor_rows) < len(summary):
        summary = summary[summary["model"] != floor]
    else:  # the floor alone: nothing else to zoom to
        floor_rows = summary.iloc[:0]
    ordered = summary.sort_values("auc_mean").reset_index(drop=True)
    means = ordered["auc_mean"].to_numpy(dtype=float)
    if "auc_ci_low" in ordered and ordered["auc_ci_low"].notna().all():
        below, above = means - ordered["auc_ci_low"].to_numpy(float), ordered["auc_ci_high"].to_numpy(float) - means
        whiskers = "whiskers: 95% bootstrap CI over test users"
    else:
        below = above = ordered["auc_std"].fillna(0.0).to_numpy(dtype=float)
        whiskers = "whiskers: ± std over seeds" if (ordered["n_seeds"] > 1).any() else "one seed: no whiskers"
    figure, axes = plt.subplots(figsize=(7, 1.1 + 0.3 * len(ordered)), layout="constrained")
    positions = np.arange(len(ordered))
    axes.errorbar(means, positions, xerr=[below, above], fmt="o", color="tab:blue", capsize=3, markersize=5)
    axes.set_yticks(positions, ordered["model"], fontsize=8)
    labels = []
    for _, row in ordered.iterrows():
        n = runs_label(row["model"], row["n_seeds"])
        if "n_users" in ordered and pd.notna(row["n_users"]):
            n += f", {int(row['n_users']):,} users"
        labels.append(f"{row['auc_mean']:.4f} ({n})")
    right = axes.twinx()  # the labels as tick labels on the right: the constrained layout makes room for them
    right.set_ylim(axes.get_ylim())
    right.set_yticks(positions, labels, fontsize=7)
    right.tick_params(length=0)
    axes.set_xlim(*_zoomed(means - below, means + above))
    seeds = "one seed" if (ordered["n_seeds"] == 1).all() else "mean over seeds"
    notes = "".join(f"; {row['model']} {row['auc_mean']:.4f}, off the axis" for _, row in floor_rows.iterrows())
    axes.set_xlabel(f"test AUC ({seeds}; axis zoomed to the data{notes})", fontsize=8)
    axes.set_title(f"{title}\n{whiskers}", fontsize=9)
    axes.grid(axis="x", alpha=0.3)
    _caption(figure, caption)
    return save_figure(figure, path)


def forest_plot(rows: list[tuple[str, float, float, float, bool]], title: str, whiskers: str, caption: str,
                path: Path) -> Path:
    """Paired differences, a row each (``rows``: (what, mean, low, high, significant), top to bottom), as points
    with their interval and a line at 0; a filled point where ``significant`` (by the verdict rule that
    ``caption`` names), an open one where not. ``whiskers`` (what the intervals are) goes in the title. With no
    rows the axes say so. Writes ``path`` (PNG) and the SVG beside it."""
    figure, axes = plt.subplots(figsize=(7, 1.2 + 0.32 * max(len(rows), 1)), layout="constrained")
    positions = np.arange(len(rows))[::-1]
    for position, (_, mean, low, high, significant) in zip(positions, rows):
        axes.errorbar(mean, position, xerr=[[mean - low], [high - mean]], fmt="o", capsize=3, color="tab:red",
                      markerfacecolor="tab:red" if significant else "white", markersize=5)
    axes.axvline(0.0, color="black", linewidth=0.8)
    if rows:
        axes.set_yticks(positions, [row[0] for row in rows], fontsize=8)
        low, high = _zoomed(np.array([min(r[2] for r in rows), 0.0]), np.array([max(r[3] for r in rows), 0.0]))
        axes.set_xlim(low, high)
    else:
        axes.set_yticks([])
        axes.text(0.5, 0.5, "no paired differences", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlabel("difference of mean test AUC (filled: significant by the verdict rule)", fontsize=8)
    axes.set_title(f"{title}\n{whiskers}", fontsize=9)
    axes.grid(axis="x", alpha=0.3)
    _caption(figure, caption)
    return save_figure(figure, path)


def pareto_chart(points: dict[str, tuple[float, float, float]], front: list[str], floor: float | None, title: str,
                 caption: str, path: Path) -> Path:
    """Test AUC against training tokens/s (log x) per model (``points``: {model: (tokens/s, mean AUC, std)}),
    whiskers = std over seeds (the title says so), the models of ``front`` joined as the Pareto front, the y axis
    zoomed to the points; ``floor`` (pop's AUC), if given, is a dashed line where it falls inside that range and a
    note otherwise; ``caption`` under the axes. With no points the axes say so. Writes ``path`` and its SVG."""
    figure, axes = plt.subplots(figsize=(7.5, 5.0), layout="constrained")
    for model, (speed, mean, std) in points.items():
        on_front = model in front
        axes.errorbar(speed, mean, yerr=std, fmt="o", capsize=3, color="tab:red" if on_front else "tab:blue")
    if front:
        ordered = sorted(front, key=lambda m: points[m][0])
        axes.step([points[m][0] for m in ordered], [points[m][1] for m in ordered], where="pre", color="tab:red",
                  alpha=0.6, label="Pareto front")
    if points:
        values = np.array(list(points.values()))
        low, high = _zoomed(values[:, 1] - values[:, 2], values[:, 1] + values[:, 2])
        axes.set_ylim(low, high)
        axes.set_xscale("log")
    else:
        axes.text(0.5, 0.5, "no solo throughput figures", ha="center", va="center", transform=axes.transAxes)
    if floor is not None and (not points or low <= floor <= high):
        axes.axhline(floor, color="gray", linestyle="--", label=f"pop (floor) {floor:.4f}")
    elif floor is not None:
        axes.text(0.01, 0.01, f"pop (floor) {floor:.4f}, {'below' if floor < low else 'above'} the axis", fontsize=7,
                  color="gray", transform=axes.transAxes)
    if points:
        axes.legend(fontsize=8, loc="lower right")
    axes.set(xlabel="solo training tokens/s (log scale)", ylabel="test AUC (mean over seeds)",
             title=f"{title}\nwhiskers: ± std over seeds; axis zoomed to the data")
    axes.title.set_fontsize(9)
    axes.grid(alpha=0.3, which="both")
    _caption(figure, caption)
    if points:
        axes.set_xlim(*axes.get_xlim())  # fixed before the labels are placed
        place_labels(axes, [(model, speed, mean) for model, (speed, mean, _) in points.items()],
                     _whisker_boxes(axes, points.values()))
    return save_figure(figure, path)


def _whisker_boxes(axes: plt.Axes, points) -> list:
    """The display boxes of the vertical whiskers of ``points`` ((x, mean, std)), 8 px wide."""
    from matplotlib.transforms import Bbox

    axes.figure.draw_without_rendering()
    boxes = []
    for x, mean, std in points:
        (left, low), (_, high) = axes.transData.transform([(x, mean - std), (x, mean + std)])
        boxes.append(Bbox.from_extents(left - 4, low, left + 4, high))
    return boxes
