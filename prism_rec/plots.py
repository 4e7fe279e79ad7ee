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


def auc_bar_chart(summary: pd.DataFrame, title: str, path: Path) -> Path:
    """Bar per model of the mean test AUC with error bars of the sample std over seeds; writes ``path``."""
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
    write_figure_atomically(path, figure, dpi=110)
    plt.close(figure)
    return path
