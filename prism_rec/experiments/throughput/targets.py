"""The throughput targets checked against the paper's figures."""

from __future__ import annotations

from .measure import BackboneResults
from .shapes import Configuration, base_backbone

# Backbones whose cost per token should not grow with length (chunked linear scans); presets included.
LINEAR_BACKBONES = ("gated_deltanet", "mamba2", "prism")
PAPER_TOKENS_PER_S = {"prism_16k": 57_000, "ttt_linear": 340, "transformer_pp_2k": 71_400,
                      "transformer_pp_slowdown_16k": 3.8}


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
