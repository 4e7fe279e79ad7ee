"""PNG charts for the MLflow runs: learning curves (one run's, or every model of a benchmark on shared axes),
a benchmark's test AUC per model."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import pandas as pd  # noqa: E402

from ..files import write_figure_atomically  # noqa: E402
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


CHANCE_AUC = 0.5  # a random ranking: the bars start there


def auc_bar_chart(summary: pd.DataFrame, title: str, path: Path, caption: str = "") -> Path:
    """A horizontal bar per model from chance (AUC 0.5) to its mean test AUC, best on top, each labelled
    with its mean and n (seeds, and test users where ``summary`` has ``n_users``). Whiskers: the 95%
    bootstrap interval over test users where ``summary`` has ``auc_ci_low``/``auc_ci_high``, else the std
    over seeds of the models with several (one seed has no spread, and the axis label says so).
    ``caption`` goes under it; writes ``path``."""
    ordered = summary.sort_values("auc_mean").reset_index(drop=True)
    means = ordered["auc_mean"].to_numpy(dtype=float)
    if "auc_ci_low" in ordered and ordered["auc_ci_low"].notna().all():
        below, above = means - ordered["auc_ci_low"].to_numpy(float), ordered["auc_ci_high"].to_numpy(float) - means
        whiskers = "whiskers: 95% bootstrap CI over test users"
    else:
        below = above = ordered["auc_std"].fillna(0.0).to_numpy(dtype=float)
        whiskers = "whiskers: std over seeds" if (ordered["n_seeds"] > 1).any() else "one seed: no spread over seeds"
    figure, axes = plt.subplots(figsize=(8, 1.2 + 0.45 * len(ordered)), layout="constrained")
    axes.barh(ordered["model"], means - CHANCE_AUC, left=CHANCE_AUC, xerr=[below, above], capsize=3,
              color="tab:blue", alpha=0.8)
    for position, row in ordered.iterrows():
        n = runs_label(row["model"], row["n_seeds"])
        if "n_users" in ordered and pd.notna(row["n_users"]):
            n += f", {int(row['n_users']):,} users"
        axes.annotate(f"{row['auc_mean']:.4f}  ({n})", (means[position] + above[position], position), va="center",
                      fontsize=8, xytext=(4, 0), textcoords="offset points")
    seeds = "one seed" if (ordered["n_seeds"] == 1).all() else "mean over seeds"
    axes.set_xlim(CHANCE_AUC, min(1.0, (means + above).max() + 0.5 * ((means + above).max() - CHANCE_AUC)))
    axes.set(xlabel=f"test AUC ({seeds}; {whiskers}; bars start at chance, 0.5)", title=title)
    axes.grid(axis="x", alpha=0.3)
    _caption(figure, caption)
    write_figure_atomically(path, figure, dpi=110)
    plt.close(figure)
    return path


def pareto_chart(points: dict[str, tuple[float, float, float]], front: list[str], floor: float | None, title: str,
                 caption: str, path: Path) -> Path:
    """Test AUC against training tokens/s (log x) per model (``points``: {model: (tokens/s, mean AUC, std)}),
    error bars = std, the models of ``front`` joined as the Pareto front, a dashed line at ``floor`` (pop's
    AUC) if given; ``caption`` under the axes. With no points the axes say so. Writes ``path``."""
    figure, axes = plt.subplots(figsize=(7.5, 5.0), layout="constrained")
    for model, (speed, mean, std) in points.items():
        on_front = model in front
        axes.errorbar(speed, mean, yerr=std, fmt="o", capsize=3, color="tab:red" if on_front else "tab:blue")
        axes.annotate(model, (speed, mean), fontsize=7, xytext=(4, 3), textcoords="offset points")
    if front:
        ordered = sorted(front, key=lambda m: points[m][0])
        axes.step([points[m][0] for m in ordered], [points[m][1] for m in ordered], where="pre", color="tab:red",
                  alpha=0.6, label="Pareto front")
    if floor is not None:
        axes.axhline(floor, color="gray", linestyle="--", label=f"pop (floor) {floor:.4f}")
    if points:
        axes.set_xscale("log")
        axes.legend(fontsize=8, loc="lower right")
    else:
        axes.text(0.5, 0.5, "no solo throughput figures", ha="center", va="center", transform=axes.transAxes)
    axes.set(xlabel="solo training tokens/s (log scale)", ylabel="test AUC (mean ± std over seeds)", title=title)
    axes.title.set_fontsize(9)
    axes.grid(alpha=0.3, which="both")
    _caption(figure, caption)
    write_figure_atomically(path, figure, dpi=110)
    plt.close(figure)
    return path
