"""The model shapes and length x batch cases of the throughput configurations (paper, tiny)."""

from __future__ import annotations

from dataclasses import dataclass

from ... import registry

# Heads at the language-model shape, as each model's paper sizes them; presets of a factory inherit
# its entry. Any other backbone gets heads of width 64.
LANGUAGE_MODEL_HEADS = {
    "gated_deltanet": {"n_heads": 6},  # key = value width 128
    "prism": {"n_heads": 6},  # built on Gated DeltaNet: width 128
    "mamba2": {"n_heads": 24, "d_state": 128},  # expand 2 -> 1536 channels, head width 64, state 128
}
DEFAULT_HEAD_WIDTH = 64


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
