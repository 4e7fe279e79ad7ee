"""PNG charts for the MLflow runs: a child run's learning curve, a benchmark's test AUC per model."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import pandas as pd  # noqa: E402

from .files import write_figure_atomically  # noqa: E402


def learning_curve(history: list[dict], title: str) -> plt.Figure:
    """Train loss and validation AUC per epoch, side by side."""
    epochs = range(1, len(history) + 1)
    figure, (loss_axes, auc_axes) = plt.subplots(1, 2, figsize=(9, 3.5), layout="constrained")
    loss_axes.plot(epochs, [row["train_loss"] for row in history], marker="o")
    loss_axes.set(xlabel="epoch", ylabel="train loss (cross-entropy)", title="training loss")
    auc_axes.plot(epochs, [row["valid_auc"] for row in history], marker="o", color="tab:green")
    auc_axes.set(xlabel="epoch", ylabel="validation AUC", title="validation AUC")
    for axes in (loss_axes, auc_axes):
        axes.grid(alpha=0.3)
        axes.xaxis.get_major_locator().set_params(integer=True)
    figure.suptitle(title)
    return figure


def _caption(figure: plt.Figure, caption: str) -> None:
    """``caption`` in small type under the axes (the figure must use the constrained layout)."""
    if caption:
        figure.supxlabel(caption, fontsize=7, wrap=True)


def auc_bar_chart(summary: pd.DataFrame, title: str, path: Path, caption: str = "") -> Path:
    """Bar per model of the mean test AUC with error bars of the sample std over seeds, ``caption`` under
    it; writes ``path``."""
    figure, axes = plt.subplots(figsize=(max(4.0, 1.1 * len(summary) + 2), 3.8), layout="constrained")
    errors = summary["auc_std"].fillna(0.0)
    axes.bar(summary["model"], summary["auc_mean"], yerr=errors, capsize=4, color="tab:blue")
    low = (summary["auc_mean"] - errors).min()
    axes.set_ylim(max(0.0, low - 0.05), min(1.0, (summary["auc_mean"] + errors).max() + 0.02))
    axes.set(ylabel="test AUC (mean ± std over seeds)", title=title)
    for position, (mean, seeds) in enumerate(zip(summary["auc_mean"], summary["n_seeds"])):
        axes.annotate(f"{mean:.4f}\n{seeds} seed{'s' if seeds > 1 else ''}", (position, mean), ha="center",
                      va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    axes.tick_params(axis="x", rotation=30)
    axes.grid(axis="y", alpha=0.3)
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
