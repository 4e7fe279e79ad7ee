"""Which explanation of the paper's ordering the data support (issue 39), from per-seed test AUCs.

The ordering (PRISM near SASRec, above Gated DeltaNet) *appears* in a cell when PRISM minus Gated DeltaNet
is positive with Welch's p < 0.05 over seeds (``prism_rec.statistics.welch``). Cells: protocol (authors,
next-item) x implementation (the authors' presets prism-authors / gdn-authors, the faithful prism /
gated_deltanet), and under the authors' protocol per-backbone heads or equal heads. The explanations:

- protocol: it appears under the authors' protocol for both implementations and under neither in next-item;
- implementation: it appears with the authors' presets under both protocols and with the faithful pair
  under neither;
- head widths: it appears with per-backbone heads and vanishes with equal heads, for every implementation
  it appears with;
- noise: it appears nowhere and, under each protocol, no two of the backbones (and the null backbone:
  model.NullMixer under the authors' protocol, baselines/null.py under next-item) differ (every Welch
  p >= 0.05).

Any that hold are stated (head widths beside protocol says which part of the protocol carries it); with
none, the pattern is stated as it is. Until every required arm has all its seeds at its chosen rate:
"not resolved yet: N of M runs" and what is missing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from ...statistics import ALPHA, welch
from .design import PER_BACKBONE, equal_heads_retrain
from .model import NULL

AUTHORS, NEXT_ITEM = "authors", "next-item"
EQUAL = "equal"
IMPLEMENTATIONS = {"the authors' presets": ("prism-authors", "gdn-authors"),
                   "the faithful backbones": ("prism", "gated_deltanet")}
BACKBONES = ("prism-authors", "gdn-authors", "prism", "gated_deltanet", "sasrec")
HEADS = {AUTHORS: (PER_BACKBONE, EQUAL), NEXT_ITEM: ("-",)}


Retrains = Callable[[str], bool]  # whether the equal-heads arm retrains a model (design.equal_heads_retrain)


def required_arms(retrains: Retrains = equal_heads_retrain) -> list[tuple[str, str, str]]:
    """The arms the decision needs, each once: (protocol, model, heads). Equal heads: the models ``retrains``;
    the null backbone under both protocols (baselines/null.py for next-item)."""
    arms = [(AUTHORS, model, PER_BACKBONE) for model in (*BACKBONES, NULL)]
    arms += [(AUTHORS, model, EQUAL) for model in (*BACKBONES, NULL) if retrains(model)]
    arms += [(NEXT_ITEM, model, "-") for model in (*BACKBONES, NULL)]
    return arms


def _arm(values: dict, protocol: str, model: str, heads: str, retrains: Retrains) -> list[float]:
    if heads == EQUAL and not retrains(model):  # its per-backbone runs are its equal-heads arm
        heads = PER_BACKBONE
    return values.get((protocol, model, heads), [])


def appears(values: dict, protocol: str, implementation: str, heads: str,
            retrains: Retrains = equal_heads_retrain) -> bool:
    prism, gdn = IMPLEMENTATIONS[implementation]
    comparison = welch(_arm(values, protocol, prism, heads, retrains), _arm(values, protocol, gdn, heads, retrains))
    return comparison.mean > 0 and math.isfinite(comparison.p) and comparison.p < ALPHA


def within_noise(values: dict, protocol: str, heads: str, retrains: Retrains = equal_heads_retrain) -> bool:
    """No two of the backbones (and null, where it has runs) differ under ``protocol``: every Welch p >= ALPHA."""
    arms = [_arm(values, protocol, model, heads, retrains) for model in (*BACKBONES, NULL)]
    arms = [arm for arm in arms if arm]
    return all(not (welch(a, b).p < ALPHA) for a, b in itertools.combinations(arms, 2))


def missing(values: dict, seeds: int, retrains: Retrains = equal_heads_retrain) -> tuple[int, int, list[str]]:
    """(runs there, runs needed, one phrase per incomplete arm)."""
    have, phrases = 0, []
    arms = required_arms(retrains)
    for protocol, model, heads in arms:
        count = min(len(values.get((protocol, model, heads), [])), seeds)
        have += count
        if count < seeds:
            where = f"{protocol} protocol" + (f", {heads} heads" if heads != "-" else "")
            phrases.append(f"{model} ({where}): {count} of {seeds} seeds at a chosen rate")
    return have, len(arms) * seeds, phrases


def explain(values: dict[tuple[str, str, str], list[float]], seeds: int,
            retrains: Retrains = equal_heads_retrain) -> str:
    """The plain statement: which explanations the per-seed values of each arm support, or what is missing.

    ``values``: {(protocol, model, heads): per-seed test AUC at the arm's chosen rate}; heads is
    per-backbone or equal under the authors' protocol, "-" under next-item."""
    have, need, phrases = missing(values, seeds, retrains)
    if have < need:
        return f"Not resolved yet: {have} of {need} runs. Missing: " + "; ".join(phrases) + "."
    cells = {(protocol, implementation, heads): appears(values, protocol, implementation, heads, retrains)
             for protocol in HEADS for implementation in IMPLEMENTATIONS for heads in HEADS[protocol]}
    presets, faithful = IMPLEMENTATIONS
    seen = lambda protocol, implementation, heads=PER_BACKBONE: cells[(protocol, implementation,  # noqa: E731
                                                                       heads if protocol == AUTHORS else "-")]
    supported = []
    if seen(AUTHORS, presets) and seen(AUTHORS, faithful) and not (seen(NEXT_ITEM, presets) or
                                                                   seen(NEXT_ITEM, faithful)):
        supported.append("the protocol (the ordering appears under the authors' protocol for both "
                         "implementations and under neither in next-item)")
    if seen(AUTHORS, presets) and seen(NEXT_ITEM, presets) and not (seen(AUTHORS, faithful) or
                                                                    seen(NEXT_ITEM, faithful)):
        supported.append("the implementations (the ordering appears with the authors' presets under both "
                         "protocols and with the faithful backbones under neither)")
    per_backbone = [i for i in IMPLEMENTATIONS if seen(AUTHORS, i)]
    if per_backbone and not any(seen(AUTHORS, i, EQUAL) for i in per_backbone):
        supported.append(f"the head widths (the ordering appears with per-backbone heads for "
                         f"{' and '.join(per_backbone)} and vanishes with equal heads)")
    if not any(cells.values()) and all(within_noise(values, protocol, heads, retrains)
                                       for protocol in HEADS for heads in HEADS[protocol]):
        supported.append("noise (the ordering appears nowhere and the backbones are within the seed "
                         "interval of each other and of the null backbone)")
    if supported:
        return "The data support: " + "; and ".join(supported) + "."
    where = [f"{protocol}, {implementation}" + (f", {heads} heads" if heads != "-" else "")
             for (protocol, implementation, heads), shown in cells.items() if shown]
    if not where:
        return ("None of the four explanations fits: the ordering appears in no cell, but some backbones differ "
                "beyond the seed interval, so it is not noise either: the paper's ordering is not reproduced.")
    return ("None of the four explanations fits: the ordering appears only in " + "; ".join(where) + ".")


def cell_rows(values: dict[tuple[str, str, str], list[float]],
              retrains: Retrains = equal_heads_retrain) -> list[list[str]]:
    """One row per cell: PRISM minus Gated DeltaNet and minus SASRec over seeds (Welch), and whether it appears."""
    rows = []
    for protocol in HEADS:
        for implementation, (prism, gdn) in IMPLEMENTATIONS.items():
            for heads in HEADS[protocol]:
                a, b, s = (_arm(values, protocol, m, heads, retrains) for m in (prism, gdn, "sasrec"))
                if not (a and b):
                    rows.append([protocol, implementation, heads, f"{len(a)}, {len(b)}", "—", "—", "—", "—", "no data"])
                    continue
                gap = welch(a, b)
                near = f"{welch(a, s).mean:+.4f}" if s else "—"
                interval = f"[{gap.low:+.4f}, {gap.high:+.4f}]" if math.isfinite(gap.p) else "—"
                shown = appears(values, protocol, implementation, heads, retrains)
                rows.append([protocol, implementation, heads, f"{len(a)}, {len(b)}", f"{gap.mean:+.4f}", interval,
                             f"{gap.p:.3g}", near, "yes" if shown else "no"])
    return rows
